"""Manager / worker on GoalGrid-v0 (16x16 grid, corner goals, 192 steps, a subgoal every 16).

  python3 scripts/train.py --config=configs/hierarchy_goalgrid.py --workdir=/tmp/hier
  python3 scripts/train.py --config=configs/hierarchy_goalgrid.py:small --workdir=...
  python3 scripts/train.py --config=configs/hierarchy_goalgrid.py:norelabel --workdir=...

Variants: none (`hierarchy.default_config()`: 16x16, T = 192, K = 16, 60 updates),
"norelabel" (the worker learns from its real subgoals only), "small" (a 5x5 grid, 12
steps, K = 4, 10 updates: seconds on a 2-core CPU). Every field and its meaning:
`credit_jax/algos/hierarchy.py`'s `default_config()`; hierarchy vs flat GRPO / PPO at
equal env steps: part (c) of configs/curriculum.py.
"""
from credit_jax.algos import hierarchy


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None, "norelabel" or "small")."""
  c = hierarchy.default_config()
  if arg == "norelabel":
    c.worker_relabel = False
  elif arg == "small":
    c.env_kwargs.update(size=5, max_steps_in_episode=12)
    c.update(horizon=12, segment_length=4, subgoal_stride=2, num_updates=10, num_tasks=4,
             group_size=4, chunk_updates=5)
    c.network.hidden_sizes = (32,)
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none, 'norelabel' or 'small'")
  return c
