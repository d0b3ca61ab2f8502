"""Which of KeyChain's shortcuts make long horizons easy: the probes measurement and the
random-versus-optimal figure of every probe.

The measurement lives in `study.py` and the figure in `figure.py`
(`python3 -m credit_jax.experiments.probes.figure OUT.png`); this package re-exports the
study's public names, so `from credit_jax.experiments import probes` gives
`default_config`, `validate_config`, `num_seeds`, `run` and the cell helpers.
"""
from credit_jax.experiments.probes.study import *  # noqa: F401,F403
