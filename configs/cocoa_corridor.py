"""COCOA's corridor experiment reproduced (credit_jax/experiments/cocoa_corridor/study.py).

  python3 scripts/cocoa_corridor.py --config=configs/cocoa_corridor.py[:variant] --workdir=DIR

Variants:
  "" (the default): what docs/results/learned_credit.md reports: REINFORCE, Advantage,
      HCA (return) and COCOA-reward at L = 23 and 103, 10 seeds, 3,000 updates of 8
      episodes, an evaluation (256 episodes) every 200 updates.
  "l103": the L = 103 cells that fit this session: REINFORCE, Advantage, COCOA-reward,
      10 seeds, 1,000 updates, an evaluation every 100.
  "gate": REINFORCE alone at L = 23 (the learnability gate), 10 seeds, 3,000 updates.
  "probe": the shadow-mode gradient part alone at L = 23, 63, 103 (3 seeds, 300 updates,
      a measurement every 100 on 256 batches of 8 episodes).
  "small": every method at L = 23, 4 seeds, 600 updates (<= 15 min on 2 cores).
  "tabular": a table policy and COCOA's tabular model over the cell's content alone
      (nets/tabular.py; not the key held, nor the time) at L = 23, 103, 300, 1000, 10
      seeds, 10,000 updates, an evaluation every 200; policy rates tuned at L = 23 on
      seeds disjoint from these (scripts/repro/cocoa_tabular_tune.sh). With the key
      flag in the table, picking the key moves the agent to other rows for every apple
      after it, so the key changes the apple rewards (docs/results/learned_credit.md).
  "tabular_tune": one cell of that tuning: L = 23, 4 seeds from base seed 1000,
      3,000 updates (the rates come from the command line).
  "tabular_probe": the shadow mode with the table policy and COCOA's tabular model at
      L = 23, 103, 300, 1000, 10 seeds, the policy at AdamW 0.01 on the exact gradient:
      first-state SNR / bias / variance and learned COCOA's distractor credit mass per L.
  "smoke": seconds; what the tests run.
Every field is documented in the study's default_config().
"""
from credit_jax.experiments import cocoa_corridor


def get_config(arg=None):
  """Returns the study config; `arg` picks a variant (module doc)."""
  c = cocoa_corridor.default_config()
  if arg in (None, ""):
    pass
  elif arg == "l103":
    c.methods, c.lengths = ("reinforce", "advantage", "cocoa"), (103,)
    c.updates, c.eval_every = 1000, 100
  elif arg == "gate":
    c.methods, c.lengths = ("reinforce",), (23,)
  elif arg == "probe":
    c.lengths, c.probe.lengths = (), (23, 63, 103)
  elif arg == "small":
    c.lengths, c.seeds, c.updates, c.eval_every = (23,), 4, 600, 100
  elif arg in ("tabular", "tabular_tune"):
    c.policy, c.model, c.table_groups = "tabular", "tabular", (0,)
    # tuned (scripts/repro/cocoa_tabular_tune.sh, 2026-12-07): the best of 0.01, 0.03,
    # 0.1 by run-averaged treasure at L = 23 on 4 tuning seeds
    c.lrs.update(reinforce=0.03, advantage=0.1, cocoa=0.1, hca_return=0.1, cocoa_exact=0.1)
    c.lengths, c.updates, c.eval_every = (23, 103, 300, 1000), 10000, 200
    if arg == "tabular_tune":
      c.lengths, c.seeds, c.seed, c.updates, c.eval_every = (23,), 4, 1000, 3000, 250
  elif arg == "tabular_probe":
    c.policy, c.model, c.table_groups = "tabular", "tabular", (0,)
    c.lengths, c.probe.lengths, c.probe.seeds = (), (23, 103, 300, 1000), 10
    c.probe.lr = 0.01   # the table's logits move ~lr per AdamW step (3e-4, the MLP's, would
                        # barely move a table); measured: exact J from 2.0-2.3 to 7.5-8.6
                        # over the 300 updates at L = 23-1000 (10 seeds)
  elif arg == "smoke":
    c.lengths, c.seeds, c.updates, c.eval_every, c.eval_episodes = (5,), 2, 4, 2, 8
    c.probe.lengths, c.probe.updates, c.probe.every, c.probe.draws = (5,), 2, 2, 4
    c.probe.seeds = 2
  else:
    raise ValueError(f"unknown variant {arg!r} (use '', 'l103', 'gate', 'probe', 'small', "
                     f"'tabular', 'tabular_tune', 'tabular_probe' or 'smoke')")
  return c
