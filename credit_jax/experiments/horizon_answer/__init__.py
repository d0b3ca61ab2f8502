"""The horizon answer, re-scoped (issue 51): exact gradients first.

Part A, the anatomy of the gradient at fixed tabular policies, is `anatomy.py` (the
estimators, exact critics and coefficients) and `study.py` (cells, statistics, pages).
Part B, tabular policies learning the probe and the control, is `learning.py` (arms,
training program, cells) and `part_b.py` (tuning, statistics, pages).
"""
from credit_jax.experiments.horizon_answer.study import *  # noqa: F401,F403
