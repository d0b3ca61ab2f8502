"""PPO on CartPole-v1 with PureJaxRL's default settings (the end-to-end PPO benchmark).

  python3 scripts/train.py --config=configs/ppo_cartpole.py --workdir=/tmp/ppo
  python3 scripts/train.py --config=configs/ppo_cartpole.py:small --workdir=/tmp/ppo_small
  python3 scripts/train.py --config=configs/ppo_cartpole.py --config.seeds=16 --workdir=...

Variants: none (5e5 steps, reaches return ~500) or "small" (a quick check that runs
in well under a minute on a 2-core CPU; it does not solve the task). Every field and its
meaning: `credit_jax/algos/ppo.py`'s `default_config()`, which this file is.
"""
from credit_jax.algos import ppo


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "small")."""
  c = ppo.default_config()
  if arg == "small":
    c.total_timesteps = 20_480    # 40 updates of 4 x 128
    c.chunk_updates = 10
    c.checkpoint_every = 20
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none or 'small'")
  return c
