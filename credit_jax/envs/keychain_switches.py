"""KeyChain's shortcut switches: their checks, the rule table and the observation layout.

The switches themselves are documented in `credit_jax/envs/keychain.py`; this module
holds the host-side pieces they need (all NumPy / Python, run once per constructor).
"""
from __future__ import annotations

import itertools
import math
from typing import Dict, Tuple

import numpy as np

from credit_jax.envs import base

__all__ = ["PROBE_OPTIONS", "SWITCHES", "num_pivotal_of", "observation_layout", "rule_table"]

# Each switch and the value that keeps KeyChain's original (shortcut) behaviour.
SWITCHES = {"pivotal_flag": True, "distractor_cues": False, "distinct_rules": False,
            "cues_at_start": False, "pivotal_density": 0.0, "distractor_reward_std": 0.0}

# The credit probe's options (keychain.py, "The credit probe") and their off values.
PROBE_OPTIONS = {"segment_cue_onehot": False, "episode_noise_std": 0.0}

# Largest A whose A! permutations are enumerated (8! = 40320 rows of 8).
_ENUMERATE_UP_TO = 8


def num_pivotal_of(horizon: int, num_pivotal: int, pivotal_density: float) -> int:
  """k: `num_pivotal`, or `ceil(pivotal_density * horizon)` when the density is > 0.

  The product is rounded to 9 decimals first, so 0.03 * 100 gives 3 and not 4.
  Raises ValueError naming `pivotal_density` when it is outside [0, 1].
  """
  rho = base.check_nonnegative("pivotal_density", pivotal_density)
  if rho > 1.0:
    raise ValueError(f"pivotal_density must lie in [0, 1], got {pivotal_density!r}")
  if rho == 0.0:
    return num_pivotal
  return max(1, math.ceil(round(rho * horizon, 9)))


def rule_table(num_pivotal: int, num_actions: int, distinct: bool, seed: int) -> np.ndarray:
  """[k, A] int32: row i maps a cue to the right action at pivotal index i.

  Without `distinct` every row is the identity (the cue is the answer). With it, for
  A <= 8 the rows walk through all A! permutations in an order shuffled by `seed`
  (rows i and j differ whenever i != j mod A!, so k <= A! rules are pairwise distinct);
  for larger A each row is an independent random permutation drawn from `seed`.
  """
  k, a = int(num_pivotal), int(num_actions)
  if not distinct:
    return np.tile(np.arange(a, dtype=np.int32), (k, 1))
  rng = np.random.default_rng(seed)
  if a <= _ENUMERATE_UP_TO:
    perms = np.asarray(list(itertools.permutations(range(a))), np.int32)
    perms = perms[rng.permutation(len(perms))]
    return perms[np.arange(k) % len(perms)]
  return np.stack([rng.permutation(a) for _ in range(k)]).astype(np.int32)


def observation_layout(num_actions: int, num_pivotal: int, pivotal_flag: bool,
                       distinct_rules: bool, cues_at_start: bool,
                       segment_cue_onehot: bool = False) -> Dict[str, Tuple[int, int]]:
  """{part: (start, stop)} of KeyChain's observation, in order (module doc of keychain.py).

  Parts: "cue" [A] (or, with `segment_cue_onehot`, "context" [k A] in its place and no
  "index"); "flag" [1] with `pivotal_flag`; "index" [k] with `distinct_rules`;
  "start_cues" [k A] with `cues_at_start`; "time" [1] always, last.
  """
  sizes = [("context", num_pivotal * num_actions) if segment_cue_onehot
           else ("cue", num_actions)]
  if pivotal_flag:
    sizes.append(("flag", 1))
  if distinct_rules and not segment_cue_onehot:
    sizes.append(("index", num_pivotal))
  if cues_at_start:
    sizes.append(("start_cues", num_pivotal * num_actions))
  sizes.append(("time", 1))
  layout, start = {}, 0
  for name, size in sizes:
    layout[name] = (start, start + size)
    start += size
  return layout
