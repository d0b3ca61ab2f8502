"""Experiment: COCOA's corridor experiment (Meulemans et al., NeurIPS 2023) reproduced on
`ConveyorTreasure-v0` with the library's REINFORCE and its HCA / COCOA features:
`study.py` (the learning runs and the summary), `probe.py` (the shadow-mode gradient
statistics against the exact DP gradient). Re-exports the study.
"""
from credit_jax.experiments.cocoa_corridor.study import *  # noqa: F401,F403
from credit_jax.experiments.cocoa_corridor.study import __all__  # noqa: F401
