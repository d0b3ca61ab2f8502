"""bsuite's umbrella_length, umbrella_distract, memory_len, memory_size and
discounting_chain (credit_jax/experiments/bsuite), scored as bsuite scores them.

  python3 scripts/bsuite.py --config=configs/bsuite.py:small --workdir=DIR
  python3 scripts/bsuite.py --config=configs/bsuite.py:bsuite --workdir=DIR

Variants:
  "small" (the default; <= 15 min on 2 CPU cores): 3 seeds, PPO with an MLP (gamma
      0.99, lambda 0.95) and GRPO K = 5 on the five experiments, PPO with a GRU on the
      two memory experiments, each on a few of the sweep's
      settings (lengths 1, 3, 10, 30; distractors 1, 10, 30, 100; context bits 1, 3,
      10, 40) with 2,000 episodes each (bsuite: 10,000), discounting_chain's 20 mapping
      seeds with 500 episodes (bsuite: 1,000). Its scores are bsuite's formulas on fewer
      episodes, so they are lower than a bsuite-length run's would be.
  "bsuite": bsuite's own protocol: the five experiments at bsuite's sweeps and episode
      counts, 5 seeds; PPO MLP, GRPO K = 5 and DQN (bsuite's best published umbrella
      agent is a DQN) on all five, PPO GRU on the memory experiments. ~20.6M env steps per seed and
      method (docs/results/bsuite.md states its CPU-hours); not run on 2 cores.
  "full": "bsuite" plus chain / memory lengths 300 and 1000 (10,000 episodes each) and
      discounting_chain_long (reward horizons up to 1000 steps, 1,000 episodes per bonus
      chain). Pieces run with `--config.methods`, `--config.experiments`,
      `--config.umbrella_lengths`, ... overrides on one workdir (finished cells are
      skipped).
  "smoke": seconds; what the tests run.
Every field is documented in credit_jax/experiments/bsuite/study.py's default_config().
"""
from credit_jax.experiments import bsuite
from credit_jax.experiments.bsuite import scoring


def get_config(arg=None):
  """Returns the study config; `arg` picks a variant ("small" default, "bsuite", "full",
  "smoke")."""
  c = bsuite.default_config()
  if arg in (None, "", "small"):
    pass
  elif arg in ("bsuite", "full"):
    c.seeds = 5
    c.methods = ("ppo_mlp_g0.99_l0.95", "grpo_k5", "dqn")
    c.umbrella_lengths = scoring.BSUITE_LENGTHS
    c.umbrella_distractors = scoring.BSUITE_LENGTHS
    c.memory_lengths = scoring.BSUITE_LENGTHS
    c.memory_bits = scoring.MEMORY_SIZE_BITS
    for x in c.experiments:
      c.episodes[x] = scoring.NUM_EPISODES[x]
    if arg == "full":
      c.umbrella_lengths = scoring.BSUITE_LENGTHS + (300, 1000)
      c.memory_lengths = scoring.BSUITE_LENGTHS + (300, 1000)
      c.experiments = c.experiments + ("discounting_chain_long",)
  elif arg == "smoke":
    c.seeds = 2
    c.methods = ("ppo_mlp_g0.99_l0.95", "grpo_k5")
    c.memory_methods = ()
    c.umbrella_lengths = (1, 3)
    c.memory_lengths = (2,)
    c.umbrella_distractors = (1, 4)
    c.memory_bits = (1, 3)
    c.episodes.umbrella_distract = 100
    c.episodes.memory_size = 100
    c.discounting_mapping_seeds = (0, 5, 1)
    c.episodes.umbrella_length = 100
    c.episodes.memory_len = 100
    c.episodes.discounting_chain = 40
    c.hidden_sizes = (16,)
    c.gru_size = 8
    c.chunk_updates = 5
    c.curve_smooth = 2
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'small' (default), 'bsuite', 'full' "
                     f"or 'smoke'")
  return c
