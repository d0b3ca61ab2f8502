"""Experiment 2: where GRPO stops informing: degenerate groups against the success rate.

  python3 scripts/grpo_degradation.py --config=configs/grpo_degradation.py:small \
      --workdir=/tmp/grpo_degradation

Variants: "small" (the default: 11 difficulties from 0.1% to 95% success, K = 4, 8, 16,
about a minute on a 2-core CPU), "smoke" (three points, a few seconds: what
tests/test_experiments.py runs), "gpu" (more groups per point, for tighter error bars).
"""
import ml_collections


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "small", "smoke", "gpu")."""
  c = ml_collections.ConfigDict()
  c.env_name = "KeyChain-v0"   # the task; its success rate is set by k, A and the policy
  c.horizon = 10               # episode length T (>= every k; degeneracy does not depend on it)
  # Difficulty points (k pivotal steps, A actions, q): q = 0 is the uniform random
  # policy, success (1/A)^k; q > 0 is a tabular policy that answers each pivotal step
  # right with probability q (diagnostics.biased_logits), success q^k. Points sharing
  # (k, A) share one compiled call. A must be a power of two (exactly uniform cues).
  c.difficulties = (
      (10, 2, 0.0),   # 0.098%
      (4, 4, 0.0),    # 0.39%
      (3, 4, 0.0),    # 1.6%
      (5, 2, 0.0),    # 3.1%
      (2, 4, 0.0),    # 6.3%
      (3, 2, 0.0),    # 12.5%
      (2, 2, 0.0),    # 25%
      (1, 2, 0.0),    # 50%
      (1, 2, 0.75),   # 75%
      (1, 2, 0.9),    # 90%
      (1, 2, 0.95),   # 95%
  )
  c.group_sizes = (4, 8, 16)   # K values; one rollout of max(K) per group, a K-group is its first K
  c.headline_group_size = 8    # the K whose informative range is marked (must be in group_sizes)
  c.max_degenerate = 0.5       # "informative": at most this fraction of groups degenerate
  c.num_tasks = 256            # groups (tasks, one start state each) per seed and point
  c.seeds = 16                 # independent replicates per point (slices of one batched rollout)
  c.seed = 0                   # base RNG seed

  if arg in (None, "", "small"):
    pass
  elif arg == "smoke":
    c.difficulties = ((3, 2, 0.0), (1, 2, 0.0), (1, 2, 0.9))
    c.group_sizes = (4, 8)
    c.num_tasks = 64
    c.seeds = 4
  elif arg == "gpu":
    c.num_tasks = 4096
    c.seeds = 64
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'small' (default), 'smoke' or 'gpu'")
  return c
