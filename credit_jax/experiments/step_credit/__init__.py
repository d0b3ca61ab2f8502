"""Step-level credit from restored states (VinePPO, GiGPO, tree groups) against GRPO and
PPO + GAE at equal env steps. The study lives in `study.py`; this package re-exports its
public names (`default_config`, `cells`, `run`)."""
from credit_jax.experiments.step_credit.study import *  # noqa: F401,F403
