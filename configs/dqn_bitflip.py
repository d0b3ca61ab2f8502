"""DQN + HER on BitFlip-v0 (n = 15 bits; the HER paper's experiment).

  python3 scripts/train.py --config=configs/dqn_bitflip.py --workdir=/tmp/dqn_her
  python3 scripts/train.py --config=configs/dqn_bitflip.py:noher --workdir=/tmp/dqn
  python3 scripts/train.py --config=configs/dqn_bitflip.py:small --workdir=/tmp/dqn_s

Variants: none (n = 15, HER `future` with k = 4, 300 cycles), "noher" (the same without
relabeling: plain DQN), "small" (n = 6 for 20 cycles, seconds on a 2-core CPU). Every
field and its meaning: `credit_jax/algos/dqn.py`'s `default_config()`, which the default
variant is. The relabeling experiment (configs/relabel.py) runs `config(n, her)` for
several n, with and without HER.
"""
from credit_jax.algos import dqn


def config(num_bits: int = 15, her: bool = True):
  """DQN(+HER) on BitFlip-v0 with `num_bits` bits; `her=False`: no relabeling."""
  c = dqn.default_config()
  c.env_kwargs.num_bits = num_bits
  c.horizon = num_bits            # the env's episode limit
  c.relabel_weight = 1.0 if her else 0.0
  return c


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None, "noher" or "small")."""
  if arg == "noher":
    return config(her=False)
  if arg == "small":
    c = config(num_bits=6)
    c.update(num_updates=20, grad_steps=10, eval_envs=16, buffer_size=10_000,
             chunk_updates=5)
    return c
  if arg:
    raise ValueError(f"unknown variant {arg!r}; use none, 'noher' or 'small'")
  return config()
