"""Running a planned sweep: compiled calls in chunks, checkpoints, resume, progress, shards.

Workdir layout:

    sweep_config.json            the sweep and its base config; a rerun must match it
    calls/<call>/checkpoints/    orbax checkpoints of the call's stacked runs [cells*seeds]
    calls/<call>/timing.json     compile and run seconds so far
    cells/<cell>/metrics.jsonl   per-update records (seed mean + per seed), TensorBoard
    cells/<cell>/rows.json       the cell's results rows, written when its call finished
    results.csv, results.md, <metric>_vs_<axis>.png

A call whose cells all have rows.json is finished and skipped on a rerun; an unfinished
one resumes from its newest checkpoint (the cells' metrics files are cut back to it), and
because the RNG key is in the state the numbers equal an uninterrupted sweep's.
"""
from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple

import jax
import numpy as np

from credit_jax.addons import hooks
from credit_jax.algos.train import ConfigError
from credit_jax.runtime import checkpoint as ckpt_lib
from credit_jax.runtime import metrics as metrics_lib
from credit_jax.runtime import parallel
from credit_jax.runtime.run import _config_diff as config_diff
from credit_jax.runtime.run import _to_host as to_host
from credit_jax.runtime.run import config_to_json, seed_mesh_for
from credit_jax.sweep import grid as grid_lib
from credit_jax.sweep import results as results_lib

_SWEEP_CONFIG = "sweep_config.json"
ROWS_FILE = "rows.json"
_TIMING_FILE = "timing.json"
# Test hook: SIGKILL this process right after this many chunks have been checkpointed.
KILL_AFTER_CHUNKS_ENV = "CREDIT_JAX_SWEEP_KILL_AFTER_CHUNKS"
_checkpoints_saved = [0]   # over every call of this process, for the hook above


def _write_json(path: str, obj) -> None:
  tmp = f"{path}.{os.getpid()}.tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=2)
  os.replace(tmp, path)


def _read_json(path: str):
  with open(path) as f:
    return json.load(f)


def _check_workdir_config(plan, workdir: str, primary: bool) -> None:
  """Saves the sweep (and its base) config on the first run; refuses a different one."""
  current = {"sweep": config_to_json(plan.sweep),
             "base": config_to_json(plan.base)}
  path = os.path.join(workdir, _SWEEP_CONFIG)
  if os.path.exists(path):
    diffs = config_diff(_read_json(path), current)
    if diffs:
      raise ConfigError(f"workdir {workdir} holds a different sweep (" + "; ".join(diffs)
                        + "); use a fresh --workdir")
  elif primary:
    _write_json(path, current)


class Progress:
  """Progress lines: cells done / total, the current call's cells, env steps/s, ETA."""

  def __init__(self, plan, total_steps: int, log: Callable[[str], None]):
    self.cells_total = len(plan.cells)
    self.cells_done = 0
    self.total_steps, self.steps_done = total_steps, 0
    self.session_steps, self.session_s = 0, 0.0
    self.compiles_left, self.compile_s, self.compiles = 0, 0.0, 0
    self.log = log

  def compiled(self, seconds: float) -> None:
    self.compiles_left = max(0, self.compiles_left - 1)
    self.compile_s += seconds
    self.compiles += 1

  def report(self, call, updates: Tuple[int, int], steps: int, seconds: float,
             latest: Dict[str, float]) -> None:
    self.steps_done += steps
    self.session_steps += steps
    self.session_s += seconds
    rate = self.session_steps / max(self.session_s, 1e-9)
    eta = (self.total_steps - self.steps_done) / rate if rate > 0 else float("inf")
    # Compiles still to come, at the mean time of those done so far.
    eta += self.compiles_left * self.compile_s / max(self.compiles, 1)
    shown = " ".join(f"{k} {v:.3f}" for k, v in latest.items())
    # The call's last update finishes its cells (counted in cells_done once written).
    done = self.cells_done + (len(call.cells) if updates[0] >= updates[1] else 0)
    self.log(f"cells {done}/{self.cells_total} done | call {call.name} "
             f"({len(call.cells)} cells) update {updates[0]}/{updates[1]} | "
             f"{steps / max(seconds, 1e-9):,.0f} env steps/s | ETA "
             f"{metrics_lib.format_duration(eta)} (with {self.compiles_left} "
             f"compile(s) to go) | {shown}")


