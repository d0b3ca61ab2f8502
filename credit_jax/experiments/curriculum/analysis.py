"""The measurements of the curriculum experiment (credit_jax/experiments/curriculum/study.py),
computed from its learning curves: plain NumPy, no JAX.

A curve is `{"env_steps": [E, S], "success": [E, S]}`: cumulative env steps taken and the
target success at each of E evaluations, for S seeds. Seeds that never reach `level` are
**censored**: `steps_to_level` is inf for them, intervals of "steps to level" are over
the seeds that reached it, and `censored_steps` replaces inf by the seed's total env
steps (a lower bound on its true steps to level).

  * `compare`: per method, steps to level (t-interval, seeds reached), success at the
    largest budget every method reached, final success;
  * `mean_success`: per seed, the mean target success over equally spaced env-step
    budgets between the first budget where every method has an evaluation and the equal
    budget (the area under the learning curve at equal env steps);
  * `advantage`: method A minus method B in that mean success, Welch 95% interval;
  * `target_verdict`: does a curriculum reach `level` in <= `fraction` of the env steps
    of direct training (a bound when direct is censored);
  * `stops_helping`: the first dependency range whose advantage interval is not above 0;
  * `summary_markdown`: the summary.md text of the tables and verdicts.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np

from credit_jax.experiments import report


def ci95(x) -> tuple:
  """(mean, half-width of a 95% t-interval) of the finite entries of `x` (censored runs
  are inf and left out; `reached` in the summary counts them)."""
  x = np.asarray(x, np.float64)
  x = x[np.isfinite(x)]
  mean, half = report.t_interval(x)
  return float(mean), float(half)


def welch(x, y) -> tuple:
  """(mean(x) - mean(y), half-width of its 95% Welch t-interval); x, y: [S] samples."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  diff = float(x.mean() - y.mean())
  if x.size < 2 or y.size < 2:
    return diff, float("nan")
  vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
  se2 = vx + vy
  if se2 == 0.0:
    return diff, 0.0
  df = se2 ** 2 / (vx ** 2 / (x.size - 1) + vy ** 2 / (y.size - 1))
  return diff, float(stats.t.ppf(0.975, df) * np.sqrt(se2))


def steps_to_level(curve, level) -> np.ndarray:
  """[S] env steps of the first evaluation with success >= level (inf: never)."""
  hit = curve["success"] >= level
  first = np.argmax(hit, axis=0)
  steps = curve["env_steps"][first, np.arange(hit.shape[1])]
  return np.where(hit.any(axis=0), steps, np.inf)


def censored_steps(curve, level) -> np.ndarray:
  """[S] steps to level, the seed's total env steps where it never got there."""
  st = steps_to_level(curve, level)
  return np.where(np.isfinite(st), st, curve["env_steps"][-1])


def success_at(curve, budget) -> np.ndarray:
  """[S] target success at the last evaluation within `budget` env steps (nan if none)."""
  ok = curve["env_steps"] <= budget
  idx = np.where(ok.any(axis=0), ok.shape[0] - 1 - np.argmax(ok[::-1], axis=0), -1)
  vals = curve["success"][np.maximum(idx, 0), np.arange(ok.shape[1])]
  return np.where(idx >= 0, vals, np.nan)


def budget_range(curves: Dict[str, dict]) -> tuple:
  """(first, last): the smallest budget at which every seed of every method has an
  evaluation, and the largest one every seed of every method reached."""
  first = max(float(np.max(cv["env_steps"][0])) for cv in curves.values())
  last = min(float(np.min(cv["env_steps"][-1])) for cv in curves.values())
  return first, last


def mean_success(curve, first: float, last: float, points: int = 20) -> np.ndarray:
  """[S] the mean of `success_at` over `points` equally spaced budgets in [first, last]
  (just `success_at(last)` when first >= last)."""
  grid = np.linspace(first, last, points) if first < last else np.array([last])
  vals = np.stack([success_at(curve, b) for b in grid])
  seen = np.isfinite(vals)   # NaN: no evaluation yet within that budget
  return np.where(seen.any(axis=0),
                  np.sum(np.where(seen, vals, 0.0), axis=0) / np.maximum(seen.sum(0), 1),
                  np.nan)


