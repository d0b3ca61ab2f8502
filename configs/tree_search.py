"""Exercise 5: tree search vs sampling on KeyChain-v0, and GRPO with and without search.

  python3 scripts/tree_search.py --config=configs/tree_search.py:small --workdir=/tmp/ts

Part A (no training) compares, per (prior, k) point, a tree search from 1024 start
states with greedy decoding, best-of-M, sampling without replacement and beam search at
the search's compute (matched on env steps and policy evaluations, and on wall time). Part B trains the search-then-train recipe (`credit_jax.algos.search_then_train`)
with search on and off (the control arm is plain GRPO with the same loss) and plots both.
Part B's recipe alone, for scripts/train.py, is configs/search_then_train_keychain.py.

Variants: "small" (the default, `tree_search.default_config()`: two priors at k = 4,
about 4 minutes on a 2-core CPU), "full" (the README's figures: six points at k = 4, 7,
10, about 10 minutes), "smoke" (seconds: what the tests run), "gpu" (the full points with
more simulations and seeds).
Every field is documented in credit_jax/experiments/tree_search/study.py.
"""
from credit_jax.experiments import tree_search

train_config = tree_search.train_config   # part B's recipe config, for the recipe's tests
# The README's part A: each prior where it is informative about search (k = 4, 7, 10).
FULL_POINTS = (("uniform", 4), ("uniform", 7), ("informative", 10), ("adversarial", 4),
               ("adversarial", 7), ("adversarial", 10))


def get_config(arg=None):
  """Returns the config; `arg` picks a variant ("small" (default), "full", "smoke", "gpu")."""
  c = tree_search.default_config()
  if arg in (None, "", "small"):
    pass
  elif arg == "full":
    c.points = FULL_POINTS
  elif arg == "smoke":
    c.points = (("adversarial", 2),)
    c.num_tasks = 16
    c.temperatures = (1.0, 0.5)
    c.timing_repeats = 1
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
    c.points = FULL_POINTS
    c.num_tasks = 4096
    c.search.simulations = 1024
    c.train.seeds = 16
    c.train.num_updates = 100
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'small' (default), 'full', 'smoke' or "
                     "'gpu'")
  return c
