"""The probes measurement: which of KeyChain's shortcuts make long horizons easy.

  python3 scripts/probes.py --config=configs/probes.py --workdir=runs/probes

Variants: "full" (the default, `probes.default_config()`: GRPO K = 8 and PPO lambda 1 /
0.95 at T = 100 and 1000 on KeyChain with each shortcut switch alone, all together and
none, and on LinearKeyToDoor at L = 103; 5 seeds, 1.28M env steps per seed and cell;
docs/results/probes.md reports it), "smoke" (two tiny cells, a few seconds: what the
tests run), "credit_horizon" (tabular REINFORCE's updates to 90% on the credit probe
against T, exact J by DP), "gradient_bias" (the lambda = 1 estimator against the DP
gradient at T = 1000). Every field is documented in credit_jax/experiments/probes/study.py.
"""
from credit_jax.experiments import probes


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "full", "smoke")."""
  c = probes.default_config()
  if arg in (None, "", "full"):
    pass
  elif arg in ("credit_horizon", "gradient_bias"):
    c.study = arg   # credit_jax/experiments/probes/credit_horizon.py
    c.seeds = 10
    c.horizons = (10, 30, 100, 300, 1000) if arg == "credit_horizon" else c.horizons
  elif arg == "smoke":
    c.seeds = 2
    c.horizons = (10,)
    c.settings = ("default", "all")
    c.corridor_lengths = (6,)
    c.methods = ("grpo_k8", "ppo_l1")
    c.episodes = 16
    c.budget_env_steps = 16 * 10 * 2
    c.hidden_sizes = (8,)
    c.chunk_updates = 2
    c.eval_episodes = 8
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'full' (default), 'smoke', "
                     f"'credit_horizon' or 'gradient_bias'")
  return c
