"""The horizon answer (issue 51), part A: the anatomy of the gradient at fixed tabular
policies, every estimator against the exact DP gradient.

  python3 scripts/horizon.py --config=configs/horizon.py:small --workdir=runs/horizon_small
  python3 scripts/horizon.py --config=configs/horizon.py:full --workdir=runs/horizon

Variants: "full" (the default: the credit probe at sigma 0 and 0.5 and the default
KeyChain at T = 10 ... 3000, the corridor at L = 23 ... 1000, 3 policies, 4,096 episodes
per set), "small" (T <= 100, L = 23 and 103, 512 episodes: a few minutes on 2 cores).
Every field is documented in credit_jax/experiments/horizon_answer/study.py.
"""
from credit_jax.experiments import horizon_answer


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "full", "small")."""
  c = horizon_answer.default_config()
  if arg in (None, "", "full"):
    pass
  elif arg == "small":
    c.horizons = (10, 30, 100)
    c.corridor_lengths = (23, 103)
    c.episodes = 512
    c.bootstrap = 100
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'full' (default) or 'small'")
  return c
