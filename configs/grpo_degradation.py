"""Experiment 2: where GRPO stops informing: degenerate groups against the success rate.

  python3 scripts/grpo_degradation.py --config=configs/grpo_degradation.py:small \
      --workdir=/tmp/grpo_degradation

Variants: "small" (the default, `grpo_degradation.default_config()`: 11 difficulties from
0.1% to 95% success, K = 4, 8, 16; a Beta(0.5, 4.5) task pool; 16 seeds of GRPO on
KeyChain k = 5; a few minutes on a 2-core CPU), "smoke" (three
points, no pool or training run unless `--config.parts=pt`, a few seconds: what the
tests run), "gpu" (more groups per point, for tighter
error bars). Every field is documented in credit_jax/experiments/grpo_degradation/study.py.
"""
from credit_jax.experiments import grpo_degradation


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "small", "smoke", "gpu")."""
  c = grpo_degradation.default_config()
  if arg in (None, "", "small"):
    pass
  elif arg == "smoke":
    c.difficulties = ((3, 2, 0.0), (1, 2, 0.0), (1, 2, 0.9))
    c.group_sizes = (4, 8)
    c.num_tasks = 64
    c.seeds = 4
    c.parts = ""   # the sweep only; tests/test_experiment_grpo_pool.py adds "pt"
    c.train.env_kwargs.num_pivotal = 2
    c.train.update(num_updates=4, chunk_updates=4, seeds=2, num_tasks=4, group_size=4,
                   num_minibatches=1)
    c.train.network.hidden_sizes = (16,)
  elif arg == "gpu":
    c.num_tasks = 4096
    c.seeds = 64
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'small' (default), 'smoke' or 'gpu'")
  return c
