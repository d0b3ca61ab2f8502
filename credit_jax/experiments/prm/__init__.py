"""Process reward models (exercise 4): dense PRM shaping, how a policy games it, and fixes.

The study lives in `study.py`; this package re-exports its public names, so
`from credit_jax.experiments import prm` gives `default_config`,
`validate_config`, `num_seeds` and `run`.
"""
from credit_jax.experiments.prm.study import *  # noqa: F401,F403
