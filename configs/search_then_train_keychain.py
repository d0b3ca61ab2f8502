"""Search then train (GRPO whose all-failed groups are rescued by tree search) on KeyChain.

  python3 scripts/train.py --config=configs/search_then_train_keychain.py --workdir=/tmp/stt
  python3 scripts/train.py --config=configs/search_then_train_keychain.py:small --workdir=...

Variants: none (T = 10, k = 6, A = 4: random success 2.4e-4; 4 seeds x 60 updates, part
B of the tree-search experiment, configs/tree_search.py), "small" (T = 6, k = 2, 4 tasks
x 2 episodes, 16 simulations: seconds on a 2-core CPU; what the recipe's tests run).
Every field and its meaning: `credit_jax/algos/search_then_train.py`'s
`default_config()`.
"""
from credit_jax.algos import train as train_lib, search_then_train


def config(horizon: int = 10, num_pivotal: int = 6):
  """The recipe on KeyChain with episode length `horizon` and `num_pivotal` pivotal steps."""
  c = train_lib.keychain_env(search_then_train.default_config(), horizon, num_pivotal)
  c.seeds = 4                     # seeds vmapped in one compiled call
  return c


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "small")."""
  if arg == "small":
    c = config(horizon=6, num_pivotal=2)
    c.update(num_updates=4, chunk_updates=2, seeds=2, num_tasks=4, group_size=2,
             search_tasks=4, search_simulations=16)
    c.network.hidden_sizes = (16,)
    return c
  if arg:
    raise ValueError(f"unknown variant {arg!r}; use none or 'small'")
  return config()
