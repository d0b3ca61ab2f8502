"""bsuite's umbrella_length, memory_len and discounting_chain, run with bsuite's settings,
scored as bsuite scores them, then pushed past bsuite's lengths.

The study lives in `study.py`; this package re-exports its public names, so
`from credit_jax.experiments import bsuite` gives `default_config`,
`validate_config`, `num_seeds` and `run`.
"""
from credit_jax.experiments.bsuite.study import *  # noqa: F401,F403
