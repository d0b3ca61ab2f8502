"""Experiment 1: variance of the policy-gradient estimator against horizon on KeyChain-v0.

  python3 scripts/variance_scaling.py --config=configs/variance_scaling.py:small \
      --workdir=/tmp/variance_scaling
  python3 scripts/variance_scaling.py --config=configs/variance_scaling.py:gpu --workdir=...

Variants: "small" (the default, `variance_scaling.default_config()`: T up to 3000, a few
minutes on a 2-core CPU), "smoke" (two short horizons, seconds: what the tests run),
"gpu" (T up to 10^5, seeds mapped in chunks of 8 to bound memory; not run yet: no
accelerator was available). Every field is documented in
credit_jax/experiments/variance_scaling/study.py.
"""
from credit_jax.experiments import variance_scaling


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "small", "smoke", "gpu")."""
  c = variance_scaling.default_config()
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
