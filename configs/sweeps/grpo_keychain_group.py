"""GRPO on KeyChain-v0: group size x difficulty (pivotal steps k), a compile per cell.

  python3 scripts/sweep.py --config=configs/sweeps/grpo_keychain_group.py --workdir=/tmp/sw_g
  python3 scripts/sweep.py --config=configs/sweeps/grpo_keychain_group.py:small --workdir=...

Group size and the environment both change shapes, so every cell is its own compiled call
(its seeds vmapped in it): 4 x 3 = 12 compiles. Variants: none, "small" (2 x 2 cells of
GRPO's small config, 2 seeds: about a minute on a 2-core CPU).
"""
import ml_collections


def get_config(arg=None):
  """Returns the sweep config; `arg` picks a variant (None or "small")."""
  c = ml_collections.ConfigDict()
  c.base = "configs/grpo_keychain.py"  # base config file[:variant], relative to the repo
  c.experiment = ""               # "": a recipe (vmappable); else an experiment's name
  c.overrides = ml_collections.ConfigDict()   # base fields set before the axes
  c.axes = ml_collections.ConfigDict()        # one tuple of values per swept field
  c.axes.group_size = (2, 4, 8, 16)           # K rollouts per task
  c.axes.env_kwargs = ml_collections.ConfigDict()
  c.axes.env_kwargs.num_pivotal = (1, 2, 3)   # difficulty: random success (1/4)^k
  c.seeds = 4                     # seeds per cell (vmapped)
  c.metric = "success"            # metric of the figures
  c.metrics = ("success", "degenerate_frac", "loss")  # metrics reported per cell and seed
  c.thresholds = ml_collections.ConfigDict()  # first env step each metric reaches these
  c.thresholds.success = (0.5, 0.9)
  c.minimize = ("loss", "degenerate_frac")    # metrics whose best is their minimum
  c.final_window = 5              # final_<m>: mean of the last this many updates
  c.cells_per_call = 0            # >0: split a group of vmapped cells into calls of this many
  c.memory_limit_gb = 0.0         # estimated memory a call may use; 0: half of RAM (CPU)

  if arg == "small":
    c.base = "configs/grpo_keychain.py:small"
    c.axes.group_size = (2, 4)
    c.axes.env_kwargs.num_pivotal = (1, 2)
    c.seeds = 2
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none or 'small'")
  return c
