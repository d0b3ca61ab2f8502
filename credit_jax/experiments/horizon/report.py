"""Tables, summary and figures of the horizon study (credit_jax/experiments/horizon/study.py).

Every interval is a 95% Student-t interval over seeds (`report.t_interval`). A seed that
never reached the level counts with its budget (a lower bound: "censored"); a cell with
censored seeds shows ">=" before its mean and the count of seeds that reached the level.
"""
from __future__ import annotations

import csv
import os
from typing import Dict, List, Optional, Sequence

import numpy as np

from credit_jax.experiments import report

CSV_FIELDS = ("method", "horizon", "seed", "lr", "budget_updates", "budget_env_steps",
              "updates_to_level", "env_steps_to_level", "censored", "final_success",
              "updates_run", "compile_s", "run_s")


def ci(x) -> tuple:
  """(mean, 95% half-width) of `x` as Python floats (half NaN below 2 values)."""
  mean, half = report.t_interval(np.asarray(x, np.float64))
  return float(mean), float(half)


def slope_interval(horizons: Sequence[float], updates: Sequence[float]) -> dict:
  """Least-squares slope of log(updates) on log(T) with a 95% interval.

  Args:
    horizons, updates: [P] points (one per seed and T; only uncensored seeds).
  Returns:
    `{"slope", "half", "points", "horizons"}`; slope NaN with fewer than two distinct T,
    half NaN with fewer than three points.
  """
  from scipy import stats  # pylint: disable=g-import-not-at-top
  x = np.log(np.asarray(horizons, np.float64))
  y = np.log(np.asarray(updates, np.float64))
  if x.shape != y.shape or x.ndim != 1:
    raise ValueError(f"horizons and updates must be [P], got {x.shape} and {y.shape}")
  distinct = sorted(set(np.asarray(horizons).tolist()))
  out = {"slope": float("nan"), "half": float("nan"), "points": int(x.size),
         "horizons": [int(h) for h in distinct]}
  if len(distinct) < 2:
    return out
  fit = stats.linregress(x, y)
  out["slope"] = float(fit.slope)
  if x.size > 2:
    out["half"] = float(stats.t.ppf(0.975, x.size - 2) * fit.stderr)
  return out


GAE_STATS = ("bias", "cosine", "cosine_debiased", "noise", "objective", "variance_along",
             "variance", "true_norm")


def gae_grad_summary(cell: dict) -> dict:
  """Seed mean and 95% interval of the GAE-gradient measurement at a cell's first and
  last measured update (`{}` when the cell measured nothing)."""
  out = {}
  for stat in GAE_STATS:
    points = cell.get("gae_grad", {}).get("gae_grad_" + stat)
    if points:
      (u0, first), (u1, last) = points[0], points[-1]
      out[stat] = {"first_update": int(u0), "first": ci(first),
                   "last_update": int(u1), "last": ci(last)}
  return out


def noise_slopes(cells: List[dict]) -> dict:
  """Log-log slopes against T of the GAE gradient's per-episode noise at update 0 (the
  initial policy and critic, the same at every T up to the horizon): the trace of its
  covariance (`variance`) and its variance along the exact gradient (`variance_along`).

  Args:
    cells: one method's cells; those whose first GAE-gradient measurement is at update 0
      count, one point per seed and T.
  Returns:
    `{stat: slope_interval(...)}` for both stats; `{}` with fewer than two such T.
  """
  out = {}
  for stat in ("variance", "variance_along"):
    xs, ys = [], []
    for c in cells:
      points = c.get("gae_grad", {}).get("gae_grad_" + stat)
      if points and int(points[0][0]) == 0:
        vals = np.asarray(points[0][1], np.float64)                        # [S]
        keep = vals > 0
        xs += [float(c["horizon"])] * int(keep.sum())
        ys += vals[keep].tolist()
    if len(set(xs)) >= 2:
      out[stat] = slope_interval(xs, ys)
  return out