def _batched_fns(train):
  """`init(keys [B, 2], hp {k: [B]})` and `run(n)(states, hp)`: each run its own hparams."""
  init = jax.jit(jax.vmap(train.init, in_axes=(0, 0)))

  @functools.lru_cache(maxsize=None)
  def run(num_updates: int):
    return jax.jit(jax.vmap(functools.partial(train.run, num_updates=num_updates),
                            in_axes=(0, 0)))
  return init, run


def _call_inputs(call, seeds: int):
  """Keys [B, 2] (seed i of a cell is train.py's seed i of that config) and hparams [B],
  each read from its dotted config path (a feature's "gigpo.step_weight" too)."""
  keys = np.concatenate([np.asarray(jax.random.split(
      jax.random.PRNGKey(int(c.config.seed)), seeds)) for c in call.cells])
  hp = {k: np.repeat(np.asarray([float(hooks.config_value(c.config, k))
                                 for c in call.cells], np.float32), seeds)
        for k in call.train.default_hparams}
  return keys, hp


def _run_recipe_call(plan, call, workdir: str, progress: Progress, log, primary: bool,
                    metrics: Sequence[str]) -> None:
  """Runs (or resumes) one compiled call of `cells x seeds` runs and writes its rows."""
  train, seeds, config = call.train, plan.seeds, call.cells[0].config
  total, per_update = train.num_updates, train.env_steps_per_update
  keys, hp = _call_inputs(call, seeds)
  batch = keys.shape[0]
  mesh = seed_mesh_for(batch, log)
  call_dir = os.path.join(workdir, "calls", call.name)
  cfg = {"cells": [config_to_json(c.config) for c in call.cells]}
  ckpt = ckpt_lib.Checkpointer(os.path.join(call_dir, "checkpoints"),
                             max_to_keep=int(config.keep_checkpoints), config=cfg)
  init, run = _batched_fns(train)
  start = ckpt.latest_step() or 0
  if start:
    target = jax.eval_shape(init, keys, hp)
    if mesh is not None:
      sharding = parallel.seed_sharding(mesh)
      target = jax.tree.map(
          lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), target)
    state = ckpt.restore(start, target)
    log(f"call {call.name}: resumed from its checkpoint at update {start}/{total}")
  else:
    state = init(keys, hp)
  if mesh is not None:
    if not start:
      state = parallel.shard_seeds(state, mesh)
    hp = parallel.shard_seeds(hp, mesh)
  progress.steps_done += start * per_update * batch
  timing_path = os.path.join(call_dir, _TIMING_FILE)
  timing = _read_json(timing_path) if start and os.path.exists(timing_path) else {
      "compile_s": 0.0, "run_s": 0.0}
  writers = [metrics_lib.MetricsWriter(os.path.join(workdir, "cells", c.name), resume_step=start)
             if primary else None for c in call.cells]
  compiled, done = {}, start
  kill_after = int(os.environ.get(KILL_AFTER_CHUNKS_ENV, "0") or 0)
  try:
    while done < total:
      u = min(int(config.chunk_updates), total - done)
      if u not in compiled:
        t0 = time.perf_counter()
        compiled[u] = run(u).lower(state, hp).compile()
        timing["compile_s"] += time.perf_counter() - t0
        progress.compiled(time.perf_counter() - t0)
        log(f"call {call.name}: compiled a chunk of {u} updates x {batch} runs in "
            f"{time.perf_counter() - t0:.1f} s")
      t0 = time.perf_counter()
      state, chunk = compiled[u](state, hp)
      chunk = to_host(chunk)
      dt = time.perf_counter() - t0
      timing["run_s"] += dt
      for i, (cell, writer) in enumerate(zip(call.cells, writers)):
        part = {k: np.asarray(v)[i * seeds:(i + 1) * seeds] for k, v in chunk.items()}
        records = metrics_lib.chunk_to_records(part, done + 1, per_update)
        if writer is not None:
          writer.write_records(records)
      done += u
      latest = {k: float(np.mean(np.asarray(chunk[k])[:, -1])) for k in metrics
                if k in chunk}
      progress.report(call, (done, total), u * per_update * batch, dt, latest)
      every = int(config.checkpoint_every)
      if done == total or (every and done % every == 0):
        ckpt.save(done, state)
        if primary:
          _write_json(timing_path, timing)
        _checkpoints_saved[0] += 1
        if kill_after and _checkpoints_saved[0] >= kill_after and done < total:
          os.kill(os.getpid(), signal.SIGKILL)
  finally:
    for w in writers:
      if w is not None:
        w.close()
    ckpt.close()
  if primary:
    sweep = plan.sweep
    thresholds = {k: tuple(v) for k, v in (sweep.get("thresholds") or {}).items()}
    for cell in call.cells:
      cell_dir = os.path.join(workdir, "cells", cell.name)
      records = metrics_lib.read_jsonl(
          os.path.join(cell_dir, metrics_lib.METRICS_FILE))
      rows = results_lib.recipe_rows(
          records, cell, seeds, metrics, thresholds, tuple(sweep.get("minimize", ())),
          int(sweep.get("final_window", 10)), timing)
      _write_json(os.path.join(cell_dir, ROWS_FILE), rows)
  progress.cells_done += len(call.cells)


