"""The horizon study's first-protocol KeyChain runs, re-analysed from what they printed.

  python3 -m credit_jax.experiments.horizon.reanalysis [--probes_workdir=runs/probes]

The study's per-seed outputs (results.csv and cells/*.json of its workdirs) were not kept.
What survives is each cell's printed aggregate (`CELLS`, taken from the tables of
docs/results/horizon.md as first published, commit c3cd1a6): seeds at 90% out of 8, the
mean and 95% t half-width over seeds of updates to 90% with each censored seed counted at
the budget (150 updates), the same for final success, and the updates the cell ran. This
module recomputes only what those numbers determine:

* seed counts: Wilson intervals (`stats.wilson_interval`) and two-sided Fisher exact
  p-values between arms (`survival.fisher_exact`), `COMPARISONS`;
* the restricted mean time to 90% up to the budget (Kaplan-Meier): a cell stops early only
  once every seed holds the level, so every censored seed was censored AT the budget; then
  the Kaplan-Meier estimate on [0, budget] is the empirical distribution of min(time,
  budget) and its restricted mean IS the printed censored mean (`check_cell` tests that
  the aggregates are possible). Its bootstrap interval needs per-seed times: not computed;
* local log-log slopes of mean updates between consecutive T: the point slope from the
  means, and an interval from the delta method on the log means (relative half-width
  h / m at each T) with the two halves ADDED, which bounds the difference for any
  correlation between horizons (seeds share keys across T; `survival.local_slopes`'
  paired bootstrap needs the per-seed rows). Where the larger T has censored seeds its
  restricted mean is below the true mean and the slope is a lower bound.
No interval here is a t-interval on a censored or bimodal quantity: the only t half-widths
kept are those of cells in which every seed reached the level (uncensored times).

With `--probes_workdir` it also reads the probes measurement's cells (credit_jax/
experiments/probes/study.py) and prints, per KeyChain setting and T, the seeds whose
sampled policy succeeds on >= 90% of its evaluation episodes, with the Fisher p of PPO
lambda = 1 against lambda = 0.95.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
from typing import Dict, List, Optional, Sequence, Tuple

from credit_jax import stats, survival

__all__ = ["BUDGET", "CELLS", "COMPARISONS", "NOISE", "SEEDS", "Cell", "cell",
           "cell_pivot", "cell_table", "check_cell", "comparison_table", "local_slope", "log_slopes",
           "markdown", "probe_counts", "slope_table", "tuning"]

SEEDS = 8
BUDGET = 150   # updates per seed and cell: 9,600 T env steps

# (method, T, lr, seeds at 90%, mean updates to 90% (censored at BUDGET), its 95% t half,
#  mean final success, its half, updates run)
Cell = Tuple[str, int, float, int, float, float, float, float, int]
CELLS: Tuple[Cell, ...] = (
    ("reinforce", 10, 0.03, 8, 10.4, 1.4, 0.999, 0.0015, 20),
    ("grpo_k8", 10, 0.01, 8, 11.1, 1.3, 0.997, 0.0032, 20),
    ("grpo_k32", 10, 0.01, 8, 11.6, 1.3, 0.999, 0.002, 20),
    ("ppo_mlp_g1_l1", 10, 0.01, 8, 12.9, 1.0, 0.995, 0.0028, 30),
    ("ppo_mlp_g1_l0.95", 10, 0.01, 8, 13.2, 1.2, 0.99, 0.0079, 20),
    ("ppo_oracle_g1_l0.95", 10, 0.01, 8, 10.9, 1.2, 0.996, 0.0065, 20),
    ("ppo_hist_g1_l0.95", 10, 0.01, 8, 13.5, 3.3, 0.988, 0.0073, 20),
    ("ppo_gru_g1_l1", 10, 0.01, 8, 21.6, 7.1, 0.984, 0.0093, 40),
    ("ppo_mlp_g0.999_l0.95", 10, 0.01, 8, 13.2, 1.2, 0.995, 0.0066, 20),
    ("ppo_mlp_g0.99_l0.95", 10, 0.01, 8, 13.4, 0.99, 0.999, 0.002, 20),
    ("reinforce", 30, 0.03, 8, 12.4, 1.5, 0.999, 0.0015, 20),
    ("grpo_k8", 30, 0.01, 8, 11.6, 0.99, 0.993, 0.0031, 20),
    ("grpo_k32", 30, 0.01, 8, 12.9, 1.5, 0.99, 0.0062, 20),
    ("ppo_mlp_g1_l1", 30, 0.01, 8, 14.6, 1.9, 0.99, 0.009, 20),
    ("ppo_mlp_g1_l0.95", 30, 0.01, 8, 17.5, 3.1, 0.988, 0.0093, 30),
    ("ppo_oracle_g1_l0.95", 30, 0.01, 8, 14.5, 2.4, 0.994, 0.0054, 20),
    ("ppo_hist_g1_l0.95", 30, 0.01, 7, 33.6, 39.0, 0.901, 0.23, 150),
    ("ppo_gru_g1_l1", 30, 0.01, 8, 21.8, 2.4, 0.986, 0.012, 40),
    ("ppo_mlp_g0.999_l0.95", 30, 0.01, 8, 18.1, 3.6, 0.99, 0.0097, 30),
    ("ppo_mlp_g0.99_l0.95", 30, 0.01, 8, 19.5, 5.2, 0.997, 0.0046, 40),
    ("reinforce", 100, 0.03, 8, 22.1, 9.6, 0.999, 0.0015, 60),
    ("grpo_k8", 100, 0.01, 8, 14.9, 0.7, 0.975, 0.017, 20),
    ("grpo_k32", 100, 0.01, 8, 15.8, 1.4, 0.971, 0.0096, 20),
    ("ppo_mlp_g1_l1", 100, 0.01, 8, 17.9, 3.9, 0.99, 0.0072, 30),
    ("ppo_mlp_g1_l0.95", 100, 0.01, 8, 30.2, 6.5, 0.986, 0.0073, 50),
    ("ppo_oracle_g1_l0.95", 100, 0.01, 8, 21.9, 7.3, 0.995, 0.0063, 40),
    ("ppo_hist_g1_l0.95", 100, 0.01, 7, 45.8, 36.0, 0.925, 0.16, 150),
    ("ppo_gru_g1_l1", 100, 0.01, 8, 37.9, 5.7, 0.967, 0.009, 50),
    ("ppo_mlp_g0.999_l0.95", 100, 0.01, 8, 32.9, 8.2, 0.979, 0.014, 60),
    ("ppo_mlp_g0.99_l0.95", 100, 0.01, 8, 31.1, 7.2, 0.979, 0.02, 50),
    ("reinforce", 300, 0.03, 7, 44.9, 39.0, 0.878, 0.29, 150),
    ("grpo_k8", 300, 0.01, 8, 21.6, 3.8, 0.996, 0.002, 40),
    ("grpo_k32", 300, 0.01, 8, 22.9, 3.1, 0.984, 0.012, 30),
    ("ppo_mlp_g1_l1", 300, 0.01, 8, 25.2, 6.0, 0.993, 0.006, 50),
    ("ppo_mlp_g1_l0.95", 300, 0.01, 8, 76.4, 19.0, 0.965, 0.023, 120),
    ("ppo_oracle_g1_l0.95", 300, 0.01, 6, 62.0, 48.0, 0.864, 0.21, 150),
    ("ppo_gru_g1_l1", 300, 0.01, 8, 75.2, 11.0, 0.975, 0.0091, 100),
    ("ppo_mlp_g0.999_l0.95", 300, 0.01, 6, 92.9, 33.0, 0.821, 0.27, 150),
    ("ppo_mlp_g0.99_l0.95", 300, 0.01, 7, 83.6, 26.0, 0.829, 0.23, 150),
    ("reinforce", 1000, 0.03, 6, 70.6, 43.0, 0.756, 0.38, 150),
    ("grpo_k8", 1000, 0.01, 8, 43.6, 4.8, 0.977, 0.0074, 60),
    ("grpo_k32", 1000, 0.01, 8, 40.1, 6.6, 0.979, 0.016, 60),
    ("ppo_mlp_g1_l1", 1000, 0.01, 8, 51.5, 12.0, 0.984, 0.01, 80),
    ("ppo_mlp_g1_l0.95", 1000, 0.01, 0, 150.0, 0.0, 0.123, 0.23, 150),
    ("ppo_oracle_g1_l0.95", 1000, 0.01, 5, 86.2, 50.0, 0.734, 0.31, 150),
    ("ppo_gru_g1_l1", 1000, 0.01, 6, 127.0, 15.0, 0.817, 0.23, 150),
    ("ppo_mlp_g0.999_l0.95", 1000, 0.01, 0, 150.0, 0.0, 0.173, 0.16, 150),
    ("grpo_k8", 3000, 0.01, 8, 79.4, 10.0, 0.978, 0.015, 130),
    ("grpo_k32", 3000, 0.01, 8, 83.5, 19.0, 0.977, 0.02, 120),
    ("ppo_mlp_g1_l1", 3000, 0.01, 7, 98.1, 27.0, 0.923, 0.16, 150),
    # REINFORCE at a second rate, run after the swept one (3e-2) had failed; own workdir.
    ("reinforce_lr0.01", 300, 0.01, 8, 44.2, 4.5, 0.997, 0.0061, 60),
    ("reinforce_lr0.01", 1000, 0.01, 8, 84.9, 22.0, 0.988, 0.026, 150),
)

# The arm each family's rate was swept on (T = 100, 8 seeds, 60 updates, 4 rates). Every
# cell splits the same base key into its seeds, so those arms' reported T = 100 cells are
# the very runs the rate was chosen on (their means equal the sweep's: 22.1, 14.9, 17.9).
_SWEPT = {"reinforce": "reinforce", "grpo": "grpo_k8", "ppo": "ppo_mlp_g1_l1"}
_SWEEP_T = 100

# Update-0 gradient noise of PPO lambda = 1 (returns minus an untrained baseline), 256
# episodes per seed: T, then (mean, 95% t half) over 8 seeds of the trace of the
# per-episode covariance and of the variance along grad J.
NOISE: Dict[str, Tuple[Tuple[int, float, float], ...]] = {
    "trace": ((10, 2.92, 2.1), (30, 3.86, 2.5), (100, 6.87, 3.9), (300, 16.2, 8.1),
              (1000, 38.0, 20.0), (3000, 128.0, 78.0)),
    "along grad J": ((10, 0.145, 0.076), (30, 0.141, 0.062), (100, 0.148, 0.071),
                     (300, 0.171, 0.052), (1000, 0.147, 0.07), (3000, 0.155, 0.059)),
}

# (what is compared, (successes, n) of arm a, (successes, n) of arm b): seeds at 90%
# unless said otherwise; the remedies' arms have 5 seeds.
COMPARISONS: Tuple[Tuple[str, Tuple[int, int], Tuple[int, int]], ...] = (
    ("T=1000: PPO lambda=1 vs lambda=0.95 (observation critic)", (8, 8), (0, 8)),
    ("T=1000: oracle vs observation critic, lambda=0.95", (5, 8), (0, 8)),
    ("T=300: oracle vs observation critic, lambda=0.95", (6, 8), (8, 8)),
    ("T=300: gamma=0.999 vs gamma=1 (lambda=0.95)", (6, 8), (8, 8)),
    ("T=300: gamma=0.99 vs gamma=1 (lambda=0.95)", (7, 8), (8, 8)),
    ("T=3000: GRPO K=8 vs PPO lambda=1", (8, 8), (7, 8)),
    ("T=1000: MLP actor vs GRU actor-critic (lambda=1)", (8, 8), (6, 8)),
    ("T=30 and T=100: observation vs history critic, lambda=0.95", (8, 8), (7, 8)),
    ("T=300: REINFORCE lr 1e-2 vs the swept 3e-2", (8, 8), (7, 8)),
    ("T=1000: REINFORCE lr 1e-2 vs the swept 3e-2", (8, 8), (6, 8)),
    ("T=10^4: GRPO trained at T=30 (every eval seed >= 0.9) vs direct GRPO K=32",
     (8, 8), (0, 5)),
    ("remedies, T=100 GoalGrid: relabeling vs plain GRPO", (5, 5), (4, 5)),
    ("remedies, T=1000 KeyChain: GRPO K=16 vs K=8", (4, 5), (2, 5)),
    ("remedies, T=1000 KeyChain: GRPO K=16 vs search-then-train", (4, 5), (2, 5)),
    ("remedies, T=1000 KeyChain k=5: GRPO K=16 vs K=8", (1, 5), (0, 5)),
)


def cell(method: str, horizon: int) -> Optional[Cell]:
  """The printed aggregate of (method, T), or None where that cell was not run."""
  for c in CELLS:
    if c[0] == method and c[1] == horizon:
      return c
  return None


def check_cell(c: Cell, seeds: int = SEEDS, budget: int = BUDGET) -> float:
  """Raises ValueError unless the aggregate is possible; returns the restricted mean
  updates to 90% up to `budget` (the printed censored mean, module doc).

  Censored seeds count `budget` each, so the reached seeds' times sum to
  seeds * mean - (seeds - reached) * budget, which must lie in [reached, reached * budget];
  a cell with a censored seed ran the whole budget.
  """
  name, horizon, _, reached, mean, half, _, _, run = c
  if not 0 <= reached <= seeds:
    raise ValueError(f"{name} T={horizon}: {reached} seeds reached out of {seeds}")
  if reached < seeds and run != budget:
    raise ValueError(f"{name} T={horizon}: censored seeds but only {run} updates run")
  rest = seeds * mean - (seeds - reached) * budget
  tol = 0.05 * seeds     # the printed mean has 3 significant digits
  if rest < reached - tol or rest > reached * budget + tol:
    raise ValueError(f"{name} T={horizon}: mean {mean} impossible with {reached}/{seeds} "
                     f"seeds reached and the rest censored at {budget}")
  if reached == 0 and half != 0:
    raise ValueError(f"{name} T={horizon}: every seed censored but half-width {half}")
  return float(mean)


def tuning(method: str, horizon: int) -> str:
  """How the cell's learning rate was chosen: 'S' the sweep's own runs (selected on
  them), 'T' swept on this arm at T = 100 only, 'A' swept on another arm, 'R' a second
  rate tried after the swept one failed."""
  if method.startswith("reinforce_lr"):
    return "R"
  family = method.split("_")[0]
  if _SWEPT.get(family) == method:
    return "S" if horizon == _SWEEP_T else "T"
  return "A"


def _fmt(x: float, digits: int = 3) -> str:
  return f"{x:.{digits}g}"


def _rate(k: int, n: int) -> str:
  low, high = stats.wilson_interval(k, n)
  return f"{k}/{n} [{low:.2f}, {high:.2f}]"


def cell_table() -> List[str]:
  """Markdown rows of every cell: seeds at 90% with a Wilson interval, the restricted
  mean updates to 90% (a t half-width only where no seed is censored), final success."""
  rows = ["| method | T | lr (tuning) | seeds at 90% [Wilson 95%] | RMST to 90%, updates "
          "(tau = 150) | 95% interval | final success, mean over seeds | updates run |",
          "|---|---|---|---|---|---|---|---|"]
  for c in CELLS:
    name, horizon, lr, reached, _, half, fin, fin_half, run = c
    rmst = check_cell(c)
    if reached == SEEDS:
      interval = f"± {_fmt(half, 2)} (t; uncensored)"
      final = f"{fin:.3f} ± {_fmt(fin_half, 2)}"
    else:
      interval = "not recomputable" if reached else "none (all censored)"
      final = f"{fin:.3f}"
    rows.append(f"| {name} | {horizon} | {lr:g} ({tuning(name, horizon)}) | "
                f"{_rate(reached, SEEDS)} | {'≥ ' if reached == 0 else ''}{rmst:.1f} | "
                f"{interval} | {final} | {run} |")
  return rows


def cell_pivot() -> List[str]:
  """Markdown rows of every cell, one row per method and a column per T: seeds at 90%,
  the restricted mean updates to 90% (with the t half-width where no seed is censored,
  else the mean final success) and the tuning mark of `tuning`."""
  horizons = sorted({c[1] for c in CELLS})
  methods = list(dict.fromkeys(c[0] for c in CELLS))
  rows = ["| method (lr) | " + " | ".join(f"T = {t}" for t in horizons) + " |",
          "|---|" + "---|" * len(horizons)]
  for m in methods:
    cols = []
    for t in horizons:
      c = cell(m, t)
      if c is None:
        cols.append("—")
        continue
      rmst, mark = check_cell(c), tuning(m, t)
      if c[3] == SEEDS:
        cols.append(f"8/8 · {rmst:.1f} ± {_fmt(c[5], 2)} {mark}")
      elif c[3] == 0:
        cols.append(f"**0/{SEEDS}** · ≥ {rmst:.0f} · final {c[6]:.2f} {mark}")
      else:
        cols.append(f"**{c[3]}/{SEEDS}** · {rmst:.1f} · final {c[6]:.2f} {mark}")
    lr = next(c[2] for c in CELLS if c[0] == m)
    rows.append(f"| {m} ({lr:g}) | " + " | ".join(cols) + " |")
  return rows


def local_slope(t_a: float, m_a: float, h_a: float, t_b: float, m_b: float, h_b: float
                ) -> Tuple[float, float]:
  """`(slope, half)`: d log m / d log T between (t_a, m_a) and (t_b, m_b), and the
  conservative delta-method half-width (h_a / m_a + h_b / m_b) / log(t_b / t_a)."""
  if min(t_a, m_a, t_b, m_b) <= 0 or t_b <= t_a or min(h_a, h_b) < 0:
    raise ValueError(f"need 0 < t_a < t_b, positive means, h >= 0; got {t_a, m_a, h_a}, "
                     f"{t_b, m_b, h_b}")
  span = math.log(t_b / t_a)
  return math.log(m_b / m_a) / span, (h_a / m_a + h_b / m_b) / span


def log_slopes(points: Sequence[Tuple[int, float, float]]) -> List[Tuple[int, int, float,
                                                                        float]]:
  """`[(t_a, t_b, slope, half)]` between consecutive points `(T, mean, half)`."""
  return [(a[0], b[0]) + local_slope(a[0], a[1], a[2], b[0], b[1], b[2])
          for a, b in zip(points[:-1], points[1:])]


def slope_table(methods: Sequence[str] = ("grpo_k8", "grpo_k32", "ppo_mlp_g1_l1",
                                          "ppo_mlp_g1_l0.95", "ppo_gru_g1_l1",
                                          "reinforce", "reinforce_lr0.01")) -> List[str]:
  """Markdown rows of the local slopes of updates to 90% (and of the update-0 noise,
  whose per-T intervals are too wide to resolve a local slope: its rows add the slope
  between the first and the last T)."""
  rows = ["| quantity | local slopes d log / d log T between consecutive T (95%, "
          "conservative) |", "|---|---|"]

  def fmt(t_a, t_b, s, h, lower=False):
    # A lower bound carries no interval: the censored side's RMST is itself a bound.
    return f"{t_a}→{t_b}: ≥ {s:.2f}" if lower else f"{t_a}→{t_b}: {s:.2f} ± {h:.2f}"
  for m in methods:
    cs = sorted((c for c in CELLS if c[0] == m), key=lambda c: c[1])
    parts = []
    for a, b in zip(cs[:-1], cs[1:]):
      if a[3] < SEEDS:
        break            # censored at the smaller T: the RMST ratio bounds nothing
      s, h = local_slope(a[1], a[4], a[5], b[1], b[4], b[5] if b[3] == SEEDS else 0.0)
      parts.append(fmt(a[1], b[1], s, h, lower=b[3] < SEEDS))
    rows.append(f"| {m}: updates to 90% | {'; '.join(parts)} |")
  for name, points in NOISE.items():
    parts = [fmt(*x) for x in log_slopes(points)]
    parts.append("end to end " + fmt(*log_slopes([points[0], points[-1]])[0]))
    rows.append(f"| PPO lambda=1, update 0: {name} | {'; '.join(parts)} |")
  return rows


def comparison_table() -> List[str]:
  """Markdown rows of `COMPARISONS`: both counts with Wilson intervals, Fisher p."""
  rows = ["| comparison | arm a | arm b | Fisher exact p (two-sided) |", "|---|---|---|---|"]
  for label, (ka, na), (kb, nb) in COMPARISONS:
    p = survival.fisher_exact(ka, na, kb, nb)
    rows.append(f"| {label} | {_rate(ka, na)} | {_rate(kb, nb)} | {p:.2g} |")
  return rows


def probe_counts(workdir: str, level: float = 0.9) -> List[str]:
  """Markdown rows from a probes workdir: per KeyChain setting and T, the seeds at
  >= `level` sampled success per method and the Fisher p of ppo_l1 vs ppo_l0.95."""
  recs = {}
  for path in sorted(glob.glob(os.path.join(workdir, "cells", "*.json"))):
    with open(path) as f:
      r = json.load(f)
    recs[r["cell"]] = r
  if not recs:
    raise ValueError(f"no probes cells under {workdir}/cells")
  groups = sorted({n.rsplit("/", 1)[0] for n in recs})
  methods = ("grpo_k8", "ppo_l1", "ppo_l0.95")
  rows = [f"| setting | updates | seeds >= {level:.0%}: " + " | ".join(methods) +
          " | p (ppo_l1 vs ppo_l0.95) |", "|---|---|---|---|---|---|"]
  for g in groups:
    counts, updates = {}, "-"
    for m in methods:
      r = recs.get(f"{g}/{m}")
      if r is not None:
        counts[m] = (sum(x >= level for x in r["success_per_seed"]), int(r["seeds"]))
        updates = r["updates"]
    cols = [f"{counts[m][0]}/{counts[m][1]}" if m in counts else "-" for m in methods]
    p = (f"{survival.fisher_exact(*counts['ppo_l1'], *counts['ppo_l0.95']):.2g}"
         if "ppo_l1" in counts and "ppo_l0.95" in counts else "-")
    rows.append(f"| {g} | {updates} | " + " | ".join(cols) + f" | {p} |")
  return rows


def markdown(probes_workdir: Optional[str] = None) -> str:
  """Every table this module regenerates, as one markdown string."""
  parts = ["### Every cell", *cell_pivot(), "", "### Every cell, one row each",
           *cell_table(), "", "### Local slopes", *slope_table(), "",
           "### Seed counts compared", *comparison_table()]
  if probes_workdir:
    parts += ["", f"### Probes ({probes_workdir})", *probe_counts(probes_workdir)]
  return "\n".join(parts) + "\n"


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--probes_workdir", default=None,
                      help="a workdir of scripts/probes.py (its cells/*.json)")
  print(markdown(parser.parse_args().probes_workdir), end="")
