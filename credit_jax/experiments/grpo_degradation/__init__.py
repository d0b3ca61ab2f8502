"""Experiment 2: the fraction of GRPO groups that carry no signal, against difficulty.

The study lives in `study.py`; this package re-exports its public names, so
`from credit_jax.experiments import grpo_degradation` gives `default_config`,
`validate_config`, `num_seeds` and `run`.
"""
from credit_jax.experiments.grpo_degradation.study import *  # noqa: F401,F403