def _experiment_run(name: str, spec: str, config, workdir: str, log) -> dict:
  """One experiment run: its module's `run(config, workdir)` in-process when it is
  importable as credit_jax.experiments.<name>, else `scripts/<name>.py` (config file
  `spec`) in a subprocess, with the fields that differ from that file passed as flags."""
  module = grid_lib._experiment_module(name)  # pylint: disable=protected-access
  if module is not None:
    return module.run(config, workdir, log=log)
  script = os.path.join(grid_lib.REPO_ROOT, "scripts", f"{name}.py")
  if not os.path.isfile(script):
    raise ConfigError(f"sweep.experiment: no module credit_jax.experiments.{name} and no "
                      f"script {script}")
  file_values = dict(grid_lib._leaves(grid_lib.load_config_file(spec)))  # pylint: disable=protected-access
  flags = [f"--config.{k}={_flag(v)}" for k, v in grid_lib._leaves(config)  # pylint: disable=protected-access
           if file_values.get(k, object()) != v]
  spec_path, _, variant = spec.partition(":")
  if not os.path.isfile(spec_path):
    spec_path = os.path.join(grid_lib.REPO_ROOT, spec_path)
  cmd = [sys.executable, script, f"--config={spec_path}" + (f":{variant}" if variant else ""),
         f"--workdir={workdir}", *flags]
  out = subprocess.run(cmd, capture_output=True, text=True, check=False)
  if out.returncode:
    raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
  return _read_json(os.path.join(workdir, "summary.json"))


def _flag(value) -> str:
  if isinstance(value, (tuple, list)):
    return "(" + ",".join(_flag(v) for v in value) + ("," if len(value) == 1 else "") + ")"
  return str(value)


def _run_experiment_cell(plan, call, workdir: str, progress: Progress, log, primary: bool,
                        metrics: Sequence[str]) -> None:
  """Each seed of the cell is one experiment run with `config.seed = base seed + i`."""
  cell = call.cells[0]
  summaries, seconds = [], []
  for s in range(plan.seeds):
    run_dir = os.path.join(workdir, "cells", cell.name, f"seed{s}")
    done_path = os.path.join(run_dir, "sweep_summary.json")
    if os.path.exists(done_path):
      saved = _read_json(done_path)
    else:
      config = cell.config.copy_and_resolve_references()
      config.seed = int(cell.config.seed) + s
      os.makedirs(run_dir, exist_ok=True)
      t0 = time.perf_counter()
      summary = _experiment_run(plan.experiment, str(plan.sweep.base), config, run_dir,
                                lambda _: None)
      saved = {"summary": summary, "seconds": time.perf_counter() - t0}
      _write_json(done_path, saved)
      progress.runs_left -= 1
      progress.session_s += saved["seconds"]
      progress.session_steps += 1   # experiment runs, not env steps
      eta = progress.runs_left * progress.session_s / progress.session_steps
      log(f"cells {progress.cells_done}/{progress.cells_total} done | cell {cell.name} "
          f"seed {s + 1}/{plan.seeds} in {saved['seconds']:.1f} s | ETA "
          f"{metrics_lib.format_duration(eta)}")
    summaries.append(saved["summary"])
    seconds.append(saved["seconds"])
  rows = results_lib.experiment_rows(summaries, cell, metrics, seconds)
  _write_json(os.path.join(workdir, "cells", cell.name, ROWS_FILE), rows)
  progress.cells_done += 1


