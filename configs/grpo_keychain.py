"""GRPO on KeyChain-v0 (T=50 steps, k=3 pivotal steps, A=4 actions: random success 1.6%).

  python3 scripts/train.py --config=configs/grpo_keychain.py --workdir=/tmp/grpo
  python3 scripts/train.py --config=configs/grpo_keychain.py:small --workdir=/tmp/grpo_s
  python3 scripts/train.py --config=configs/grpo_keychain.py:delay --workdir=/tmp/grpo_d

Variants: none (reaches >= 90% success), "small" (a quick check that runs in well under a
minute on a 2-core CPU), "delay" (cues shown 3 steps before their pivotal step, so the
policy needs memory: a history window of 4 observations). Every field and its meaning:
`credit_jax/algos/grpo.py`'s `default_config()`, which the default variant is.
"""
from credit_jax.algos import grpo


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None, "small" or "delay")."""
  c = grpo.default_config()
  if arg == "small":
    c.num_updates = 10
    c.num_tasks = 8
    c.group_size = 4
    c.chunk_updates = 5
    c.checkpoint_every = 5
  elif arg == "delay":
    c.env_kwargs.cue_delay = 3
    c.history_window = 4          # needs >= cue_delay + 1
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none, 'small' or 'delay'")
  return c
