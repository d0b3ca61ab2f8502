"""PPO on CartPole-v1: learning rate x seeds, every run in one compiled call.

  python3 scripts/sweep.py --config=configs/sweeps/ppo_cartpole_lr.py --workdir=/tmp/sw_ppo
  python3 scripts/sweep.py --config=configs/sweeps/ppo_cartpole_lr.py:small --workdir=...

`lr` is a traced hyperparameter of PPO, so the 8 values x 8 seeds are 64 runs vmapped in
one compiled program (benchmarks/bench_sweep.py measures that against 64 train.py runs).
Variants: none (1e5 env steps per run), "small" (3 values x 2 seeds, 20k steps: seconds),
"bench" (what benchmarks/bench_sweep.py runs).
"""
import ml_collections


def get_config(arg=None):
  """Returns the sweep config; `arg` picks a variant (None, "small" or "bench")."""
  c = ml_collections.ConfigDict()
  c.base = "configs/ppo_cartpole.py"  # base config file[:variant], relative to the repo
  c.experiment = ""               # "": a recipe (vmappable); else an experiment's name
  c.overrides = ml_collections.ConfigDict()   # base fields set before the axes
  c.overrides.total_timesteps = 102_400       # 200 updates of 4 x 128 env steps
  c.overrides.chunk_updates = 50  # updates per compiled chunk (one progress line each)
  c.overrides.checkpoint_every = 100  # updates between checkpoints
  c.axes = ml_collections.ConfigDict()        # one tuple of values per swept field
  c.axes.lr = (1e-4, 2e-4, 3.5e-4, 6e-4, 1e-3, 2e-3, 3.5e-3, 6e-3)
  c.seeds = 8                     # seeds per cell (vmapped with the traced axes)
  c.metric = "return"             # metric of results.md's order and of the figures
  c.metrics = ("return", "entropy", "loss")   # metrics reported per cell and seed
  c.thresholds = ml_collections.ConfigDict()  # first env step each metric reaches these
  c.thresholds["return"] = (100.0, 200.0, 400.0)
  c.minimize = ("loss",)          # metrics whose best is their minimum
  c.final_window = 10             # final_<m>: mean of the last this many updates
  c.cells_per_call = 0            # >0: split a group of vmapped cells into calls of this many
  c.memory_limit_gb = 0.0         # estimated memory a call may use; 0: half of RAM (CPU)

  if arg == "small":
    c.base = "configs/ppo_cartpole.py:small"
    c.overrides = ml_collections.ConfigDict()
    c.axes.lr = (3e-4, 1e-3, 3e-3)
    c.seeds = 2
  elif arg == "bench":
    c.overrides.total_timesteps = 51_200      # 100 updates
    c.overrides.chunk_updates = 100
    c.overrides.checkpoint_every = 100
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none, 'small' or 'bench'")
  return c
