"""Time-to-threshold as censored data: Kaplan-Meier, restricted mean time, bootstrap.

A seed that never reached the success threshold within its budget did not "take the
budget": its time is only known to exceed it. A t-interval over such times (or over the
uncensored seeds alone) is biased in both directions, so the studies report

  * the Kaplan-Meier estimate S(t) = P(not yet at the threshold after t), whose steps sit
    at the times some seed reached it (a censored seed leaves the risk set silently);
  * the restricted mean time to threshold up to a horizon `tau` (the area under S on
    [0, tau]): a mean that every seed contributes to, censored ones included;
  * percentile bootstrap intervals over seeds, paired across arms (or horizons) whose
    seeds share keys, so a comparison resamples the same seeds on both sides;
  * local log-log slopes between consecutive horizons instead of one power law across a
    floor.

Arrays are NumPy (these run on the host after training). `times: [N]` float (env steps or
updates), `events: [N]` bool (True: the threshold was reached at that time; False:
censored there).
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple

import numpy as np

__all__ = ["kaplan_meier", "km_quantile", "restricted_mean", "bootstrap_interval",
           "rmst_interval", "local_slopes", "fisher_exact"]


def _check(times, events) -> Tuple[np.ndarray, np.ndarray]:
  t = np.asarray(times, np.float64)
  e = np.asarray(events, bool)
  if t.ndim != 1 or e.shape != t.shape:
    raise ValueError(f"times and events must be [N] of one shape, got {t.shape}, {e.shape}")
  if t.size == 0:
    raise ValueError("need at least one seed")
  if np.any(~np.isfinite(t)) or np.any(t < 0):
    raise ValueError(f"times must be finite and >= 0, got {times}")
  return t, e


def kaplan_meier(times, events) -> Tuple[np.ndarray, np.ndarray]:
  """The Kaplan-Meier estimate: `(event_times [M], survival [M])`.

  `survival[j]` is S just after `event_times[j]` (the distinct times at which some seed
  reached the threshold, ascending); S = 1 before the first. A seed censored at the same
  time as an event is counted at risk at that time (the usual convention).
  """
  t, e = _check(times, events)
  event_times = np.unique(t[e])
  s, out = 1.0, []
  for u in event_times:
    at_risk = np.sum(t >= u)
    d = np.sum((t == u) & e)
    s *= 1.0 - d / at_risk
    out.append(s)
  return event_times, np.asarray(out, np.float64)


def km_quantile(times, events, q: float = 0.5) -> float:
  """The smallest event time t with 1 - S(t) >= q (the median time for q = 0.5); inf
  when the estimate never gets there (too many seeds censored)."""
  if not 0.0 < q <= 1.0:
    raise ValueError(f"q must lie in (0, 1], got {q}")
  et, s = kaplan_meier(times, events)
  hit = np.nonzero(1.0 - s >= q - 1e-12)[0]
  return float(et[hit[0]]) if hit.size else float("inf")


def restricted_mean(times, events, tau: float) -> float:
  """The restricted mean time to threshold, the area under S(t) on [0, tau].

  A seed censored before `tau` contributes through the estimate; `tau` is usually the
  budget every arm ran (the same for the arms compared). Units are those of `times`.
  """
  if not tau > 0:
    raise ValueError(f"tau must be > 0, got {tau}")
  et, s = kaplan_meier(times, events)
  keep = et < tau
  knots = np.concatenate([[0.0], et[keep], [tau]])
  levels = np.concatenate([[1.0], s[keep]])
  return float(np.sum(np.diff(knots) * levels))


def bootstrap_interval(stat: Callable[..., float], *arrays, num: int = 2000,
                       seed: int = 0, confidence: float = 0.95
                       ) -> Tuple[float, float, float]:
  """`(estimate, low, high)`: `stat(*arrays)` and its percentile bootstrap interval.

  All `arrays` share their first axis (seeds) and are resampled with the SAME indices,
  so paired data (two arms, or several horizons, with shared seeds) stays paired.
  Resamples on which `stat` is not finite are dropped; NaN bounds if none is left.
  """
  arrays = [np.asarray(a) for a in arrays]
  n = {len(a) for a in arrays}
  if len(n) != 1:
    raise ValueError(f"arrays must share their first axis, got lengths {sorted(n)}")
  n = n.pop()
  if not 0.0 < confidence < 1.0:
    raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
  rng = np.random.default_rng(seed)
  estimate = float(stat(*arrays))
  values = []
  for _ in range(int(num)):
    idx = rng.integers(0, n, n)
    v = float(stat(*[a[idx] for a in arrays]))
    if np.isfinite(v):
      values.append(v)
  if not values:
    return estimate, float("nan"), float("nan")
  alpha = (1.0 - confidence) / 2
  low, high = np.quantile(values, [alpha, 1.0 - alpha])
  return estimate, float(low), float(high)


def rmst_interval(times, events, tau: float, num: int = 2000, seed: int = 0
                  ) -> Tuple[float, float, float]:
  """`(rmst, low, high)`: the restricted mean time and its bootstrap interval over seeds."""
  _check(times, events)
  return bootstrap_interval(lambda t, e: restricted_mean(t, e, tau),
                            np.asarray(times, np.float64), np.asarray(events, bool),
                            num=num, seed=seed)


def local_slopes(horizons: Sequence[float], values, num: int = 2000, seed: int = 0,
                 stat: Optional[Callable] = None):
  """Log-log slopes between consecutive horizons, with paired bootstrap intervals.

  Args:
    horizons: [H] ascending positive horizons.
    values: [N, H] a positive per-seed quantity at each horizon (seeds share keys across
      horizons, so each resample keeps a seed's whole row).
    stat: `[N'] -> scalar` summary per horizon before the slope (default the mean).
  Returns:
    a list of `H - 1` dicts `{from, to, slope, low, high}`: d log stat / d log T between
    horizons j and j + 1.
  """
  h = np.asarray(horizons, np.float64)
  v = np.asarray(values, np.float64)
  if h.ndim != 1 or np.any(h <= 0) or np.any(np.diff(h) <= 0):
    raise ValueError(f"horizons must be ascending and > 0, got {horizons}")
  if v.ndim != 2 or v.shape[1] != h.size:
    raise ValueError(f"values must be [N, H] with H = {h.size}, got {v.shape}")
  summary = stat or (lambda x: np.mean(x))
  out = []
  for j in range(h.size - 1):
    def slope(rows, j=j):
      a, b = summary(rows[:, j]), summary(rows[:, j + 1])
      if a <= 0 or b <= 0:
        return float("nan")
      return (np.log(b) - np.log(a)) / (np.log(h[j + 1]) - np.log(h[j]))
    est, low, high = bootstrap_interval(slope, v, num=num, seed=seed)
    out.append({"from": float(h[j]), "to": float(h[j + 1]), "slope": est, "low": low,
                "high": high})
  return out


def fisher_exact(successes_a: int, n_a: int, successes_b: int, n_b: int) -> float:
  """Two-sided Fisher exact p-value for two rates (e.g. seeds at the threshold)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  for k, n in ((successes_a, n_a), (successes_b, n_b)):
    if not 0 <= k <= n or n < 1:
      raise ValueError(f"need 0 <= successes <= n and n >= 1, got {k}, {n}")
  table = [[successes_a, n_a - successes_a], [successes_b, n_b - successes_b]]
  return float(stats.fisher_exact(table)[1])
