"""Features a recipe can take on without changing its program: a horizon curriculum,
process-reward shaping (and its labels), retry with critique and a persistent memory,
and the GAE-gradient probe. Each is importable on its own:

  from credit_jax.addons import curriculum, prm, critique, memory, gae_probe
"""