def compare(curves: Dict[str, dict], level: float) -> Dict[str, dict]:
  """Per method: steps to level (CI over the seeds that reach it; `censored_mean` the
  mean with censored seeds at their total steps, a lower bound), success at the largest
  budget every method reached, mean success over the shared budget range, final
  success."""
  first, budget = budget_range(curves)
  rows = {}
  for name, cv in curves.items():
    st = steps_to_level(cv, level)
    rows[name] = {
        "steps_to_level": ci95(st), "reached": int(np.isfinite(st).sum()),
        "seeds": int(st.size), "censored_mean": float(np.mean(censored_steps(cv, level))),
        "budget": budget, "budget_first": first,
        "success_at_budget": ci95(success_at(cv, budget)),
        "mean_success": ci95(mean_success(cv, first, budget)),
        "final_success": ci95(cv["success"][-1]),
        "final_env_steps": float(np.mean(cv["env_steps"][-1])),
        "compiles": cv["compiles"]}
  return rows


def advantage(curves: Dict[str, dict], a: str, b: str) -> tuple:
  """(mean difference, Welch half-width) of `mean_success` of method `a` minus `b` over
  the budget range every method of `curves` shares."""
  first, last = budget_range(curves)
  return welch(mean_success(curves[a], first, last), mean_success(curves[b], first, last))


def target_verdict(curves: Dict[str, dict], level: float, fraction: float = 0.5,
                   baseline: str = "direct") -> Dict[str, dict]:
  """Per method other than `baseline`: `ratio` of its mean env steps to `level` over
  `baseline`'s, censored seeds at their total steps. `bound`: "=" when no seed of
  either is censored, "<=" when only baseline seeds are (the ratio is an upper bound),
  "?" when the method has censored seeds (no bound). `met`: every seed of the method
  reached `level` and `ratio <= fraction`. Also `reached` / `seeds` of the method and
  `baseline_reached`."""
  base = curves[baseline]
  base_steps, base_st = censored_steps(base, level), steps_to_level(base, level)
  out = {}
  for name, cv in curves.items():
    if name == baseline:
      continue
    st = steps_to_level(cv, level)
    reached = int(np.isfinite(st).sum())
    ratio = float(np.mean(censored_steps(cv, level)) / np.mean(base_steps))
    out[name] = {"ratio": ratio, "reached": reached, "seeds": int(st.size),
                 "baseline_reached": int(np.isfinite(base_st).sum()),
                 "bound": ("?" if reached < st.size else
                           "=" if np.all(np.isfinite(base_st)) else "<="),
                 "met": bool(reached == st.size and ratio <= fraction)}
  return out


def stops_helping(advantages: Sequence[tuple], ranges: Sequence) -> object:
  """The first of `ranges` (ascending dependency ranges) whose advantage `(mean, half)`
  interval is not entirely above 0 (a NaN half counts as not above; a NaN mean, no
  shared budget, is skipped); None if the curriculum helps at every range, and
  "unmeasured" if no range had a shared budget."""
  measured = 0
  for (mean, half), r in zip(advantages, ranges):
    if not np.isfinite(mean):
      continue
    measured += 1
    if not (np.isfinite(half) and mean - half > 0.0):
      return r
  return None if measured else "unmeasured"


def _fmt(ci, scale=1.0, digits=3, suffix=""):
  mean, half = ci
  if not np.isfinite(mean):
    return "-"
  if not np.isfinite(half):
    return f"{mean / scale:.{digits}g}{suffix}"
  return f"{mean / scale:.{digits}g}{suffix} ± {half / scale:.2g}{suffix}"


