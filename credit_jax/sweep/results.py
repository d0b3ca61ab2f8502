"""A sweep's results, with no hand merging: rows per cell and seed, tables, figures.

    results.csv   one row per cell and seed: the axis values, `final_<m>` (the seed's mean
                  over the last `sweep.final_window` updates) and `best_<m>` (its max, or
                  min for metrics in `sweep.minimize`) of every reported metric,
                  `steps_to_<m>_<thr>` (the first env step, per seed, at which the metric
                  reached each threshold of `sweep.thresholds.<m>`; empty if never),
                  env steps per seed, and the compile and run seconds of the call that ran it
    results.md    per cell: the mean over seeds and a 95% interval of each final metric:
                  for a rate (`is_rate`: success, *_success, *_frac, *_rate, accuracy, all
                  values in [0, 1]) the Wilson interval with each seed one trial, which
                  stays inside [0, 1]; for any other metric a t-interval
    <metric>_vs_<axis>.png   the chosen metric's final value against each axis (mean and
                  95% interval over seeds), one line per combination of the other axes
"""
from __future__ import annotations

import csv
import math
import os
from typing import Any, Dict, List, Sequence

import numpy as np

from credit_jax import stats

_RESULTS_CSV = "results.csv"
_RESULTS_MD = "results.md"


def _per_seed(record: dict, metric: str, seeds: int) -> List[float]:
  per = record.get("per_seed", {}).get(metric)
  if per is not None:
    return [float(x) for x in per]
  return [float(record[metric])] * seeds if metric in record else [math.nan] * seeds


def recipe_rows(records: Sequence[dict], cell, seeds: int, metrics: Sequence[str],
                thresholds: Dict[str, Sequence[float]], minimize: Sequence[str],
                final_window: int, timing: Dict[str, float]) -> List[Dict[str, Any]]:
  """Rows of one recipe cell from its per-update records (`metrics.jsonl`)."""
  if not records:
    raise ValueError(f"cell {cell.name} has no metric records")
  steps = np.array([r["env_steps"] for r in records], np.float64)
  rows = []
  series = {m: np.array([_per_seed(r, m, seeds) for r in records], np.float64)  # [U, S]
            for m in metrics}
  for s in range(seeds):
    row = {"cell": cell.name, **{k: _csv_value(v) for k, v in cell.values.items()},
           "seed": s, "env_steps": int(steps[-1])}
    for m in metrics:
      y = series[m][:, s]
      row[f"final_{m}"] = float(np.mean(y[-final_window:]))
      best = np.nanmin(y) if m in minimize else np.nanmax(y)
      row[f"best_{m}"] = float(best)
      for thr in thresholds.get(m, ()):
        hit = (y <= thr) if m in minimize else (y >= thr)
        row[f"steps_to_{m}_{thr:g}"] = int(steps[np.argmax(hit)]) if hit.any() else ""
    row["compile_s"] = round(float(timing.get("compile_s", 0.0)), 3)
    row["run_s"] = round(float(timing.get("run_s", 0.0)), 3)
    rows.append(row)
  return rows


def experiment_rows(summaries: Sequence[dict], cell, metrics: Sequence[str],
                    seconds: Sequence[float]) -> List[Dict[str, Any]]:
  """Rows of one experiment cell: one per seed, from each run's summary dict."""
  rows = []
  for s, (summary, secs) in enumerate(zip(summaries, seconds)):
    flat = _flatten_numbers(summary)
    names = metrics or sorted(flat)
    row = {"cell": cell.name, **{k: _csv_value(v) for k, v in cell.values.items()},
           "seed": s, "env_steps": ""}
    for m in names:
      row[f"final_{m}"] = flat.get(m, math.nan)
    row["compile_s"] = ""
    row["run_s"] = round(float(secs), 3)
    rows.append(row)
  return rows


def _flatten_numbers(tree, prefix: str = "") -> Dict[str, float]:
  """The numeric scalars of a nested dict, keyed by dotted paths."""
  out = {}
  for k, v in tree.items():
    if isinstance(v, dict):
      out.update(_flatten_numbers(v, f"{prefix}{k}."))
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
      out[prefix + k] = float(v)
  return out


def _csv_value(v):
  return "x".join(str(x) for x in v) if isinstance(v, (tuple, list)) else v


def write_csv(rows: Sequence[dict], path: str) -> str:
  columns = []
  for row in rows:
    columns += [k for k in row if k not in columns]
  tmp = f"{path}.{os.getpid()}.tmp"
  with open(tmp, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=columns, restval="")
    writer.writeheader()
    writer.writerows(rows)
  os.replace(tmp, path)
  return path


def t_interval(values: Sequence[float]):
  """`(mean, half-width)` of a 95% Student-t interval over `values` (NaN width for n < 2),
  skipping empty CSV cells."""
  x = np.asarray([v for v in values if v != "" and v is not None], np.float64)
  mean, half = stats.t_interval(x)
  return float(mean), float(half)


def is_rate(metric: str, values: Sequence[float]) -> bool:
  """Whether `metric` is a rate: named success / accuracy, or ending in _success, _frac
  or _rate, with every value in [0, 1]."""
  name = metric.rsplit(".", 1)[-1]
  named = (name in ("success", "accuracy") or name.endswith(("_success", "_frac", "_rate"))
           or name.startswith("success_"))
  x = np.asarray([v for v in values if v != "" and v is not None], np.float64)
  return named and x.size > 0 and bool(np.all((x >= 0.0) & (x <= 1.0)))


