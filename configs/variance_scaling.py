"""Experiment 1: variance of the policy-gradient estimator against horizon on KeyChain-v0.

  python3 scripts/variance_scaling.py --config=configs/variance_scaling.py:small \
      --workdir=/tmp/variance_scaling
  python3 scripts/variance_scaling.py --config=configs/variance_scaling.py:gpu --workdir=...

Variants: "small" (the default: T up to 3000, a few minutes on a 2-core CPU), "smoke"
(two short horizons, seconds: what tests/test_experiments.py runs), "gpu" (T up to 10^5,
seeds mapped in chunks of 8 to bound memory; not run yet: no accelerator was available).
"""
import ml_collections


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "small", "smoke", "gpu")."""
  c = ml_collections.ConfigDict()
  c.env_name = "KeyChain-v0"    # the credit-assignment probe (the only env with an exact gradient)
  c.num_pivotal = 2             # pivotal steps k per episode
  c.num_actions = 4             # actions A; a power of two keeps cues exactly uniform
  c.horizons = (10, 30, 100, 300, 1000, 3000)  # episode lengths T; one compiled call each
  c.num_trajectories = 100      # trajectories per seed and horizon whose gradients are measured
  c.num_fit_trajectories = 100  # separate trajectories per seed to fit the per-step value V(t)
  c.seeds = 32                  # independent repetitions, vmapped inside each compiled call
  c.seeds_per_chunk = 8         # >0: map over chunks of this many seeds (bounds memory); 0: all at once
  c.seed = 0                    # base RNG seed
  c.discounts = (1.0, 0.99)     # gamma values for returns-to-go and GAE
  c.gae_lambda = 0.95           # lambda of both GAE schemes
  c.min_slope_horizon = 10      # the log-log slope is fitted over horizons >= this

  if arg in (None, "", "small"):
    pass
  elif arg == "smoke":
    c.horizons = (10, 30)
    c.num_trajectories = 32
    c.num_fit_trajectories = 32
    c.seeds = 4
    c.seeds_per_chunk = 0
  elif arg == "gpu":
    c.horizons = (10, 30, 100, 300, 1000, 3000, 10000, 30000, 100000)
    c.seeds = 64
    c.seeds_per_chunk = 8
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'small' (default), 'smoke' or 'gpu'")
  return c
