"""Exercise 5: tree search vs sampling on KeyChain-v0, and GRPO with and without search.

  python3 scripts/tree_search.py --config=configs/tree_search.py:small --workdir=/tmp/ts

Part A (no training) compares, per difficulty, sampling K episodes per task with a tree
search from the same start states under the same policy, and sampling at the search's
compute. Part B trains the search-then-train recipe (`credit_jax.algos.search_then_train`)
with search on and off (the control arm is plain GRPO with the same loss) and plots both.
Part B's recipe alone, for scripts/train.py, is configs/search_then_train_keychain.py.

Variants: "small" (the default, `tree_search.default_config()`: a few minutes on a 2-core
CPU), "smoke" (seconds: what the tests run), "gpu" (more tasks, simulations and seeds).
Every field is documented in credit_jax/experiments/tree_search.py.
"""
from credit_jax.experiments import tree_search

train_config = tree_search.train_config   # part B's recipe config, for the recipe's tests


def get_config(arg=None):
  """Returns the config; `arg` picks a variant ("small" (default), "smoke", "gpu")."""
  c = tree_search.default_config()
  if arg in (None, "", "small"):
    pass
  elif arg == "smoke":
    c.difficulties = ((2, 0.0), (4, 0.5))
    c.num_tasks = 16
    c.search.simulations = 32
    c.train = train_config(horizon=6, num_pivotal=2)
    c.train.num_updates = 4
    c.train.chunk_updates = 2
    c.train.seeds = 2
    c.train.num_tasks = 4
    c.train.group_size = 2
    c.train.search_tasks = 4
    c.train.search_simulations = 16
    c.train.network.hidden_sizes = (16,)
  elif arg == "gpu":
    c.num_tasks = 1024
    c.search.simulations = 1024
    c.train.seeds = 16
    c.train.num_updates = 100
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'small' (default), 'smoke' or 'gpu'")
  return c
