"""Intervals for what the experiments and sweep tables report over seeds.

`t_interval` for means of continuous quantities over seeds; `wilson_interval` for rates
(successes out of trials), which stays inside [0, 1] where a t-interval on two seeds does
not. scipy is imported when an interval is computed, not at import.
"""
from __future__ import annotations

import numpy as np

__all__ = ["t_interval", "wilson_interval"]


def t_interval(x, axis: int = 0):
  """`(mean, half-width)` of the 95% Student-t interval of `x` over `axis` (seeds).

  Args:
    x: array-like with the samples along `axis` (any other dims are kept).
  Returns:
    `(mean, half)` shaped like `x` without `axis`; `half` is NaN where there are fewer
    than 2 samples. Every experiment and the sweep tables report intervals through this.
  """
  from scipy import stats  # pylint: disable=g-import-not-at-top
  x = np.asarray(x, np.float64)
  n = x.shape[axis]
  mean = x.mean(axis=axis) if n else np.full(np.delete(x.shape, axis), np.nan)
  if n < 2:
    return mean, np.full(np.shape(mean), np.nan) if np.ndim(mean) else float("nan")
  half = stats.t.ppf(0.975, n - 1) * x.std(axis=axis, ddof=1) / np.sqrt(n)
  return mean, half


def wilson_interval(successes, n, confidence: float = 0.95):
  """`(low, high)` of the Wilson score interval of a binomial rate `successes / n`.

  Unlike the normal interval it stays inside [0, 1] and is not empty at 0 or n successes
  (0 of 1024 gives (0, 0.0037)). Args: `successes`, `n` ints or arrays of one shape
  (0 <= successes <= n, n >= 1); returns floats or arrays of that shape.
  """
  from scipy import stats  # pylint: disable=g-import-not-at-top
  s, n = np.asarray(successes, np.float64), np.asarray(n, np.float64)
  if np.any(n < 1) or np.any(s < 0) or np.any(s > n):
    raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes}, {n}")
  if not 0.0 < confidence < 1.0:
    raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
  z = stats.norm.ppf(0.5 + confidence / 2)
  p = s / n
  denom = 1.0 + z * z / n
  centre = (p + z * z / (2 * n)) / denom
  half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
  low = np.where(s == 0, 0.0, np.clip(centre - half, 0.0, 1.0))
  high = np.where(s == n, 1.0, np.clip(centre + half, 0.0, 1.0))
  if np.ndim(low) == 0:
    return float(low), float(high)
  return low, high
