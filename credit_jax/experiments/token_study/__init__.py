"""The token-agent study: held-out success of a warm-started LM agent against turns.

The study lives in `study.py`; this package re-exports its public names, so
`from credit_jax.experiments import token_study` gives `default_config`,
`validate_config`, `num_seeds`, `run` and `summarise`.
"""
from credit_jax.experiments.token_study.study import *  # noqa: F401,F403
