"""Exercise 5: tree search against decoding baselines on KeyChain-v0, and what search buys GRPO.

The study lives in `study.py`; this package re-exports its public names, so
`from credit_jax.experiments import tree_search` gives `default_config`,
`validate_config`, `num_seeds` and `run`.
"""
from credit_jax.experiments.tree_search.study import *  # noqa: F401,F403
