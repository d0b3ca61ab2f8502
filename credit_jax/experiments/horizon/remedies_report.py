"""Statistics, tables and figures of the horizon remedies
(credit_jax/experiments/horizon/remedies.py).

A cell is one (part, T) with its arms; an arm's curve is `{"updates": [P], "success":
[P, S], "env_steps": [P, S] cumulative, "smooth": int}` (P points: updates, or
evaluations for the curriculum part). Every interval is a 95% Student-t interval over
seeds (`report.t_interval`); a seed that never reaches the level is censored at what it
ran (a lower bound, marked ">=").
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from credit_jax.experiments import report

TITLES = {"relabel": "GoalGrid (side T/3, every cell a goal):\nGRPO + hindsight relabeling",
          "search": "KeyChain: search-then-train vs GRPO\n(same K, and K sized to the "
                    "search's env steps)",
          "curriculum": "KeyChain: horizon curriculum\nvs direct GRPO"}

PRM_NOTE = (
    "PRM shaping is not placed on this axis. RunningSum-v0's `horizon` is a time limit, "
    "not the length of the credit chain: the chain is `num_terms` progress steps, and a "
    "longer limit only adds room for padding steps, which the sum-form PRM pays for (the "
    "gaming route the PRM experiment measures), so T there measures reward hacking, not "
    "credit over distance. Growing the chain instead (num_terms) changes the task and "
    "needs a PRM trained on new demonstrations per length; the PRM experiment's part C "
    "already measures the PRM's judgement over T up to 500 (P(all T judgements right) "
    "against a^T). The PRM experiment (credit_jax/experiments/prm/study.py) is its own study.")


def smoothed(success, smooth: int) -> np.ndarray:
  """[P, S] trailing mean over the last `smooth` points (fewer at the start)."""
  y = np.asarray(success, np.float64)
  c = np.cumsum(np.concatenate([np.zeros((1, y.shape[1])), y]), axis=0)
  u = np.arange(1, y.shape[0] + 1)
  lo = np.maximum(u - int(smooth), 0)
  return (c[u] - c[lo]) / (u - lo)[:, None]


def value_at(curve: dict, axis: str, budget: float) -> np.ndarray:
  """[S] smoothed success at each seed's last point with `axis` <= budget (nan: none)."""
  y = smoothed(curve["success"], curve["smooth"])
  x = np.asarray(curve[axis], np.float64)
  if x.ndim == 1:
    x = np.broadcast_to(x[:, None], y.shape)
  ok = x <= budget * (1 + 1e-9)
  idx = ok.shape[0] - 1 - np.argmax(ok[::-1], axis=0)
  vals = y[idx, np.arange(y.shape[1])]
  return np.where(ok.any(axis=0), vals, np.nan)


def _ci(x) -> list:
  x = np.asarray(x, np.float64)
  x = x[np.isfinite(x)]
  m, h = report.t_interval(x) if x.size else (np.nan, np.nan)
  return [float(m), float(h)]


def arm_stats(curve: dict, level: float, budget_steps: float, budget_updates: int) -> dict:
  """Per-arm statistics of one cell."""
  y = np.asarray(curve["success"], np.float64)
  steps = np.asarray(curve["env_steps"], np.float64)
  updates = np.asarray(curve["updates"], np.float64)
  idx, cen = report.updates_to_level(y, level, curve["smooth"])
  seeds = np.arange(y.shape[1])
  to_steps = steps[idx - 1, seeds]
  return {"seeds": int(y.shape[1]), "reached": int((~cen).sum()),
          "censored": bool(cen.any()),
          "env_steps_to_level": _ci(to_steps), "updates_to_level": _ci(updates[idx - 1]),
          "env_steps_to_level_per_seed": to_steps.tolist(), "censored_per_seed": cen.tolist(),
          "success_at_equal_env_steps": _ci(value_at(curve, "env_steps", budget_steps)),
          "success_at_equal_updates": _ci(value_at(curve, "updates", budget_updates)),
          "final_success": _ci(smoothed(y, curve["smooth"])[-1]),
          "env_steps_run": _ci(steps[-1]), "updates_run": int(updates[-1]),
          "env_steps_per_update": float(steps[-1].mean() / updates[-1])}


