"""Experiment: learned credit assignment (RUDDER, HCA, COCOA) against GRPO and PPO + GAE.

`program.py` is the hooks-driven episodic policy-gradient program the study trains with;
`study.py` the measurement (learning at equal env steps, credit accuracy and gradient
statistics against KeyChain's exact gradient).
"""
