"""Experiment: horizon curricula against direct training, and where they stop helping.

The study lives in `study.py`; this package re-exports its public names, so
`from credit_jax.experiments import curriculum` gives `default_config`,
`validate_config`, `num_seeds` and `run`.
"""
from credit_jax.experiments.curriculum.study import *  # noqa: F401,F403