def summarize(cells: Dict[str, Dict[int, dict]], config) -> dict:
  """`{"parts": {part: {T: {"arms": {arm: stats}, "budget_env_steps", ...}}}}`."""
  out = {"level": float(config.level), "smooth": int(config.smooth),
         "seeds": int(config.seeds), "parts": {}}
  for part, per_t in cells.items():
    rows = {}
    for t, cell in sorted(per_t.items()):
      arms = cell["arms"]
      budget_steps = min(float(np.min(np.asarray(a["env_steps"])[-1])) for a in arms.values())
      budget_updates = min(int(a["updates"][-1]) for a in arms.values())
      stats = {a: arm_stats(c, float(config.level), budget_steps, budget_updates)
               for a, c in arms.items()}
      for a, c in arms.items():
        if "search_env_steps" in c:
          total = np.asarray(c["env_steps"], np.float64)[-1]
          stats[a]["search_share_of_env_steps"] = float(
              np.mean(np.asarray(c["search_env_steps"]) / total))
      base = stats.get("grpo") or next(iter(stats.values()))
      for s in stats.values():
        s["env_steps_to_level_ratio_to_grpo"] = (
            s["env_steps_to_level"][0] / base["env_steps_to_level"][0])
      rows[str(t)] = {"arms": stats, "budget_env_steps": budget_steps,
                      "budget_updates": budget_updates,
                      "wall_s": float(cell["compile_s"] + cell["run_s"]),
                      "load_start": cell.get("load_start"), "load_end": cell.get("load_end"),
                      **{k: cell[k] for k in ("grid_side", "stages") if k in cell}}
    out["parts"][part] = rows
  return out


def figure(part: str, per_t: Dict[int, dict], config, workdir: str) -> str:
  """`<part>.png`: success against env steps (top) and updates (bottom), a column per T."""
  ts = sorted(per_t)
  fig, axes = report.figure(2, len(ts), figsize=(4.2 * len(ts), 6.4))
  names = list(dict.fromkeys(a for t in ts for a in per_t[t]["arms"]))
  colors = {a: f"C{i % 10}" for i, a in enumerate(names)}
  for j, t in enumerate(ts):
    for a, c in per_t[t]["arms"].items():
      y = smoothed(c["success"], c["smooth"])
      m, h = report.t_interval(y, axis=1)
      h = np.nan_to_num(h)
      for row, x in ((0, np.asarray(c["env_steps"], np.float64).mean(axis=1)),
                     (1, np.asarray(c["updates"], np.float64))):
        ax = axes[row, j]
        ax.plot(x, m, color=colors[a], label=a, lw=1.3)
        ax.fill_between(x, np.clip(m - h, 0, 1), np.clip(m + h, 0, 1), color=colors[a],
                        alpha=0.15)
    extra = f", grid {per_t[t]['grid_side']}x{per_t[t]['grid_side']}" \
        if "grid_side" in per_t[t] else ""
    for row, label in ((0, "env steps per seed (log)"), (1, "updates")):
      ax = axes[row, j]
      ax.axhline(float(config.level), color="k", lw=0.5, ls=":")
      ax.set_ylim(-0.02, 1.02)
      ax.set_xlabel(label)
      ax.set_ylabel("success (95% band over seeds)")
      ax.set_title(f"{part} T={t}{extra}", fontsize=9)
    axes[0, j].set_xscale("log")
  axes[0, 0].legend(fontsize=7)
  fig.suptitle(TITLES.get(part, part), fontsize=10)
  return report.save_figure(fig, workdir, f"{part}.png")


