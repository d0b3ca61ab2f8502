"""Part B's run and pages: tuning, reported cells, survival statistics, tables, figure.

`run(config, workdir)` (config: the study's; part B's fields are `config.learning`,
`learning.default_config`) writes under `workdir/B/`:

  * `cells/tune/<family>_<arm>.json`: the tuning cell (tune_seeds x rates lanes at
    `tune_horizon`, budget `tune_max_updates`) and the rate it picked (least restricted
    mean updates to the threshold, tau the tuning budget; the first of equals);
  * `cells/<family>/<arm>_T<T>.json`: the reported cell (`seeds` seeds at that rate);
  * `summary.json`, `results.md`, `results.csv`, `km.png` (Kaplan-Meier curves).

Order: every tuning cell, then the reported cells by T (shortest first), family, arm, so
a run cut short has every arm at its shorter T. A finished cell is read, not rerun; a
running one resumes from its checkpoint (`learning.run_cell`).

Statistics per (family, T, arm) (`credit_jax/experiments/survival.py`, scipy's log-rank test):
seeds at the threshold, the Kaplan-Meier median updates and env steps, the restricted
mean updates (tau `max_updates`) and env steps (tau the least of the arms' budgets at
that T, `max_updates` x `steps_per_update`) with percentile bootstrap intervals; against
`reinforce_loo` (seeds shared: paired) the restricted-mean difference in env steps with
its interval and the log-rank p-value in env steps. Per (family, arm): local log-log
slopes of the restricted mean updates between adjacent T (paired bootstrap over seeds,
which share keys across T), and the largest T at which the Kaplan-Meier estimate has
>= 90% of seeds at the threshold by the budget, with S(budget) there.
"""
from __future__ import annotations

import csv
import json
import os
from typing import Dict, List, Tuple

import numpy as np

from credit_jax.experiments import survival
from credit_jax.experiments import report
from credit_jax.experiments.horizon_answer import anatomy, learning

__all__ = ["paired_rmst_difference", "pick_rate", "run", "summarise", "survival_at"]

REFERENCE = "reinforce_loo"


def survival_at(times, events, at) -> np.ndarray:
  """S(at) of the Kaplan-Meier estimate, for `at` a scalar or array (same shape out)."""
  et, s = survival.kaplan_meier(times, events)
  at = np.asarray(at, np.float64)
  idx = np.searchsorted(et, at, side="right")      # events at or before `at`
  return np.where(idx == 0, 1.0, np.concatenate([[1.0], s])[idx])


def paired_rmst_difference(times_a, events_a, times_b, events_b, tau: float,
                           num: int = 2000, seed: int = 0) -> Tuple[float, float, float]:
  """`(rmst_a - rmst_b, low, high)` with seeds resampled jointly (arms share seed i)."""
  ta, ea = survival._check(times_a, events_a)
  tb, eb = survival._check(times_b, events_b)
  if ta.shape != tb.shape:
    raise ValueError(f"paired arms need the same seeds, got {ta.shape} and {tb.shape}")
  rmst = survival.restricted_mean
  return survival.bootstrap_interval(lambda a, b, c, d: rmst(a, b, tau) - rmst(c, d, tau),
                                     ta, ea, tb, eb, num=num, seed=seed)


def _read(path):
  with open(path) as f:
    return json.load(f)


def pick_rate(rec: dict, rates) -> Tuple[float, Dict[str, float]]:
  """(rate, {rate: restricted mean updates}) of a tuning cell: the least restricted mean
  updates to the threshold over its lanes at each rate (tau its budget); among equals
  (all censored, say) the rate whose lanes' last exact J is highest on average."""
  t, e = np.asarray(rec["times"], np.float64), np.asarray(rec["events"], bool)
  lrs = np.asarray(rec["lrs"], np.float64)
  tau = float(rec["max_updates"])
  means = {}
  for r in rates:
    m = np.isclose(lrs, float(r))
    means[f"{float(r):g}"] = survival.restricted_mean(t[m], e[m], tau)
  last = np.asarray(rec["curve"][-1], np.float64)
  best = min(rates, key=lambda r: (round(means[f"{float(r):g}"], 9),
                                   -float(last[np.isclose(lrs, float(r))].mean())))
  return float(best), means