def interval(values: Sequence[float], metric: str = ""):
  """`(mean, low, high)` of the 95% interval over seeds of `values` (skipping empty CSV
  cells; NaN bounds for fewer than 2).

  A rate (`is_rate`) gets the Wilson score interval of `sum / n` with each of the n seeds
  one trial: a quantity in [0, 1] with mean p has a variance of at most p (1 - p), that of
  one Bernoulli trial, so this is no narrower than a binomial interval over the seeds
  would need, and it stays inside [0, 1] (a t-interval over 2 seeds at 0.1 and 0.9 spans
  -4.6 to 5.6). Any other metric gets the Student-t interval.
  """
  x = np.asarray([v for v in values if v != "" and v is not None], np.float64)
  if x.size < 2:
    mean = float(x.mean()) if x.size else math.nan
    return mean, math.nan, math.nan
  if is_rate(metric, x):
    low, high = stats.wilson_interval(float(x.sum()), int(x.size))
    return float(x.mean()), low, high
  mean, half = t_interval(x)
  return mean, mean - half, mean + half


def _by_cell(rows: Sequence[dict]) -> Dict[str, List[dict]]:
  cells: Dict[str, List[dict]] = {}
  for row in rows:
    cells.setdefault(row["cell"], []).append(row)
  return cells


def markdown(rows: Sequence[dict], axes: Sequence[str], title: str, metric: str = "") -> str:
  """A table: one line per cell, mean and 95% interval over seeds of each final metric
  (`metric` first)."""
  finals = [f"final_{metric}"] if metric and any(f"final_{metric}" in r for r in rows) else []
  for row in rows:
    finals += [k for k in row if k.startswith("final_") and k not in finals]
  head = ["cell"] + list(axes) + ["seeds"] + [f[len("final_"):] for f in finals]
  lines = [f"# {title}", "",
           "Final metrics per cell: mean over seeds [95% interval: Wilson for rates, "
           "each seed one trial; Student-t otherwise].", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for name, group in _by_cell(rows).items():
    cols = [name.split("-", 1)[0]] + [str(group[0].get(a, "")) for a in axes]
    cols.append(str(len(group)))
    for f in finals:
      mean, low, high = interval([r.get(f, "") for r in group], f[len("final_"):])
      cols.append(f"{mean:.4g}" + ("" if math.isnan(low) else f" [{low:.4g}, {high:.4g}]"))
    lines.append("| " + " | ".join(cols) + " |")
  return "\n".join(lines) + "\n"


def _plot_axes(rows: Sequence[dict], axes: Sequence[str], metric: str,
              workdir: str) -> List[str]:
  """One PNG per axis with 2+ values: final `metric` against it; returns the paths."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  column = f"final_{metric}"
  cells = list(_by_cell(rows).values())
  if not cells or column not in cells[0][0]:
    return []
  paths = []
  for axis in axes:
    values = sorted({c[0][axis] for c in cells}, key=_sort_key)
    if len(values) < 2:
      continue
    numeric = all(isinstance(v, (int, float)) for v in values)
    others = [a for a in axes if a != axis]
    lines: Dict[tuple, list] = {}
    for c in cells:
      lines.setdefault(tuple(c[0][a] for a in others), []).append(c)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for label, group in sorted(lines.items(), key=lambda kv: str(kv[0])):
      group.sort(key=lambda c: _sort_key(c[0][axis]))
      xs = [c[0][axis] if numeric else values.index(c[0][axis]) for c in group]
      intervals = [interval([r[column] for r in c], metric) for c in group]
      ys = [m for m, _, _ in intervals]
      err = np.array([[0.0, 0.0] if math.isnan(lo) else [m - lo, hi - m]
                      for m, lo, hi in intervals]).T
      name = ", ".join(f"{a.split('.')[-1]}={v}" for a, v in zip(others, label))
      ax.errorbar(xs, ys, yerr=err, marker="o", ms=4, capsize=3, label=name or None)
    if numeric and min(values) > 0 and max(values) / min(values) >= 10:
      ax.set_xscale("log")
    elif numeric and len(values) <= 12:
      ax.set_xticks(values)
    if not numeric:
      ax.set_xticks(range(len(values)))
      ax.set_xticklabels([str(v) for v in values])
    ax.set_xlabel(axis)
    ax.set_ylabel(f"final {metric} (mean, 95% CI)")
    ax.grid(alpha=0.3)
    if len(lines) > 1:
      ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path = os.path.join(workdir, f"{metric}_vs_{axis}.png".replace("/", "_"))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)
  return paths


def _sort_key(v):
  return (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))


def write_tables(rows: Sequence[dict], axes: Sequence[str], metric: str, workdir: str,
                 title: str) -> Dict[str, Any]:
  """results.csv, results.md and the figures for `rows`; returns their paths."""
  csv_path = write_csv(rows, os.path.join(workdir, _RESULTS_CSV))
  md_path = os.path.join(workdir, _RESULTS_MD)
  tmp = f"{md_path}.{os.getpid()}.tmp"
  with open(tmp, "w") as f:
    f.write(markdown(rows, axes, title, metric))
  os.replace(tmp, md_path)
  return {"csv": csv_path, "md": md_path, "figures": _plot_axes(rows, axes, metric, workdir)}
