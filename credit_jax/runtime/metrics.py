"""Metrics out of a training run: JSON lines, TensorBoard, terminal progress, PNG curves.

Training runs in compiled chunks; after each chunk the host gets a dict of per-update
metrics `{name: [S, U]}` (S seeds, U updates) and hands it to `MetricsWriter.write_chunk`,
which appends one JSON line per update to `metrics.jsonl` (seed mean, plus per-seed lists
when S > 1) and the seed means to TensorBoard event files (tensorboardX, no TensorFlow).

Resuming is exact: a writer opened with `resume_step=s` drops every JSON line after update
`s` (a killed run may have logged updates its last checkpoint does not hold), so the log
of a resumed run equals the log of an uninterrupted one. When it drops any, it also
rewrites the TensorBoard events from the lines it kept (TensorBoard's own purge marker is
not honoured by every reader, which then showed those updates twice); the rewritten
events carry the time of the rewrite.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import time
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


def _to_float(x) -> float:
  x = float(x)
  return x if math.isfinite(x) else float("nan")


def chunk_to_records(metrics: Mapping[str, np.ndarray], first_update: int,
                     env_steps_per_update: int) -> List[dict]:
  """Turns chunk metrics `{name: [S, U]}` into one record per update.

  Records carry `update` (1-based count of updates done), `env_steps` (per seed), the seed
  mean of each metric and, when S > 1, `per_seed: {name: [S floats]}`.
  """
  arrays = {k: np.asarray(v, dtype=np.float64) for k, v in metrics.items()}
  shapes = {v.shape for v in arrays.values()}
  if len(shapes) != 1 or len(next(iter(shapes))) != 2:
    raise ValueError(f"metrics must all be [S, U] arrays, got shapes "
                     f"{ {k: v.shape for k, v in arrays.items()} }")
  num_seeds, num_updates = next(iter(shapes))
  records = []
  for u in range(num_updates):
    update = first_update + u
    rec = {"update": update, "env_steps": update * env_steps_per_update}
    for k, v in arrays.items():
      rec[k] = _to_float(np.mean(v[:, u]))
    if num_seeds > 1:
      rec["per_seed"] = {k: [_to_float(x) for x in v[:, u]] for k, v in arrays.items()}
    records.append(rec)
  return records


def read_jsonl(path: str) -> List[dict]:
  """All records of a JSON-lines file (a torn last line from a killed run is skipped)."""
  records = []
  if not os.path.exists(path):
    return records
  with open(path) as f:
    for line in f:
      line = line.strip()
      if not line:
        continue
      try:
        records.append(json.loads(line))
      except json.JSONDecodeError:
        break
  return records


class MetricsWriter:
  """Appends per-update records to `workdir/metrics.jsonl` and TensorBoard.

  Args:
    workdir: the run's directory.
    resume_step: updates already done by the checkpoint being resumed (0 for a fresh
      run); records after it are dropped from the JSONL file and purged in TensorBoard.
    tensorboard: write TensorBoard event files under `workdir/tensorboard`.
  """

  def __init__(self, workdir: str, resume_step: int = 0, tensorboard: bool = True):
    os.makedirs(workdir, exist_ok=True)
    self.path = os.path.join(workdir, METRICS_FILE)
    records = read_jsonl(self.path)
    kept = [r for r in records if r.get("update", 0) <= resume_step]
    with open(self.path + ".tmp", "w") as f:
      for r in kept:
        f.write(json.dumps(r) + "\n")
    os.replace(self.path + ".tmp", self.path)
    self._file = open(self.path, "a")
    self._tb = None
    if tensorboard:
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
      tb_dir = os.path.join(workdir, TENSORBOARD_DIR)
      rewrite = len(kept) < len(records)
      if rewrite and os.path.isdir(tb_dir):
        for name in os.listdir(tb_dir):
          if name.startswith("events.out.tfevents."):
            os.remove(os.path.join(tb_dir, name))
      # tensorboardX names its file by the second; a writer opened again within the
      # same second (a quick resume) would truncate the earlier file without a suffix.
      self._tb = SummaryWriter(tb_dir, filename_suffix=f".{os.getpid()}.{time.time_ns()}")
      if rewrite:
        self._write_tensorboard(kept)

  def _write_tensorboard(self, records: Iterable[dict]) -> None:
    for rec in records:
      for k, v in rec.items():
        if k not in ("update", "per_seed") and isinstance(v, float):
          self._tb.add_scalar(k, v, global_step=rec["update"])

  def write_records(self, records: Iterable[dict]) -> None:
    records = list(records)
    for rec in records:
      self._file.write(json.dumps(rec) + "\n")
    if self._tb is not None:
      self._write_tensorboard(records)
    self._file.flush()
    if self._tb is not None:
      self._tb.flush()

  def close(self) -> None:
    self._file.close()
    if self._tb is not None:
      self._tb.close()

  def __enter__(self) -> "MetricsWriter":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def format_duration(seconds: float) -> str:
  if not math.isfinite(seconds):
    return "?"
  return str(datetime.timedelta(seconds=int(round(max(seconds, 0.0)))))


class Progress:
  """One terminal line per chunk, each number labelled with what it is:

    update 20/60 | 161,204 env steps/s (run avg) | ETA 0:00:12 | last update: success 0.938

  env steps/s over every chunk timed so far (compilation excluded), so one short chunk
  does not read as a slowdown; the headline metrics of the chunk's LAST update (the seed
  mean), as metrics.jsonl records them (the final line and the best checkpoint average
  several updates, and say so).

  Args:
    total_updates: updates the run will do in all.
    env_steps_per_update: environment steps per update summed over seeds.
    show: metric names to print, in order, when present in a record.
    log: where lines go (print, absl logging.info, ...).
  """

  def __init__(self, total_updates: int, env_steps_per_update: int,
               show: Sequence[str] = ("return",), log=print):
    self.total = total_updates
    self.steps_per_update = env_steps_per_update
    self.show = tuple(show)
    self.log = log
    self._timed_updates = 0
    self._timed_seconds = 0.0

  def report(self, updates_done: int, chunk_updates: int, chunk_seconds: float,
             latest: Optional[dict] = None) -> str:
    """Logs and returns the line for a chunk of `chunk_updates` that took `chunk_seconds`.

    The ETA extrapolates the run time of the chunks so far (compilation excluded).
    """
    self._timed_updates += chunk_updates
    self._timed_seconds += chunk_seconds
    rate = self._timed_updates / max(self._timed_seconds, 1e-9)
    sps = rate * self.steps_per_update
    eta = (self.total - updates_done) / rate if rate > 0 else float("inf")
    width = len(str(self.total))
    parts = [f"update {updates_done:>{width}}/{self.total}",
             f"{sps:,.0f} env steps/s (run avg)", f"ETA {format_duration(eta)}"]
    shown = [f"{k} {latest[k]:.3f}" for k in self.show
             if latest is not None and k in latest]
    if shown:
      parts.append("last update: " + ", ".join(shown))
    line = " | ".join(parts)
    self.log(line)
    return line


def format_count(x: float, _pos=None) -> str:
  """A tick label for a count: 1e5 as "100k", 2.5e6 as "2.5M", 3e9 as "3G"."""
  for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
    if abs(x) >= scale:
      return f"{x / scale:.3g}{suffix}"
  return f"{x:.3g}"


def plot_learning_curves(records: Sequence[dict], path: str,
                         keys: Sequence[str] = ("return",), title: str = "") -> str:
  """Writes a PNG of each metric in `keys` against env steps; returns `path`.

  The line is the seed mean; with several seeds the band spans the per-seed min to max.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  import matplotlib.ticker  # pylint: disable=g-import-not-at-top

  keys = [k for k in keys if any(k in r for r in records)]
  if not records or not keys:
    raise ValueError(f"nothing to plot: {len(records)} records, keys {list(keys)}")
  fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 3.6), squeeze=False)
  x = np.array([r["env_steps"] for r in records], dtype=np.float64)
  for ax, k in zip(axes[0], keys):
    y = np.array([r.get(k, np.nan) for r in records], dtype=np.float64)
    ax.plot(x, y, lw=1.5, label="seed mean")
    per_seed = [r.get("per_seed", {}).get(k) for r in records]
    if all(p is not None for p in per_seed):
      band = np.array(per_seed, dtype=np.float64)
      ax.fill_between(x, band.min(axis=1), band.max(axis=1), alpha=0.25,
                      label=f"min-max over {band.shape[1]} seeds")
      ax.legend(loc="best", fontsize=8)
    ax.set_xlabel("env steps per seed")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=5))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(format_count))
    ax.set_ylabel(k)
    ax.grid(alpha=0.3)
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


FINAL_WINDOW = 10   # updates the run's final figures average


def summarize(records: Sequence[dict], keys: Sequence[str],
              last: int = FINAL_WINDOW) -> Dict[str, float]:
  """Mean of each metric over the last `last` records (the run's final figures)."""
  tail = list(records)[-last:]
  return {k: float(np.mean([r[k] for r in tail])) for k in keys
          if tail and all(k in r for r in tail)}
