"""The horizon answer (issue 51): part A, the anatomy of the gradient at fixed tabular
policies, every estimator against the exact DP gradient; part B, tabular policies
learning the credit probe and the control, updates and env steps to exact J >= 0.9.

  python3 scripts/horizon.py --config=configs/horizon.py:small --workdir=runs/horizon_small
  python3 scripts/horizon.py --config=configs/horizon.py:full --workdir=runs/horizon
  python3 scripts/horizon.py --config=configs/horizon.py:full --workdir=runs/horizon --config.part=B

Variants: "full" (the default. A: the credit probe at sigma 0 and 0.5 and the default
KeyChain at T = 10 ... 3000, the corridor at L = 23 ... 1000, 3 policies, 4,096 episodes
per set. B: the probe at sigma 0 and the control at T = 10 ... 1000, ten arms, rates
tuned at T = 100 on 4 seeds x 3 rates, 10 reported seeds, a budget of 3,000 updates),
"small" (A: T <= 100, L = 23 and 103, 512 episodes; B: T = 10 and 30, rates tuned at
T = 30 on 2 seeds x 3 rates with 300 updates, 6 reported seeds, 600 updates).
`--config.part=A` or `=B` runs one part. Every field is documented in
credit_jax/experiments/horizon_answer/study.py and learning.py.
"""
from credit_jax.experiments import horizon_answer


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "full", "small")."""
  c = horizon_answer.default_config()
  c.part = "AB"
  if arg in (None, "", "full"):
    pass
  elif arg == "small":
    c.horizons = (10, 30, 100)
    c.corridor_lengths = (23, 103)
    c.episodes = 512
    c.bootstrap = 100
    b = c.learning
    b.horizons = (10, 30)
    b.tune_horizon = 30
    b.tune_seeds = 2
    b.tune_max_updates = 300
    b.seeds = 6
    b.max_updates = 600
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'full' (default) or 'small'")
  return c
