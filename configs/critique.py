"""Self-critique and persistent memory: retries with no, oracle, learned and noisy critics.

  python3 scripts/critique.py --config=configs/critique.py:small --workdir=/tmp/critique

Variants: "small" (the default, `critique.default_config()`: 5 seeds, a few minutes on a
2-core CPU), "smoke" (tiny, what the tests run), "gpu" (more seeds and episodes). Every
field is documented in credit_jax/experiments/critique/study.py.
"""
from credit_jax.experiments import critique


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "small", "smoke", "gpu")."""
  c = critique.default_config()
  if arg in (None, "", "small"):
    pass
  elif arg == "smoke":
    c.seeds = 2
    c.num_updates = 60
    c.num_envs = 32
    c.eval_episodes = 128
    c.noises = (0.0, 0.5, 1.0)
    c.critic_steps = 100
    c.critic_batch = 64
    c.improvement_steps = 30
    c.capacities = (0, 8)
    c.memory_episodes = 24
    c.memory_streams = 8
  elif arg == "gpu":
    c.seeds = 16
    c.eval_episodes = 8192
    c.memory_streams = 512
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'small' (default), 'smoke' or 'gpu'")
  return c
