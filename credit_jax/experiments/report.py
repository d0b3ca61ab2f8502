"""What every experiment writes, in one place: summary.json, summary.md, figures, timing.

  fig, axes = report.figure(1, 2, figsize=(12, 4.5))   # axes: [rows, cols]
  ...
  report.save_figure(fig, workdir, "search_vs_baselines.png")
  report.write_summary(workdir, summary, markdown_text)

Figures are drawn on a `matplotlib.figure.Figure` with its own Agg canvas, so drawing one
changes no process-wide matplotlib state (no backend switch, no pyplot figure registry).
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple

import jax
import numpy as np

from credit_jax.runtime import metrics
from credit_jax.stats import t_interval, wilson_interval  # noqa: F401 (re-exported)

SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"


def figure(nrows: int = 1, ncols: int = 1, figsize: Tuple[float, float] = (6.0, 4.0),
           **subplots_kw):
  """A new off-screen figure and its axes as a [nrows, ncols] array."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=figsize)
  axes = fig.subplots(nrows, ncols, squeeze=False, **subplots_kw)
  return fig, axes


def save_figure(fig, workdir: str, name: str, dpi: int = 110) -> str:
  """Lays out `fig` and writes it as the PNG `workdir/name`; returns the path."""
  path = os.path.join(workdir, name)
  fig.tight_layout()
  fig.savefig(path, dpi=dpi)
  return path


def _jsonable(x: Any):
  """numpy scalars and arrays as plain JSON values (json.dump's `default`)."""
  if isinstance(x, np.generic):
    return x.item()
  if isinstance(x, np.ndarray):
    return x.tolist()
  raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def write_summary(workdir: str, summary: Dict[str, Any], markdown: str) -> Dict[str, Any]:
  """Writes `summary` as summary.json and `markdown` as summary.md; returns `summary`."""
  if not isinstance(summary, dict):
    raise ValueError(f"summary must be a dict, got {type(summary).__name__}")
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, SUMMARY_JSON), "w") as f:
    json.dump(summary, f, indent=1, default=_jsonable)
  with open(os.path.join(workdir, SUMMARY_MD), "w") as f:
    f.write(markdown if markdown.endswith("\n") else markdown + "\n")
  return summary


def read_summary(workdir: str) -> Dict[str, Any]:
  """The summary.json an experiment wrote into `workdir`."""
  with open(os.path.join(workdir, SUMMARY_JSON)) as f:
    return json.load(f)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> List[str]:
  """Markdown lines of a table; cells are formatted by the caller (str() otherwise)."""
  for i, row in enumerate(rows):
    if len(row) != len(header):
      raise ValueError(f"row {i} has {len(row)} cells, the header {len(header)}")
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def wall_time(seconds: float) -> str:
  """'Wall time H:MM:SS.' for the last line of a summary.md."""
  return f"Wall time {metrics.format_duration(seconds)}."


class Stopwatch:
  """Seconds since it was made (or last `lap`ped): `s = Stopwatch(); ...; s.seconds()`."""

  def __init__(self):
    self._start = self._lap = time.perf_counter()

  def seconds(self) -> float:
    """Seconds since the stopwatch was made."""
    return time.perf_counter() - self._start

  def lap(self) -> float:
    """Seconds since the previous lap (or the start); starts the next lap."""
    now = time.perf_counter()
    out, self._lap = now - self._lap, now
    return out


def throttled(log: Callable[[str], None], every_s: float) -> Callable[[str], None]:
  """`log` at most once per `every_s` seconds (0: every call); the first call always logs.

  For progress lines inside a long cell: an experiment's `log` is also the watchdog's
  heartbeat (credit_jax/experiments/cli.py), so a cell that runs longer than the
  watchdog's limit must log while it runs, and a line per compiled chunk would flood
  the terminal."""
  last = [None]

  def out(line: str) -> None:
    now = time.perf_counter()
    if last[0] is None or now - last[0] >= every_s:
      last[0] = now
      log(line)
  return out


def compile_and_run(fn: Callable, *args) -> Tuple[Any, float, float]:
  """(outputs on the host, compile seconds, run seconds) of `jax.jit(fn)(*args)`.

  Compiles ahead of time so the two costs are measured apart (a CPU run of a whole
  training loop can spend as long compiling as running).
  """
  watch = Stopwatch()
  compiled = jax.jit(fn).lower(*args).compile()
  compile_s = watch.lap()
  out = jax.device_get(compiled(*args))
  return out, compile_s, watch.lap()


def updates_to_level(success, level: float, smooth: int):
  """Updates each seed needed to reach `level`, censored at the number of updates run.

  Args:
    success: [U, S] per-update success of S seeds.
    level: the level; smooth: updates averaged (a trailing mean over the last `smooth`
      updates; the first `smooth - 1` updates average what there is).
  Returns:
    `(updates [S] int, censored [S] bool)`: the 1-based count of updates after which the
    trailing mean first reached `level`; U and True for a seed that never did.
  """
  y = np.asarray(success, np.float64)
  if y.ndim != 2 or y.shape[0] < 1:
    raise ValueError(f"success must be [U, S] with U >= 1, got shape {y.shape}")
  if int(smooth) < 1:
    raise ValueError(f"smooth must be >= 1, got {smooth}")
  c = np.cumsum(np.concatenate([np.zeros((1, y.shape[1])), y]), axis=0)   # [U + 1, S]
  u = np.arange(1, y.shape[0] + 1)
  lo = np.maximum(u - int(smooth), 0)
  mean = (c[u] - c[lo]) / (u - lo)[:, None]                                # [U, S]
  hit = mean >= float(level) - 1e-9   # a trailing mean of exact hits may round below
  first = np.argmax(hit, axis=0) + 1
  reached = hit.any(axis=0)
  return np.where(reached, first, y.shape[0]).astype(int), ~reached
