"""Exact success rates of KeyToDoor-v0 by dynamic programming (host-side NumPy).

The agent's moves are the only randomness that matters for success once the key's cell
is drawn: apples pay rewards but move nothing. So for each key cell the distribution (or,
for the best policy, the reachable set) of (cell, key held) is pushed through the
episode's steps, with the key picked up on entering its cell in the key phase, the
position reset at each phase change (unless `carry_position`), and success absorbed on
entering the door's cell with the key in the door phase. Key cells are weighted by the
exact probabilities of the reset's multiply-shift draw.
"""
from __future__ import annotations

import numpy as np

__all__ = ["key_cell_probs", "success"]

DOOR_CELL = 0   # as in keytodoor.py


def key_cell_probs(env) -> np.ndarray:
  """[W^2] float64: the probability of each key cell (0 at the centre).

  The reset takes the top 16 bits h of a word and offset `(h (n - 1)) >> 16`, n = W^2,
  then skips the centre; each offset's probability is its count of h over 2**16.
  """
  n = env.num_cells
  h = np.arange(1 << 16, dtype=np.int64)
  offsets = (h * (n - 1)) >> 16
  counts = np.bincount(offsets, minlength=n - 1).astype(np.float64) / float(1 << 16)
  probs = np.zeros(n, np.float64)
  cells = np.arange(n - 1)
  probs[cells + (cells >= env.start_cell)] = counts
  return probs


def success(env, params, optimal: bool) -> float:
  """Success probability of the uniform random policy (`optimal=False`) or of the best
  policy (`optimal=True`) on `env` (a KeyToDoor) under concrete `params`."""
  length = int(params.distractor_length)
  first, last = (int(x) for x in env.phase_lengths(length))
  steps = min(first + length + last, int(params.max_steps_in_episode))
  n = env.num_cells
  table = np.asarray(env._move_table)                                 # [n, 4]
  move = np.zeros((n, n), np.float64)
  for a in range(table.shape[1]):
    move[np.arange(n), table[:, a]] += 1.0 / table.shape[1]
  if optimal:
    move = (move > 0).astype(np.float64)
  probs = key_cell_probs(env)
  keys = np.flatnonzero(probs > 0)                                     # [K] key cells
  rows = np.arange(len(keys))
  # p[j, cell, held]: probability (or reachability) of the agent with key cell keys[j].
  p = np.zeros((len(keys), n, 2), np.float64)
  p[:, env.start_cell, 0] = 1.0
  won = np.zeros(len(keys), np.float64)
  for t in range(steps):
    p = np.einsum("jch,cd->jdh", p, move)
    if optimal:
      p = (p > 0).astype(np.float64)
    if t < first:                       # entering the key's cell picks it up
      p[rows, keys, 1] += p[rows, keys, 0]
      p[rows, keys, 0] = 0.0
    elif t >= first + length:           # entering the door with the key: success, over
      won += p[:, DOOR_CELL, 1]
      p[:, DOOR_CELL, 1] = 0.0
    if not env.carry_position and t + 1 in (first, first + length):
      total = p.sum(axis=1)                                            # [K, 2]
      p = np.zeros_like(p)
      p[:, env.start_cell] = total
    if optimal:
      p = (p > 0).astype(np.float64)
  if optimal:
    won = (won > 0).astype(np.float64)
  return float(np.sum(probs[keys] * won))
