"""Experiment 1 (variance of the policy gradient against horizon) over k and A.

  python3 scripts/sweep.py --config=configs/sweeps/variance_scaling.py --workdir=/tmp/sw_var
  python3 scripts/sweep.py --config=configs/sweeps/variance_scaling.py:small --workdir=...

Each cell (pivotal steps k x actions A) and seed is one run of the variance-scaling
experiment (its horizons are its own inner loop); experiments are not vmapped, so every
run is its own call. `seeds` here are repetitions with `config.seed` = base seed + i,
each already averaging the experiment's own `seeds`. The figures show the fitted log-log
slope of the terminal-reward estimator's variance against T. Variants: none, "small"
(the experiment's smoke config, k in {1, 2}, 2 repetitions).
"""
import ml_collections


def get_config(arg=None):
  """Returns the sweep config; `arg` picks a variant (None or "small")."""
  c = ml_collections.ConfigDict()
  c.base = "configs/variance_scaling.py:small"  # the experiment's config file[:variant]
  c.experiment = "variance_scaling"  # credit_jax.experiments.<name>, or scripts/<name>.py
  c.overrides = ml_collections.ConfigDict()   # base fields set before the axes
  c.axes = ml_collections.ConfigDict()        # one tuple of values per swept field
  c.axes.num_pivotal = (1, 2, 3)  # pivotal steps k
  c.axes.num_actions = (2, 4)     # actions A (powers of two)
  c.seeds = 3                     # repetitions per cell (config.seed = base seed + i)
  c.metric = "slope.terminal"     # the figures' metric (a dotted key of summary.json)
  c.metrics = ("slope.terminal", "slope.rtg_gamma0.99", "slope.gae_fitted_gamma0.99")
  c.thresholds = ml_collections.ConfigDict()  # (unused: experiments report final values)
  c.minimize = ()                 # metrics whose best is their minimum
  c.final_window = 1              # (unused by experiments)
  c.cells_per_call = 0            # (unused by experiments: one call per run)
  c.memory_limit_gb = 0.0         # (unused by experiments)

  if arg == "small":
    c.base = "configs/variance_scaling.py:smoke"
    c.axes.num_pivotal = (1, 2)
    c.axes.num_actions = (4,)
    c.seeds = 2
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none or 'small'")
  return c
