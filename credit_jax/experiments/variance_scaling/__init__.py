"""Experiment 1: how the policy-gradient estimator's variance grows with the horizon.

The study lives in `study.py`; this package re-exports its public names, so
`from credit_jax.experiments import variance_scaling` gives `default_config`,
`validate_config`, `num_seeds` and `run`.
"""
from credit_jax.experiments.variance_scaling.study import *  # noqa: F401,F403