def _steps(ci, censored=False):
  """Env steps with a k / M suffix picked from the mean."""
  m = ci[0]
  scale, suffix = (1e6, "M") if np.isfinite(m) and m >= 1e6 else (1e3, "k")
  return _fmt(ci, censored, scale, suffix)


def _fmt(ci, censored=False, scale=1.0, suffix=""):
  m, h = ci
  if not np.isfinite(m):
    return "-"
  s = (">= " if censored else "") + f"{m / scale:.3g}{suffix}"
  return s if not np.isfinite(h) else s + f" ± {h / scale:.2g}{suffix}"


def markdown(summary: dict, config) -> str:
  """summary.md: a table per part, then the PRM note, load and wall time."""
  level = f"{summary['level']:.0%}"
  lines = ["# Remedies on the horizon axis, against GRPO", "",
           f"{summary['seeds']} seeds per arm; 95% t-intervals over seeds; '>=' marks "
           f"a lower bound (seeds censored at what they ran). Success to {level}: first "
           f"point whose trailing mean over {summary['smooth']} updates (relabel, "
           "search: training episodes) or 1 evaluation (curriculum: fresh episodes at "
           "the target) reaches it. Equal env steps: the fewest any arm and seed of that "
           "T ran; equal updates: the fewest any arm ran.", ""]
  for part, per_t in summary["parts"].items():
    lines += [f"## {part}: {TITLES.get(part, part).replace(chr(10), ' ')}", ""]
    rows = []
    for t, cell in per_t.items():
      for a, s in cell["arms"].items():
        note = ""
        if "search_share_of_env_steps" in s:
          note = f"search {s['search_share_of_env_steps']:.0%} of env steps"
        ratio = s["env_steps_to_level_ratio_to_grpo"]
        base = cell["arms"].get("grpo") or next(iter(cell["arms"].values()))
        bound = {(True, False): ">= ", (False, True): "<= "}.get(
            (s["censored"], base["censored"]), "") if s is not base else ""
        both = s["censored"] and base["censored"] and s is not base
        rows.append([t, a, f"{s['reached']}/{s['seeds']}",
                     _steps(s["env_steps_to_level"], s["censored"]),
                     "-" if both else f"{bound}{ratio:.2f}",
                     _fmt(s["updates_to_level"], s["censored"]),
                     f"{_fmt(s['success_at_equal_env_steps'])} @ "
                     f"{_steps([cell['budget_env_steps'], np.nan])}",
                     f"{_fmt(s['success_at_equal_updates'])} @ {cell['budget_updates']}",
                     _fmt(s["final_success"]), _steps(s["env_steps_run"]),
                     s["updates_run"], note])
    lines += report.table(
        ["T", "arm", f"seeds at {level}", f"env steps to {level}", "ratio to grpo",
         f"updates to {level}", "success at equal env steps", "success at equal updates",
         "final success", "env steps run", "updates run", "note"], rows)
    lines.append("")
    for t, cell in per_t.items():
      ls, le = cell.get("load_start") or [], cell.get("load_end") or []
      lines.append(f"- T={t}: wall {cell['wall_s']:.0f} s (compile + run); load average "
                   f"(1, 5, 15 min) at start {', '.join(f'{x:.1f}' for x in ls)}, at end "
                   f"{', '.join(f'{x:.1f}' for x in le)}"
                   + (f"; stages {cell['stages']}" if "stages" in cell else "")
                   + (f"; grid {cell['grid_side']}x{cell['grid_side']}"
                      if "grid_side" in cell else "") + ".")
    lines += ["", f"![{part}]({part}.png)", ""]
  lines += ["## PRM shaping", "", PRM_NOTE, ""]
  lines.append("Load average at the end (1, 5, 15 min): "
               + ", ".join(f"{x:.1f}" for x in summary.get("load_average_end", [])) + ".")
  lines.append(report.wall_time(summary.get("wall_seconds", 0.0)))
  return "\n".join(lines)