def run(config, workdir: str, log=print) -> dict:
  """Runs part B (module doc); returns its summary."""
  lc = config.learning
  learning.validate_config(lc)
  root = os.path.join(workdir, "B")
  os.makedirs(os.path.join(root, "cells", "tune"), exist_ok=True)
  tune_seeds, seeds = learning.seed_lists(lc)
  rates = [float(r) for r in lc.rates]
  num_pivotal, num_actions = int(config.num_pivotal), int(config.num_actions)
  chosen, tuning, programs = {}, {}, {}

  def program(probe, arm):   # one compiled program per (family, arm, T), tuning's reused
    key = (probe.family, arm, probe.horizon)
    if key not in programs:
      programs[key] = learning.make_program(lc, probe, arm)
    return programs[key]
  for family in lc.families:
    probe = anatomy.make_probe(family, int(lc.tune_horizon), 0.0, num_pivotal, num_actions)
    for arm in learning.arm_names(lc):
      path = os.path.join(root, "cells", "tune", f"{family}_{arm}.json")
      if os.path.exists(path):
        rec = _read(path)
      elif not lc.new_cells:
        continue
      else:
        lane_seeds = [s for r in rates for s in tune_seeds]
        lane_rates = [r for r in rates for _ in tune_seeds]
        rec = learning.run_cell(lc, probe, arm, lane_seeds, lane_rates,
                                int(lc.tune_max_updates), path, log,
                                program=program(probe, arm))
      rate, means = pick_rate(rec, rates)
      chosen[(family, arm)] = rate
      tuning[f"{family}/{arm}"] = {"rate": rate, "rmst_updates": means,
                                   "train_s": rec["train_s"]}
      log(f"horizon B tune {family} {arm}: rate {rate:g} ({means}) | "
          f"{rec['train_s']:.0f}s")
  records = []
  for horizon in sorted(int(t) for t in lc.horizons):
    for family in lc.families:
      probe = anatomy.make_probe(family, horizon, 0.0, num_pivotal, num_actions)
      folder = os.path.join(root, "cells", family)
      os.makedirs(folder, exist_ok=True)
      for arm in learning.arm_names(lc):
        path = os.path.join(folder, f"{arm}_T{horizon}.json")
        if os.path.exists(path):
          records.append(_read(path))
          continue
        if not lc.new_cells or (family, arm) not in chosen:
          continue
        rate = chosen[(family, arm)]
        rec = learning.run_cell(lc, probe, arm, seeds, [rate] * len(seeds),
                                int(lc.max_updates), path, log,
                                program=program(probe, arm))
        records.append(rec)
        log(f"horizon B {probe.name} {arm}: {int(np.sum(rec['events']))}/{len(seeds)} "
            f"at {lc.threshold} | {rec['train_s']:.0f}s")
  summary = summarise(lc, records)
  summary["tuning"] = tuning
  lines = markdown(lc, summary)
  write_csv(os.path.join(root, "results.csv"), summary["cells"])
  figure(root, lc, records)
  with open(os.path.join(root, "results.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  report.write_summary(root, summary, "\n".join(lines))
  return summary


def _encode(rec) -> np.ndarray:
  """Times with censoring as a sign (negative: censored), for `survival.local_slopes`."""
  t, e = np.asarray(rec["times"], np.float64), np.asarray(rec["events"], bool)
  return np.where(e, t, -t)


def summarise(lc, records: List[dict]) -> dict:
  """Per-cell statistics, paired comparisons, slopes and the largest T (module doc)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  by = {(r["family"], r["horizon"], r["arm"]): r for r in records}
  cells = []
  tau_u = float(lc.max_updates)
  for (family, horizon, arm), r in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                      kv[0][2])):
    t, e = np.asarray(r["times"], np.float64), np.asarray(r["events"], bool)
    steps = t * float(r["steps_per_update"])
    arms_here = [a for (f, h, a) in by if f == family and h == horizon]
    tau_s = min(float(by[(family, horizon, a)]["max_updates"]) *
                float(by[(family, horizon, a)]["steps_per_update"]) for a in arms_here)
    rm, lo, hi = survival.rmst_interval(t, e, tau_u)
    rs, slo, shi = survival.rmst_interval(steps, e, tau_s)
    cell = {"family": family, "horizon": horizon, "arm": arm, "lr": r["lrs"][0],
            "seeds": len(t), "reached": int(e.sum()),
            "km_median_updates": survival.km_quantile(t, e),
            "km_median_steps": survival.km_quantile(steps, e),
            "rmst_updates": [rm, lo, hi], "tau_updates": tau_u,
            "rmst_steps": [rs, slo, shi], "tau_steps": tau_s,
            "survival_at_budget": float(survival_at(t, e, float(r["max_updates"]))),
            "updates_run": int(r["checks"][-1]) if r["checks"] else 0,
            "steps_per_update": int(r["steps_per_update"]), "train_s": r["train_s"]}
    ref = by.get((family, horizon, REFERENCE))
    if ref is not None and arm != REFERENCE and ref["seeds"] == r["seeds"]:
      tr = np.asarray(ref["times"], np.float64) * float(ref["steps_per_update"])
      er = np.asarray(ref["events"], bool)
      d = paired_rmst_difference(steps, e, tr, er, tau_s)
      cell["rmst_steps_minus_reference"] = list(d)
      if e.any() or er.any():
        with np.errstate(invalid="ignore", divide="ignore"):
          res = stats.logrank(stats.CensoredData(uncensored=steps[e], right=steps[~e]),
                              stats.CensoredData(uncensored=tr[er], right=tr[~er]))
        if np.isfinite(res.pvalue):   # NaN where both arms' times are all one value
          cell["logrank_p_vs_reference"] = float(res.pvalue)
    cells.append(cell)
  slopes, largest = {}, {}
  for family in sorted({k[0] for k in by}):
    for arm in sorted({k[2] for k in by if k[0] == family}):
      series = sorted([r for (f, h, a), r in by.items() if f == family and a == arm],
                      key=lambda r: r["horizon"])
      ok = [r for r in series if 1.0 - survival_at(
          r["times"], r["events"], float(r["max_updates"])) >= 0.9 - 1e-12]
      largest[f"{family}/{arm}"] = (
          {"horizon": ok[-1]["horizon"], "survival_at_budget": float(survival_at(
              ok[-1]["times"], ok[-1]["events"], float(ok[-1]["max_updates"]))),
           "horizons_run": [r["horizon"] for r in series]} if ok else
          {"horizon": None, "horizons_run": [r["horizon"] for r in series]})
      if len(series) > 1 and len({tuple(r["seeds"]) for r in series}) == 1:
        values = np.stack([_encode(r) for r in series], axis=1)
        stat = lambda col: survival.restricted_mean(np.abs(col), col > 0, tau_u)  # noqa: E731
        slopes[f"{family}/{arm}"] = survival.local_slopes(
            [r["horizon"] for r in series], values, num=1000, stat=stat)
  return {"cells": cells, "slopes": slopes, "largest_T_at_90": largest,
          "budget_updates": int(lc.max_updates), "threshold": float(lc.threshold)}


def _fmt(x, digits=0):
  if x is None or not np.isfinite(x):
    return "-"
  return f"{x:.{digits}f}" if abs(x) < 1e5 else f"{x:.3g}"


def markdown(lc, summary) -> List[str]:
  """results.md lines: per family a table of cells, the slopes, the largest T."""
  lines = [f"## Part B: tabular learning, updates and env steps to exact J >= "
           f"{lc.threshold} (budget {lc.max_updates} updates)", ""]
  for name, t in summary.get("tuning", {}).items():
    lines.append(f"- tuned {name}: lr {t['rate']:g} (restricted mean updates per rate "
                 + ", ".join(f"{k}: {v:.0f}" for k, v in t["rmst_updates"].items()) + ")")
  lines.append("")
  for family in sorted({c["family"] for c in summary["cells"]}):
    rows = []
    for c in [c for c in summary["cells"] if c["family"] == family]:
      d = c.get("rmst_steps_minus_reference")
      rows.append([c["horizon"], c["arm"], f"{c['lr']:g}", f"{c['reached']}/{c['seeds']}",
                   _fmt(c["km_median_updates"]),
                   f"{_fmt(c['rmst_updates'][0])} [{_fmt(c['rmst_updates'][1])}, "
                   f"{_fmt(c['rmst_updates'][2])}]",
                   _fmt(c["km_median_steps"]),
                   f"{c['rmst_steps'][0]:.3g} [{c['rmst_steps'][1]:.3g}, "
                   f"{c['rmst_steps'][2]:.3g}] (tau {c['tau_steps']:.3g})",
                   f"{d[0]:.3g} [{d[1]:.3g}, {d[2]:.3g}]" if d else "-",
                   f"{c['logrank_p_vs_reference']:.2g}" if "logrank_p_vs_reference" in c
                   else "-", f"{c['train_s']:.0f}"])
    lines += [f"### {family}", ""] + report.table(
        ["T", "arm", "lr", "seeds at threshold", "KM median updates",
         f"restricted mean updates (tau {lc.max_updates}) [95%]", "KM median env steps",
         "restricted mean env steps [95%]", f"minus {REFERENCE}'s (paired) [95%]",
         f"log-rank p vs {REFERENCE}", "train s"], rows) + [""]
  if summary["slopes"]:
    rows = []
    for name, sl in summary["slopes"].items():
      for s in sl:
        rows.append([name, f"{s['from']:.0f}-{s['to']:.0f}",
                     f"{s['slope']:.2f} [{s['low']:.2f}, {s['high']:.2f}]"])
    lines += ["Local slopes d log(restricted mean updates) / d log T [95%]:", ""]
    lines += report.table(["family/arm", "T", "slope"], rows) + [""]
  rows = [[name, v["horizon"] if v["horizon"] else "none",
           f"{v['survival_at_budget']:.2f}" if v["horizon"] else "-",
           ",".join(map(str, v["horizons_run"]))]
          for name, v in summary["largest_T_at_90"].items()]
  lines += ["Largest T with >= 90% of seeds at the threshold by the budget (Kaplan-Meier):",
            ""] + report.table(["family/arm", "largest T", "S(budget) there",
                                "T run"], rows) + [""]
  return lines


def write_csv(path: str, cells: List[dict]) -> None:
  keys = ["family", "horizon", "arm", "lr", "seeds", "reached", "km_median_updates",
          "km_median_steps", "survival_at_budget", "steps_per_update", "train_s"]
  with open(path, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(keys + ["rmst_updates", "rmst_updates_low", "rmst_updates_high",
                       "rmst_steps", "rmst_steps_low", "rmst_steps_high",
                       "logrank_p_vs_reference"])
    for c in cells:
      w.writerow([c[k] for k in keys] + list(c["rmst_updates"]) + list(c["rmst_steps"])
                 + [c.get("logrank_p_vs_reference", "")])


def figure(root: str, lc, records: List[dict]) -> None:
  """km.png: per family (rows) and T (columns), each arm's Kaplan-Meier fraction of seeds
  at the threshold against env steps."""
  families = sorted({r["family"] for r in records})
  horizons = sorted({r["horizon"] for r in records})
  if not records:
    return
  fig, axes = report.figure(len(families), len(horizons),
                            figsize=(3.6 * len(horizons), 3.2 * len(families)))
  for i, family in enumerate(families):
    for j, horizon in enumerate(horizons):
      ax = axes[i, j]
      for r in sorted([r for r in records if r["family"] == family and
                       r["horizon"] == horizon], key=lambda r: r["arm"]):
        steps = np.asarray(r["times"], np.float64) * float(r["steps_per_update"])
        et, s = survival.kaplan_meier(steps, r["events"])
        end = float(r["checks"][-1]) * float(r["steps_per_update"])
        x = np.concatenate([[steps.min() * 0.5 if steps.min() > 0 else 1.0], et, [end]])
        y = 1.0 - np.concatenate([[1.0], s, [s[-1] if len(s) else 1.0]])
        ax.step(x, y, where="post", label=r["arm"], lw=1)
      ax.set_xscale("log")
      ax.set_ylim(-0.02, 1.02)
      ax.set_title(f"{family}, T = {horizon}", fontsize=9)
      ax.set_xlabel("env steps")
      if j == 0:
        ax.set_ylabel(f"fraction at J >= {lc.threshold}")
  axes[0, -1].legend(fontsize=6)
  report.save_figure(fig, root, "km.png")
