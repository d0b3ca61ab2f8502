"""bsuite's settings and scores for umbrella_length, umbrella_distract, memory_len,
memory_size and discounting_chain (umbrella_distract is scored as umbrella_length and
memory_size as memory_len, each grouped by its own setting, as bsuite's analyses do).

The sweeps and thresholds are bsuite's (its `experiments/<name>/sweep.py` and
`analysis.py`); the code is written here from those definitions. A score is computed
from *rows*, as bsuite's analysis computes it from its logged DataFrame: one row per
(run, logged episode count) with the run's cumulative totals at that count. Per group of
runs (a chain length; discounting_chain: all its runs together), bsuite takes the rows at
episode `min(largest logged episode, NUM_EPISODES)` and averages their totals:

  umbrella_length    regret = 2 per wrong umbrella; a length passes when the average
                     regret per episode is < 0.5 (wrong choices < 25% over the run);
                     score = fraction of lengths that pass.
  memory_len         regret ratio = (episodes - right recalls) / 0.5 (a random agent's
                     miss rate), a length passes when it is < 0.75 per episode (right
                     recalls > 62.5% over the run); score = fraction of lengths passing.
  discounting_chain  average return per episode R over all runs; score =
                     clip(1 - 10 (1.1 - R), 0, 1). Every chain pays 1 and the bonus chain
                     1.1, so the score is exactly the fraction of episodes that chose the
                     bonus chain (a random agent: 0.2).

All three average over the whole run (every episode from the first), so a score measures
how fast an agent learns as well as where it ends; `final_rate` gives the end alone.
"""
from __future__ import annotations

from typing import Dict, Sequence, Tuple

import numpy as np

# bsuite's sweeps: chain / memory lengths and distractor counts 1..10, 12, 14, 17, 20,
# 25, 30..100 by 10; memory_size's context bits 1..10, 12, 14, 17, 20, 25, 30, 40.
BSUITE_LENGTHS = tuple(range(1, 11)) + (12, 14, 17, 20, 25) + tuple(range(30, 105, 10))
MEMORY_SIZE_BITS = tuple(range(1, 11)) + (12, 14, 17, 20, 25, 30, 40)
MAPPING_SEEDS = tuple(range(20))         # discounting_chain's settings
SWEEPS = {"umbrella_length": BSUITE_LENGTHS, "umbrella_distract": BSUITE_LENGTHS,
          "memory_len": BSUITE_LENGTHS, "memory_size": MEMORY_SIZE_BITS,
          "discounting_chain": MAPPING_SEEDS}
NUM_EPISODES = {"umbrella_length": 10_000, "umbrella_distract": 10_000,
                "memory_len": 10_000, "memory_size": 10_000,
                "discounting_chain": 1_000}
UMBRELLA_REGRET_THRESH = 0.5             # average regret per episode
MEMORY_LEARNING_THRESH = 0.75            # regret ratio per episode
MEMORY_BASE_RATE = 0.5                   # a random agent's miss rate
DISCOUNTING_OPTIMAL = 1.1                # the bonus chain's return
DISCOUNTING_SCALE = 10.0                 # score = 1 - 10 (1.1 - average return)

# What a uniform random agent scores (every choice right with probability 1/2; the
# bonus chain chosen 1 time in 5): its expected regrets sit exactly on 1 and 1, above
# both thresholds, and its discounting score is 0.2.
RANDOM_SCORES = {"umbrella_length": 0.0, "umbrella_distract": 0.0, "memory_len": 0.0,
                 "memory_size": 0.0, "discounting_chain": 0.2}


def _rows(groups, episodes, totals) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  g, e, t = (np.asarray(x) for x in (groups, episodes, totals))
  if g.ndim != 1 or e.shape != g.shape or t.shape != g.shape or g.size == 0:
    raise ValueError(f"groups, episodes and totals must be [rows] arrays of one length "
                     f">= 1, got shapes {g.shape}, {e.shape}, {t.shape}")
  if np.any(e < 1):
    raise ValueError("every row needs an episode count >= 1")
  return g, e.astype(np.int64), t.astype(np.float64)


