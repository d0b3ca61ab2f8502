"""REINFORCE on KeyChain-v0, with a choice of credit (terminal | rtg | gae) and baseline.

  python3 scripts/train.py --config=configs/reinforce_keychain.py --workdir=/tmp/rf
  python3 scripts/train.py --config=configs/reinforce_keychain.py:small --workdir=/tmp/rf_s
  python3 scripts/train.py --config=configs/reinforce_keychain.py \
      --config.credit=gae --config.baseline=value --workdir=/tmp/rf_gae

Variants: none, "small" (a quick check that runs in well under a minute on a 2-core CPU).
Every field and its meaning: `credit_jax/algos/reinforce.py`'s `default_config()`, which
the default variant is.
"""
from credit_jax.algos import reinforce


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "small")."""
  c = reinforce.default_config()
  if arg == "small":
    c.num_updates = 20
    c.num_envs = 16
    c.chunk_updates = 5
    c.checkpoint_every = 5
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none or 'small'")
  return c