def summarize(cells: List[dict], transfer: Optional[dict], lr_info: dict, config) -> dict:
  """The summary dict: per cell statistics, per method largest T solved and slope."""
  rows, methods = {}, {}
  for c in cells:
    upd = np.asarray(c["updates_to_level"], np.float64)
    cen = np.asarray(c["censored"], bool)
    rows.setdefault(c["method"], {})[str(c["horizon"])] = {
        "reached": int((~cen).sum()), "seeds": int(cen.size),
        "updates_to_level": ci(upd), "env_steps_to_level": ci(upd * c["env_steps_per_update"]),
        "censored": bool(cen.any()), "final_success": ci(c["final_success"]),
        "budget_updates": c["budget_updates"], "budget_env_steps": c["budget_env_steps"],
        "updates_run": c["updates_run"], "lr": c["lr"],
        "wall_s": c["compile_s"] + c["run_s"], "gae_grad": gae_grad_summary(c)}
  for m, per_t in rows.items():
    solved = [int(t) for t, r in per_t.items() if r["reached"] == r["seeds"]]
    xs, ys = [], []
    for c in cells:
      if c["method"] == m:
        for u, cen in zip(c["updates_to_level"], c["censored"]):
          if not cen and int(c["horizon"]) in solved:
            xs.append(c["horizon"])
            ys.append(u)
    methods[m] = {"largest_T_solved": max(solved) if solved else None,
                  "slope_updates_vs_T": slope_interval(xs, ys) if xs else None}
    noise = noise_slopes([c for c in cells if c["method"] == m])
    if noise:
      methods[m]["noise_slopes_at_update_0"] = noise
  out = {"level": float(config.level), "smooth": int(config.smooth),
         "num_pivotal": int(config.num_pivotal), "num_actions": int(config.num_actions),
         "episodes_per_update": int(config.episodes), "seeds": int(config.seeds),
         "stop_when_solved": bool(config.stop_when_solved),
         "learning_rates": lr_info, "cells": rows, "methods": methods}
  if transfer is not None:
    out["transfer"] = {
        "method": transfer["method"], "train_horizon": transfer["horizon"],
        "train_env_steps": transfer["train_env_steps"],
        "train_wall_s": transfer["train_wall_s"],
        "train_updates_to_level": ci(transfer["updates_to_level"]),
        "train_reached": int(np.sum(~np.asarray(transfer["censored"], bool))),
        "targets": {t: {"success": ci(r["success"]), "min_seed": float(np.min(r["success"])),
                        "eval_s": r["eval_s"],
                        "direct_update_env_steps": r["direct_update_env_steps"]}
                    for t, r in transfer["targets"].items()}}
  return out


