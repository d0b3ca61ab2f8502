"""Horizon curricula vs direct training (GRPO), and where short stages stop helping.

  python3 scripts/curriculum.py --config=configs/curriculum.py:small --workdir=/tmp/cur

Variants: "small" (aimed at <= 15 minutes on 2 idle CPU cores: KeyChain T = 1000, 25
updates; cue delays 0, 20, 40, 55 at T = 60, 30 updates; KeyToDoor distractor phases 30
to 1000, 25 updates; (c) manager/worker vs flat GRPO / PPO on GoalGrid 12x12, T = 120,
30 updates), "smoke" (seconds of training, what the tests run), "full" (more updates,
T = 200 with cue delays up to 190; GPU-sized). The default variant is
`curriculum.default_config()`; every field is documented in
credit_jax/experiments/curriculum/study.py.
"""
from credit_jax.experiments import curriculum


def get_config(arg=None):
  """Returns the config; `arg` picks a variant ("small" default, "smoke", "full")."""
  c = curriculum.default_config()
  if arg in (None, "", "small"):
    pass
  elif arg == "smoke":
    c.seeds, c.eval_every, c.eval_episodes = 2, 2, 16
    c.grpo.num_tasks, c.grpo.group_size, c.grpo.hidden_sizes = 4, 4, (16,)
    c.a.horizon, c.a.stages, c.a.num_updates = 12, (4, 12), 4
    c.a.methods = ("direct", "gated")
    c.b1.horizon, c.b1.cue_delays, c.b1.num_stages, c.b1.num_updates = 10, (3,), 2, 2
    c.b1.methods = ("direct", "gated")
    c.b2.distractors, c.b2.num_updates, c.b2.methods = (6,), 2, ("direct", "gated")
    c.c.size, c.c.horizon, c.c.segment_length, c.c.subgoal_stride = 5, 12, 4, 2
    c.c.extra_segment_lengths = ()
    c.c.num_updates, c.c.ppo_num_envs, c.c.ppo_num_steps = 2, 2, 12
  elif arg == "full":
    c.a.num_updates = 200
    c.b1.horizon, c.b1.cue_delays, c.b1.num_stages, c.b1.num_updates = 200, (0, 50, 150, 190), 4, 100
    c.b2.num_updates = 100
    c.c.size, c.c.horizon, c.c.segment_length, c.c.num_updates = 20, 300, 20, 150
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'small' (default), 'smoke' or 'full'")
  return c