def _metrics(plan) -> Tuple[str, List[str]]:
  sweep = plan.sweep
  chosen = list(sweep.get("metrics", ()) or ())
  if not chosen and not plan.experiment:
    chosen = list(plan.calls[0].train.headline) + ["loss"]
  metric = str(sweep.get("metric", "") or (chosen[0] if chosen else ""))
  if metric and metric not in chosen:
    chosen.insert(0, metric)
  return metric, chosen


def _assigned(calls, shard: Tuple[int, int], plan) -> List[Any]:
  """The calls this process runs: every call, or those with index % n == i for a shard
  (and, for experiments under jax.distributed, for this process)."""
  i, n = shard
  if plan.experiment and jax.process_count() > 1:
    i, n = i * jax.process_count() + jax.process_index(), n * jax.process_count()
  return [c for c in calls if c.index % n == i]


def _sync(name: str) -> None:
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)


def run_sweep(sweep, workdir: str, shard: Tuple[int, int] = (0, 1),
              log: Callable[[str], None] = print, features=()) -> Dict[str, Any]:
  """Plans, runs (resuming) and tabulates `sweep` in `workdir`; returns a summary dict.

  Args:
    sweep: the sweep ConfigDict (configs/sweeps/*.py).
    shard: `(i, n)`: run only the calls with index % n == i (independent jobs sharing the
      workdir, e.g. a SLURM array); any job writes the tables of every finished cell.
    features: feature objects every cell's recipe is given (`grid.plan`).

  Raises:
    ConfigError: a bad grid (named field) or a workdir holding a different sweep; raised
      before anything compiles.
  """
  i, n = shard
  if not 0 <= i < n:
    raise ConfigError(f"--shard={i}/{n}: need 0 <= i < n")
  primary = jax.process_index() == 0
  if not primary:
    log = lambda _: None  # pylint: disable=unnecessary-lambda-assignment
  workdir = os.path.abspath(workdir)
  plan = grid_lib.plan(sweep, features=features)
  os.makedirs(workdir, exist_ok=True)
  _check_workdir_config(plan, workdir, primary)
  metric, metrics = _metrics(plan)
  log(f"sweep {sweep.base}: {plan.describe()}")
  mine = _assigned(plan.calls, shard, plan)
  def finished(call):
    return all(os.path.exists(os.path.join(workdir, "cells", c.name, ROWS_FILE))
               for c in call.cells)
  pending = [c for c in mine if not finished(c)]
  _sync("sweep-plan")
  total_steps = sum(c.train.num_updates * c.train.env_steps_per_update * len(c.cells)
                    * plan.seeds for c in pending if c.train is not None)
  progress = Progress(plan, total_steps, log)
  progress.compiles_left = plan.num_compiles(pending) if not plan.experiment else 0
  progress.runs_left = len(pending) * plan.seeds   # (experiments' ETA)
  progress.cells_done = sum(len(c.cells) for c in plan.calls if finished(c))
  skipped = len(mine) - len(pending)
  if skipped:
    log(f"{skipped} finished call(s) skipped; {len(pending)} to run"
        + (f" (shard {i}/{n})" if n > 1 else ""))
  t0 = time.perf_counter()
  for call in pending:
    if plan.experiment:
      _run_experiment_cell(plan, call, workdir, progress, log, primary, metrics)
    else:
      _run_recipe_call(plan, call, workdir, progress, log, primary, metrics)
  _sync("sweep-done")
  rows, missing = [], []
  for cell in plan.cells:
    path = os.path.join(workdir, "cells", cell.name, ROWS_FILE)
    if os.path.exists(path):
      rows += _read_json(path)
    else:
      missing.append(cell.name)
  out = {"cells": len(plan.cells), "calls": len(plan.calls), "ran": len(pending),
         "skipped": skipped, "missing": missing, "seconds": time.perf_counter() - t0}
  if primary and rows:
    out.update(results_lib.write_tables(rows, [f for f, _ in plan.axes], metric, workdir,
                                        title=f"Sweep of {sweep.base}"))
    log(f"results: {out['csv']}, {out['md']}" + (
        f"; {len(missing)} cell(s) not finished yet (other shards)" if missing else ""))
  return out
