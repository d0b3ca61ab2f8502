"""Experiment: learned credit assignment (RUDDER, HCA, COCOA) against GRPO and PPO + GAE.

The methods are the recipes of credit_jax/algos with the registry's RUDDER, HCA and COCOA
features (`credit_jax/addons/features.py`); `study.py` is the measurement (learning at
equal env steps, credit accuracy and gradient statistics against KeyChain's exact
gradient), with what only it uses: `probe.py` (the gradient probe) and
`exact_hindsight.py` (KeyChain's exact hindsight distributions). This package
re-exports the study, so `from credit_jax.experiments import learned_credit` gives
`default_config`, `validate_config`, `num_seeds` and `run`.
"""
from credit_jax.experiments.learned_credit.study import *  # noqa: F401,F403
from credit_jax.experiments.learned_credit.study import __all__  # noqa: F401
