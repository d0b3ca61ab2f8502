"""Self-critique and persistent memory on KeyChain-v0: retries, critics and remembered tasks.

The study lives in `study.py`; this package re-exports its public names, so
`from credit_jax.experiments import critique` gives `default_config`,
`validate_config`, `num_seeds` and `run`.
"""
from credit_jax.experiments.critique.study import *  # noqa: F401,F403
