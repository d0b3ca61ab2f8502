"""GRPO + hindsight relabeling on GoalGrid-v0 (9x9 grid, any cell a goal, 18 steps).

  python3 scripts/train.py --config=configs/grpo_relabel_goalgrid.py --workdir=/tmp/gh
  python3 scripts/train.py --config=configs/grpo_relabel_goalgrid.py:iw --workdir=...
  python3 scripts/train.py --config=configs/grpo_relabel_goalgrid.py:small --workdir=...

Variants: none (relabel="plain"), "none" (plain GRPO, the control arm), "iw" (relabeled
episodes importance-weighted), "small" (a 3x3 grid for 10 updates, seconds on a 2-core
CPU). Every field and its meaning: `credit_jax/algos/grpo_relabel.py`'s
`default_config()`, which the default variant is; what the modes measured on this task:
configs/relabel.py.
"""
from credit_jax.algos import grpo_relabel


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None, "none", "iw" or "small")."""
  c = grpo_relabel.default_config()
  if arg in ("none", "iw"):
    c.relabel = arg
  elif arg == "small":
    c.env_kwargs.update(size=3, max_steps_in_episode=4)
    c.update(horizon=4, num_updates=10, num_tasks=4, group_size=4, chunk_updates=5)
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none, 'none', 'iw' or 'small'")
  return c
