"""The remedies on the horizon axis (credit_jax/experiments/horizon/remedies.py):
hindsight relabeling, search-then-train and the horizon curriculum, each against GRPO
at equal env steps and at equal updates, as T grows.

  python3 scripts/horizon_remedies.py --config=configs/horizon_remedies.py:small --workdir=DIR
  python3 scripts/horizon_remedies.py --config=configs/horizon_remedies.py:t1000 --workdir=DIR

Variants:
  "small" (the default; sized for <= ~10 min on 2 idle CPU cores): 5 seeds; relabeling
      on GoalGrid at T = 100 and 300 (grids 33x33, 100x100); search-then-train and the
      curriculum on KeyChain (k = 3, A = 4) at T = 100.
  "t1000": every part at T = 1000 (GoalGrid 333x333; KeyChain k = 3), 5 seeds, 40
      updates for the KeyChain parts (about an hour on 2 loaded cores; see
      docs/results/horizon.md).
  "smoke": seconds; what the tests run.
Every field is documented in credit_jax/experiments/horizon/remedies.py's default_config().
"""
from credit_jax.experiments.horizon import remedies as horizon_remedies


def get_config(arg=None):
  """Returns the config; `arg` picks a variant ("small" default, "t1000", "smoke")."""
  c = horizon_remedies.default_config()
  if arg in (None, "", "small"):
    pass
  elif arg == "t1000":
    c.parts = ("search", "relabel", "curriculum")
    c.relabel.horizons = (1000,)
    c.search.horizons, c.search.num_updates = (1000,), 40
    c.curriculum.horizons = (1000,)
    c.curriculum.stage_fractions = (0.03, 0.1, 1.0)
  elif arg == "smoke":
    c.seeds, c.chunk_updates, c.smooth, c.hold = 2, 2, 1, 1
    c.relabel.horizons, c.relabel.num_updates = (9,), 2
    c.relabel.num_tasks, c.relabel.group_size, c.relabel.hidden_sizes = 2, 2, (8,)
    c.search.horizons, c.search.num_updates, c.search.num_pivotal = (6,), 2, 2
    c.search.num_tasks, c.search.group_size, c.search.hidden_sizes = 2, 2, (8,)
    c.search.search_tasks, c.search.simulations = 2, 4
    c.curriculum.horizons, c.curriculum.num_updates, c.curriculum.num_pivotal = (8,), 2, 2
    c.curriculum.stage_fractions, c.curriculum.eval_every = (0.5, 1.0), 1
    c.curriculum.eval_episodes, c.curriculum.hidden_sizes = 4, (8,)
    c.curriculum.num_tasks, c.curriculum.group_size = 2, 2
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'small' (default), 't1000' or 'smoke'")
  return c
