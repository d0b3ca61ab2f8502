"""Hindsight relabeling on and off: what it buys in sample efficiency.

The study lives in `study.py`; this package re-exports its public names, so
`from credit_jax.experiments import relabel` gives `default_config`,
`validate_config`, `num_seeds` and `run`.
"""
from credit_jax.experiments.relabel.study import *  # noqa: F401,F403