def _verdict_lines(part: str, d: dict, level: float) -> List[str]:
  lines = []
  for setting, rows in d.get("target", {}).items():
    cells = []
    for m, v in rows.items():
      bound = {"=": "", "<=": "<= ", "?": "~"}[v["bound"]]
      cells.append(f"{m} {bound}{v['ratio']:.2g}x ({v['reached']}/{v['seeds']} seeds at "
                   f"{level:.0%}; {'met' if v['met'] else 'not met'})")
    base = next(iter(rows.values()))["baseline_reached"] if rows else 0
    lines += [f"Target at {setting} (a curriculum reaches {level:.0%} in <= 1/2 the env "
              f"steps of direct training; direct reached it in {base} of "
              f"{next(iter(rows.values()))['seeds'] if rows else 0} seeds, censored seeds "
              "count their total env steps, so '<=' marks an upper bound and '~' a method "
              "with censored seeds): " + "; ".join(cells) + ".", ""]
  if d.get("advantage"):
    lines += ["Advantage (mean success over the shared env-step range, A - B, 95% Welch "
              "interval): " + "; ".join(
                  f"{setting}: " + ", ".join(
                      f"{m if ' - ' in m else m + ' - direct'} {_fmt(ci, digits=2)}"
                      for m, ci in rows.items())
                  for setting, rows in d["advantage"].items()) + ".", ""]
  for setting, w in d.get("why", {}).items():
    k = w["segment_length"]
    text = (f"Why, at {setting}: the mean shortest path from start to goal is "
            f"{w['shortest_path']:.1f} moves" + (f" (K = {k})" if k else "") +
            "; mean episode length over the last 5 updates: " + ", ".join(
                f"{m} {_fmt(ci, digits=3)}" for m, ci in w["episode_length"].items()))
    for m, h in w.get("hierarchies", {}).items():
      text += (f"; {m}: the worker reaches {level:.0%} of its subgoals after "
               f"{_fmt(h['worker_steps_to_level'], 1e3, suffix='k')} env steps "
               f"({h['worker_reached']} seeds), the pair {level:.0%} task success after "
               f"{_fmt(h['pair_steps_to_level'], 1e3, suffix='k')} ({h['pair_reached']} "
               "seeds)")
    lines += [text + ".", ""]
  if d.get("steps_ratio"):
    lines += [f"Env steps to {level:.0%}, curriculum / direct (censored seeds at their "
              "total steps: '<=' an upper bound, '~' the curriculum has censored seeds): "
              + "; ".join(f"{setting}: " + ", ".join(
                  f"{m} {({'=': '', '<=': '<= ', '?': '~'})[v['bound']]}{v['ratio']:.2g}x "
                  f"({v['reached']}/{v['seeds']} vs {v['baseline_reached']}/{v['seeds']} "
                  "seeds)" for m, v in rows.items())
                  for setting, rows in d["steps_ratio"].items()) + ".", ""]
  for m, r in d.get("stops_helping", {}).items():
    verdict = {None: "helps at every range measured",
               "unmeasured": "no range with a shared budget"}.get(r, f"at {r}")
    lines += [f"Where {m} stops helping (the first range whose advantage interval is not "
              f"above 0): {verdict}.", ""]
  return lines


def summary_markdown(summary: dict, level: float) -> str:
  lines = ["# Horizon curricula vs direct training (GRPO)", "",
           "Each setting is one compiled program for all its methods and seeds (the episode "
           "length and the method are traced; rollouts padded to the target), so a "
           "schedule of any number of stages costs 1 compile (training chunk and its "
           "evaluation in one program; its first call skips the updates and evaluates the "
           "untrained policy at 0 env steps). "
           "In (a, b) success is the sampled policy's on "
           f"fresh episodes at the target length, evaluated every few updates: a method's "
           "success at a budget is its last evaluation within it (a step function, so a "
           "method is credited late by up to one evaluation interval); "
           "intervals are 95% t-intervals over "
           f"seeds. Seeds that never reach {level:.0%} are censored: 'seeds at "
           f"{level:.0%}' counts the others and 'env steps to {level:.0%}' is over them "
           "only. 'mean success' averages the target success over 20 equal env-step "
           "budgets from the first one where every seed of every method has an "
           "evaluation ('first budget') to the largest one all reached ('equal "
           "budget').", ""]
  for part, title in (("a", "(a) KeyChain, long target"),
                      ("b1", "(b1) KeyChain with a cue_delay dependency"),
                      ("b2", "(b2) KeyToDoor, growing distractor phase"),
                      ("c", "(c) manager/worker vs flat GRPO and PPO, equal env steps "
                            "(training success of the sampled policy)")):
    if part not in summary["parts"]:
      continue
    lines += [f"## {title}", ""]
    rows = []
    for setting, methods in summary["parts"][part].items():
      for m, r in methods.items():
        rows.append([setting, m, f"{r['reached']}/{r['seeds']}",
                     _fmt(r["steps_to_level"], 1e3, suffix="k"),
                     f"{r['budget_first'] / 1e3:.3g}k", f"{r['budget'] / 1e3:.3g}k",
                     _fmt(r["mean_success"]), _fmt(r["success_at_budget"]),
                     _fmt(r["final_success"]), f"{r['final_env_steps'] / 1e3:.3g}k"])
    lines += report.table(
        ["setting", "method", f"seeds at {level:.0%}", f"env steps to {level:.0%}",
         "first budget", "equal budget", "mean success", "success at equal budget",
         "final success", "final env steps"], rows)
    lines.append("")
    lines += _verdict_lines(part, summary.get("derived", {}).get(part, {}), level)
    if part == "b2" and "solved" in summary:
      lines += ["Largest distractor length solved (mean final success >= "
                f"{level:.0%}): " + ", ".join(f"{m}: {v}" for m, v in
                                              summary["solved"].items()), ""]
    lines.append(f"![{part}](curves_{part}.png)")
    lines.append("")
  lines.append("Seconds per part: " + ", ".join(
      f"({p}) {t:.0f}" for p, t in summary.get("part_seconds", {}).items()) + ".")
  lines.append("")
  lines.append(report.wall_time(summary["wall_seconds"]))
  return "\n".join(lines)
