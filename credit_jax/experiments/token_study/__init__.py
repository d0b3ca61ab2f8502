"""The token-agent study: RL arms against an equal-token SFT arm from one warm start.

The study lives in `study.py` (the runs) and `summary.py` (the tables and figure); this
package re-exports the public names of `study.py`, so `from credit_jax.experiments import
token_study` gives `default_config`, `validate_config`, `num_seeds`, `run` and
`summarise`.
"""
from credit_jax.experiments.token_study.study import *  # noqa: F401,F403