def _per_episode_at_end(groups, episodes, totals, num_episodes: int
                        ) -> Dict[float, float]:
  """{group: mean over its rows at episode min(max, num_episodes) of total / episode}."""
  g, e, t = _rows(groups, episodes, totals)
  out = {}
  for value in np.unique(g):
    sel = g == value
    end = min(int(e[sel].max()), int(num_episodes))
    at = sel & (e == end)
    out[value.item()] = float(t[at].mean() / end) if at.any() else float("nan")
  return out


def umbrella_length_per_length(lengths, episodes, total_regret,
                               num_episodes: int = NUM_EPISODES["umbrella_length"]
                               ) -> Dict[float, float]:
  """{chain_length: average regret per episode} as bsuite's umbrella_length scores it.

  Args:
    lengths, episodes, total_regret: [rows] chain length, episodes so far, cumulative
      regret (2 per wrong umbrella) of each logged row.
  """
  return _per_episode_at_end(lengths, episodes, total_regret, num_episodes)


def umbrella_length_score(lengths, episodes, total_regret,
                          num_episodes: int = NUM_EPISODES["umbrella_length"]) -> float:
  """bsuite's umbrella_length score in [0, 1] (rows as `umbrella_length_per_length`)."""
  per = umbrella_length_per_length(lengths, episodes, total_regret, num_episodes)
  return float(np.mean(np.array(list(per.values())) < UMBRELLA_REGRET_THRESH))


def memory_len_per_length(lengths, episodes, total_perfect,
                          num_episodes: int = NUM_EPISODES["memory_len"]
                          ) -> Dict[float, float]:
  """{memory_length: regret ratio per episode} as bsuite's memory_len scores it.

  Args:
    lengths, episodes, total_perfect: [rows] memory length, episodes so far, cumulative
      right recalls of each logged row.
  """
  e = np.asarray(episodes, np.float64)
  ratio = (e - np.asarray(total_perfect, np.float64)) / MEMORY_BASE_RATE
  return _per_episode_at_end(lengths, episodes, ratio, num_episodes)


def memory_len_score(lengths, episodes, total_perfect,
                     num_episodes: int = NUM_EPISODES["memory_len"]) -> float:
  """bsuite's memory_len score in [0, 1] (rows as `memory_len_per_length`)."""
  per = memory_len_per_length(lengths, episodes, total_perfect, num_episodes)
  return float(np.mean(np.array(list(per.values())) < MEMORY_LEARNING_THRESH))


def discounting_chain_score(episodes, total_return,
                            num_episodes: int = NUM_EPISODES["discounting_chain"]
                            ) -> float:
  """bsuite's discounting_chain score in [0, 1].

  Args:
    episodes, total_return: [rows] episodes so far and cumulative return of each logged
      row of every run (all mapping seeds together, as bsuite pools them).
  """
  per = _per_episode_at_end(np.zeros(np.shape(episodes)), episodes, total_return,
                            num_episodes)
  average = per[0.0]
  return float(np.clip(1.0 - DISCOUNTING_SCALE * (DISCOUNTING_OPTIMAL - average),
                       0.0, 1.0))


def longest_at_level(lengths: Sequence[int], successes, episodes, level: float
                     ) -> int:
  """The longest length whose rate `successes / episodes` is >= `level`; 0 if none.

  Args:
    lengths, successes, episodes: [G] one entry per length (counts pooled over runs).
  """
  lengths = np.asarray(lengths)
  s, n = np.asarray(successes, np.float64), np.asarray(episodes, np.float64)
  if lengths.ndim != 1 or s.shape != lengths.shape or n.shape != lengths.shape:
    raise ValueError(f"lengths, successes and episodes must be [G] arrays, got shapes "
                     f"{lengths.shape}, {s.shape}, {n.shape}")
  ok = (n > 0) & (s >= level * n - 1e-9)
  return int(lengths[ok].max()) if ok.any() else 0


def final_window(num_updates: int, fraction: float) -> int:
  """Updates in the final window: the last `ceil(fraction * num_updates)`, at least 1."""
  if not 0.0 < fraction <= 1.0:
    raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
  return max(1, int(np.ceil(fraction * int(num_updates) - 1e-9)))


__all__ = ["BSUITE_LENGTHS", "MAPPING_SEEDS", "MEMORY_SIZE_BITS", "NUM_EPISODES",
           "RANDOM_SCORES", "SWEEPS",
           "discounting_chain_score", "final_window", "longest_at_level",
           "memory_len_per_length", "memory_len_score", "umbrella_length_per_length",
           "umbrella_length_score"]
