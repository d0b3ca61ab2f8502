"""Features a recipe can take on without changing its program, through the hooks protocol
(`hooks.py`; the registry `features.py`): a horizon curriculum, process-reward shaping
(and its labels), step-level credit (VinePPO's vines, GiGPO's anchors, tree groups),
learned credit (RUDDER, HCA, COCOA), retry with critique, and the GAE-gradient probe.
Each is importable on its own:

  from credit_jax.addons import curriculum, prm, critique, gae_probe

Importing this package imports none of them.
"""

__all__ = ["contributions", "critique", "curriculum", "features", "gae_probe", "gigpo",
           "hindsight_credit", "hooks",
           "prm", "prm_labels", "rudder", "step_states",
           "tree_groups", "vine_ppo"]