def write_results(cells: List[dict], config, workdir: str) -> None:
  """results.csv (one row per method, T and seed) and results.md (one per method, T)."""
  with open(os.path.join(workdir, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
    w.writeheader()
    for c in cells:
      for s in range(len(c["censored"])):
        w.writerow({"method": c["method"], "horizon": c["horizon"], "seed": s, "lr": c["lr"],
                    "budget_updates": c["budget_updates"],
                    "budget_env_steps": c["budget_env_steps"],
                    "updates_to_level": c["updates_to_level"][s],
                    "env_steps_to_level": c["env_steps_to_level"][s],
                    "censored": int(c["censored"][s]),
                    "final_success": round(float(c["final_success"][s]), 4),
                    "updates_run": c["updates_run"],
                    "compile_s": round(c["compile_s"], 2), "run_s": round(c["run_s"], 2)})
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write("\n".join(cell_table(cells, config)) + "\n")


def _fmt(mean_half, censored=False, scale=1.0, suffix=""):
  mean, half = mean_half
  s = (">= " if censored else "") + f"{mean / scale:.3g}{suffix}"
  return s if not np.isfinite(half) else s + f" ± {half / scale:.2g}{suffix}"


def cell_table(cells: List[dict], config) -> List[str]:
  level = f"{float(config.level):.0%}"
  rows = []
  for c in cells:
    upd = np.asarray(c["updates_to_level"], np.float64)
    cen = np.asarray(c["censored"], bool)
    rows.append([c["method"], c["horizon"], f"{c['lr']:g}",
                 f"{c['budget_env_steps'] / 1e6:.3g}M ({c['budget_updates']} upd.)",
                 f"{int((~cen).sum())}/{cen.size}", _fmt(ci(upd), cen.any()),
                 _fmt(ci(upd * c["env_steps_per_update"]), cen.any(), 1e6, "M"),
                 _fmt(ci(c["final_success"])), c["updates_run"],
                 f"{c['compile_s'] + c['run_s']:.0f}"])
  return report.table(
      ["method", "T", "lr", "budget (env steps/seed)", f"seeds at {level}",
       f"updates to {level}", f"env steps to {level}", "final success", "updates run",
       "wall s"], rows)


def _legend_all(axes) -> None:
  """One legend on the first panel with every method drawn in any panel."""
  handles = {}
  for ax in axes.flat:
    for h, label in zip(*ax.get_legend_handles_labels()):
      handles.setdefault(label, h)
  axes.flat[0].legend(list(handles.values()), list(handles), fontsize=7)


def figures(cells: List[dict], config, workdir: str) -> None:
  """success_vs_steps.png and steps_to_level.png."""
  horizons = sorted({c["horizon"] for c in cells})
  methods = list(dict.fromkeys(c["method"] for c in cells))
  colors = {m: f"C{i % 10}" for i, m in enumerate(methods)}
  ncol = min(len(horizons), 4)
  nrow = -(-len(horizons) // ncol)
  fig, axes = report.figure(nrow, ncol, figsize=(4.0 * ncol, 3.2 * nrow))
  for ax in axes.flat[len(horizons):]:
    ax.set_visible(False)
  for ax, t in zip(axes.flat, horizons):
    for c in cells:
      if c["horizon"] != t:
        continue
      y = np.asarray(c["success"], np.float64)                        # [U, S]
      x = np.arange(1, y.shape[0] + 1) * c["env_steps_per_update"]
      m, h = report.t_interval(y, axis=1)
      ax.plot(x, m, color=colors[c["method"]], label=c["method"], lw=1.2)
      if y.shape[1] > 1:
        ax.fill_between(x, np.clip(m - h, 0, 1), np.clip(m + h, 0, 1),
                        color=colors[c["method"]], alpha=0.15)
    ax.axhline(float(config.level), color="k", lw=0.5, ls=":")
    ax.set_xscale("log")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"KeyChain T={t} (k={config.num_pivotal}, A={config.num_actions})",
                 fontsize=9)
    ax.set_xlabel("env steps per seed")
    ax.set_ylabel("success (sampled policy)")
  _legend_all(axes)
  report.save_figure(fig, workdir, "success_vs_steps.png")

  fig, axes = report.figure(1, 2, figsize=(10, 3.8))
  for j, (key, label) in enumerate((("updates_to_level", "updates"),
                                    ("env_steps_to_level", "env steps"))):
    ax = axes[0, j]
    for m in methods:
      mine = sorted((c for c in cells if c["method"] == m), key=lambda c: c["horizon"])
      ts = np.array([c["horizon"] for c in mine], np.float64)
      vals = [np.asarray(c[key], np.float64) for c in mine]
      means = np.array([v.mean() for v in vals])
      halves = np.array([ci(v)[1] if v.size > 1 else 0.0 for v in vals])
      cen = np.array([any(c["censored"]) for c in mine])
      ax.errorbar(ts, means, yerr=np.nan_to_num(halves), color=colors[m], label=m,
                  marker="o", ms=4, lw=1, capsize=2)
      if cen.any():   # censored cells: open triangles at their (lower-bound) mean
        ax.scatter(ts[cen], means[cen], marker="^", s=60, facecolors="none",
                   edgecolors=colors[m])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("horizon T")
    ax.set_ylabel(f"{label} to {float(config.level):.0%} (per seed)")
    ax.set_title(f"{label} to {float(config.level):.0%}; open triangles: censored at the "
                 "budget", fontsize=9)
  axes[0, 0].legend(fontsize=7)
  report.save_figure(fig, workdir, "steps_to_level.png")


def gae_figure(cells: List[dict], workdir: str) -> Optional[str]:
  """gae_gradient.png: the measured GAE gradient's debiased cosine with KeyChain's exact
  gradient and the exact success probability J against the update, a column per T, a
  line per PPO method (seed mean, 95% band). None (no file) when nothing was measured."""
  measured = [c for c in cells if c.get("gae_grad", {}).get("gae_grad_cosine_debiased")]
  if not measured:
    return None
  horizons = sorted({c["horizon"] for c in measured})
  methods = list(dict.fromkeys(c["method"] for c in measured))
  colors = {m: f"C{i % 10}" for i, m in enumerate(methods)}
  fig, axes = report.figure(2, len(horizons), figsize=(3.6 * len(horizons), 5.6))
  for j, t in enumerate(horizons):
    for c in (c for c in measured if c["horizon"] == t):
      for i, (stat, label) in enumerate((("cosine_debiased", "debiased cos(E g, grad J)"),
                                         ("objective", "exact success probability J"))):
        points = c["gae_grad"].get("gae_grad_" + stat, [])
        if not points:
          continue
        u = np.array([p[0] for p in points], np.float64)
        y = np.array([p[1] for p in points], np.float64)                 # [P, S]
        m, h = report.t_interval(y, axis=1)
        ax = axes[i, j]
        ax.plot(u, m, color=colors[c["method"]], label=c["method"], marker="o", ms=3)
        if y.shape[1] > 1:
          ax.fill_between(u, m - np.nan_to_num(h), m + np.nan_to_num(h),
                          color=colors[c["method"]], alpha=0.15)
        ax.set_ylabel(label, fontsize=8)
        ax.set_xlabel("update")
    axes[0, j].axhline(0.0, color="k", lw=0.5, ls=":")
    axes[0, j].set_ylim(-1.02, 1.02)
    axes[0, j].set_title(f"T={t}: GAE gradient under the trained critic", fontsize=9)
    axes[1, j].set_yscale("log")
  _legend_all(axes)
  return report.save_figure(fig, workdir, "gae_gradient.png")


def noise_table(summary: dict) -> List[str]:
  """Markdown lines: the GAE gradient's per-episode noise along the exact gradient beside
  the trace of its covariance, per measured cell (first and last measurement), and the
  slopes of both against T at update 0 (`[]` when no cell measured them)."""
  rows = []
  for m, per_t in summary["cells"].items():
    for t, r in sorted(per_t.items(), key=lambda kv: int(kv[0])):
      g = r.get("gae_grad") or {}
      if "variance" not in g or "variance_along" not in g:
        continue
      row = [m, t, f"{g['variance']['first_update']} / {g['variance']['last_update']}"]
      for when in ("first", "last"):
        trace, along = g["variance"][when][0], g["variance_along"][when][0]
        row += [_fmt(g["variance"][when]), _fmt(g["variance_along"][when]),
                f"{along / trace:.3g}" if trace > 0 else "-"]
        if "true_norm" in g:
          row.append(f"{g['true_norm'][when][0] ** 2 / along:.3g}" if along > 0 else "-")
        else:
          row.append("-")
      rows.append(row)
  if not rows:
    return []
  lines = ["", "## The gradient's noise along the exact gradient, beside the trace", "",
           "Per-episode GAE gradient g under the critic being trained, at the first and "
           "last measured update: trace of its covariance, Var(g . u) with u = grad J / "
           "||grad J|| (the noise in the one direction that matters), their ratio, and "
           "||grad J||^2 / Var(g . u) (per-episode signal to noise along grad J; seed "
           "means).", ""]
  lines += report.table(["method", "T", "updates", "trace first", "along first",
                         "along/trace first", "SNR along first", "trace last",
                         "along last", "along/trace last", "SNR along last"], rows)
  slopes = []
  for m, r in summary["methods"].items():
    ns = r.get("noise_slopes_at_update_0") or {}
    if ns:
      slopes.append([m] + [
          f"{ns[k]['slope']:.2f}" + (f" ± {ns[k]['half']:.2f}" if np.isfinite(ns[k]["half"])
                                     else "") + f" (T in {ns[k]['horizons']})"
          if k in ns else "-" for k in ("variance", "variance_along")])
  if slopes:
    lines += ["", "Log-log slope against T at update 0 (95%, points per seed and T):", ""]
    lines += report.table(["method", "trace", "along grad J"], slopes)
  return lines


def markdown(summary: dict, config) -> str:
  """summary.md: the per-method answer, the cell table and the remedy."""
  level = f"{summary['level']:.0%}"
  lines = [f"# Horizon study: KeyChain (k={summary['num_pivotal']}, "
           f"A={summary['num_actions']}), T = "
           + ", ".join(str(t) for t in config.horizons), "",
           f"{summary['seeds']} seeds per cell, {summary['episodes_per_update']} episodes "
           f"per update for every method; success is the sampled policy's on each "
           f"update's episodes, tested against {level} as a trailing mean over "
           f"{summary['smooth']} updates. Seeds that never reach it are censored at the "
           "budget ('>=' marks a lower bound). Intervals: 95% t over seeds."
           + (" Cells stop once every seed held the level for "
              f"{int(config.hold)} updates." if summary["stop_when_solved"] else ""), "",
           "## Largest T solved and the slope of updates vs T", ""]
  rows = []
  for m, r in summary["methods"].items():
    sl = r["slope_updates_vs_T"]
    slope = "-" if not sl or not np.isfinite(sl["slope"]) else (
        f"{sl['slope']:.2f}" + (f" ± {sl['half']:.2f}" if np.isfinite(sl["half"]) else "")
        + f" (T in {sl['horizons']})")
    rows.append([m, r["largest_T_solved"] or "none", slope])
  lines += report.table(["method", f"largest T with all seeds at {level}",
                         "log-log slope of updates to level vs T (95%)"], rows)
  for m, r in summary.get("not_run", {}).items():
    lines.append(f"- {m}: T = {', '.join(str(t) for t in r['horizons'])} not run (no "
                 f"seed reached {level} at T = {r['failed_at']}).")
  if summary.get("missing"):
    lines.append("- Not run in this workdir (new_cells=False): " + ", ".join(
        f"{r['method']} T={r['horizon']}" for r in summary["missing"]) + ".")
  lines += ["", "## Learning rates", ""]
  lri = summary["learning_rates"]
  lines.append("Chosen per family: " + ", ".join(f"{k} {v:g}" for k, v in
                                                   lri["chosen"].items()) + ".")
  for fam, s in lri.get("sweep", {}).items():
    lines.append(f"- {fam}: swept with {s['method']} at T={s['horizon']}: mean updates "
                 f"to {level} " + ", ".join(f"lr {a:g}: {b:.1f}" for a, b in
                                            zip(s["lrs"], s["mean_updates_to_level"]))
                 + f" -> {s['chosen']:g}")
  gae_rows = []
  for m, per_t in summary["cells"].items():
    for t, r in per_t.items():
      g = r.get("gae_grad") or {}
      if "bias" in g:
        extra = [_fmt(g[k][w]) if k in g else "-" for k, w in (
            ("cosine_debiased", "first"), ("cosine_debiased", "last"),
            ("noise", "first"), ("objective", "first"), ("objective", "last"))]
        gae_rows.append([m, t, f"{g['bias']['first_update']} / {g['bias']['last_update']}",
                         _fmt(g["bias"]["first"]), _fmt(g["bias"]["last"]),
                         _fmt(g["cosine"]["first"]), _fmt(g["cosine"]["last"])] + extra)
  if gae_rows:
    lines += ["", "## GAE gradient vs KeyChain's exact gradient, under the trained critic",
              "", "Relative bias ||E g - grad J|| / ||grad J||, cosine (raw and debiased), "
              "the batch mean's noise relative to ||grad J|| and the exact success "
              "probability J, at the first and last measured update "
              "(credit_jax/addons/gae_probe.py).", ""]
    lines += report.table(["method", "T", "updates", "bias first", "bias last",
                           "cosine first", "cosine last", "debiased cos first",
                           "debiased cos last", "noise first", "J first", "J last"],
                          gae_rows)
  lines += noise_table(summary)
  lines += ["", "## Cells", "", "![success](success_vs_steps.png)", "",
            "![steps](steps_to_level.png)", ""]
  if summary.get("gae_figure"):
    lines += ["![GAE gradient](gae_gradient.png)", ""]
  lines += ["(full table: results.md; per seed: results.csv)", ""]
  tr = summary.get("transfer")
  if tr:
    lines += ["## Remedy: train short, run long (a two-stage horizon curriculum)", "",
              f"{tr['method']} trained at T={tr['train_horizon']} "
              f"({tr['train_reached']}/{summary['seeds']} seeds at {level}; "
              f"{tr['train_env_steps'] / 1e6:.3g}M env steps per seed, "
              f"{tr['train_wall_s']:.0f} s wall), then run unchanged at:", ""]
    rows = [[t, _fmt(r["success"]), f"{r['min_seed']:.3f}",
             f"{r['direct_update_env_steps'] / 1e6:.3g}M", f"{r['eval_s']:.0f}"]
            for t, r in tr["targets"].items()]
    lines += report.table(["target T", "success", "worst seed",
                           "env steps of ONE direct update at T", "eval wall s"], rows)
    lines.append("")
  lines.append(f"Load average at the end (1, 5, 15 min): "
               + ", ".join(f"{x:.1f}" for x in summary.get("load_average", [])) + ".")
  lines.append("Compile + run seconds of the cells tabulated here, summed (they may "
               f"come from earlier runs of the workdir): {summary.get('cells_wall_seconds', 0):.0f} s.")
  lines.append(report.wall_time(summary.get("wall_seconds", 0.0)))
  return "\n".join(lines)
