"""The learned-credit study (credit_jax/experiments/learned_credit/study.py): RUDDER, HCA
and COCOA against GRPO and PPO + GAE at equal env steps, and their gradients against
KeyChain's exact one.

  python3 scripts/learned_credit.py --config=configs/learned_credit.py --workdir=DIR

Variants:
  "" (the default): what docs/results/learned_credit.md reports: 5 seeds, KeyChain
      (k = 3, A = 4) at T = 100 (60 updates of 32 episodes for every method) and the
      linear key-to-door at L = 103 (200 updates); the gradient part at T = 100 and 1000.
  "t1000": the learning part at KeyChain T = 1000 only, every method, 5 seeds, 30
      updates of 32 episodes (960k env steps per seed); no gradient part.
  "probe": the gradient part only (T = 100 and 1000).
  "smoke": seconds; what the tests run.
Every field is documented in the study's default_config().
"""
from credit_jax.experiments import learned_credit


def get_config(arg=None):
  """Returns the study config; `arg` picks a variant ("", "t1000", "probe", "smoke")."""
  c = learned_credit.default_config()
  if arg in (None, ""):
    pass
  elif arg == "t1000":
    c.updates = 30
    c.cells = ("keychain:1000",)
    c.probe.horizons = ()
  elif arg == "probe":
    c.cells = ()
  elif arg == "smoke":
    c.seeds, c.episodes, c.updates, c.eval_episodes, c.lktd_updates = 2, 8, 2, 8, 2
    c.cells = ("keychain:6", "lktd:5")
    c.methods = ("reinforce", "rudder", "cocoa", "grpo_k8")
    c.probe.horizons, c.probe.episodes, c.probe.fit_updates = (6,), 8, 2
    c.probe.fit_episodes = 8
  else:
    raise ValueError(f"unknown variant {arg!r} (use '', 't1000', 'probe' or 'smoke')")
  return c
