"""Experiment: the horizon study. Train every method on KeyChain from T = 10 upward and

The study lives in `study.py`; this package re-exports its public names, so
`from credit_jax.experiments import horizon` gives `default_config`,
`validate_config`, `num_seeds` and `run`.
"""
from credit_jax.experiments.horizon.study import *  # noqa: F401,F403
