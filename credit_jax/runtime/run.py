"""Running a recipe for real: seeds vmapped, compiled chunks, metrics, checkpoints, plots.

`train_and_evaluate(config, workdir)` is everything `scripts/train.py` does:

1. validate the config and build the recipe's `Train` (errors name the field);
2. lock the workdir (credit_jax/runtime/workdir.py): a second run on it is refused before it
   compiles, naming the holder; a lock left by a killed run is taken over;
3. resume from the newest checkpoint in `workdir/checkpoints` that restores (one that
   does not is reported and moved to `checkpoints_corrupt/`; the config must match the
   one saved beside them, except that a longer `num_updates` / `total_timesteps` extends
   the run where the compiled update is unchanged: credit_jax/runtime/extend.py), else
   initialise `config.seeds` seeds;
4. run `config.chunk_updates` updates per compiled call (all seeds vmapped in it), and
   after each chunk: stop on a non-finite loss before anything is written, warn once when
   the entropy or gradient norm has collapsed to 0 or the loss exploded
   (credit_jax/runtime/divergence.py), append the chunk's metrics to `metrics.jsonl` /
   TensorBoard, print a progress line, and save a checkpoint every
   `config.checkpoint_every` updates and at the end; at each save the checkpoint is also
   kept in `checkpoints_best/` when its `config.best_metric` (default the first headline
   metric; averaged over the records since the previous save, at most 10) is the best yet;
5. plot the learning curve to `learning_curve.png` and write `summary.json`.

A run never hangs silently or dies without a checkpoint it could have saved:
* a watchdog (credit_jax/runtime/watchdog.py) ends a run whose chunk takes far longer than
  expected, with every thread's Python stack, the last checkpoint and the XLA setting to
  try (`credit_jax.runtime.launch.hang_advice`);
* SIGINT/SIGTERM (credit_jax/runtime/interrupts.py) finish the chunk in flight, or abandon it at
  a second signal, save a checkpoint of the last completed update and raise
  `Interrupted`, whose message says how to resume.

Compilation is done ahead of time and timed separately, so env steps/s excludes it.
Entry points set process-wide XLA options through `credit_jax.runtime.launch.configure_process`
(scripts/train.py does): without them jaxlib 0.10's XLA CPU runtime was seen to hang for
good on vmapped multi-seed runs.
With more than one local device (GPUs, TPU cores, or CPU devices from
`JAX_NUM_CPU_DEVICES=N`), the seeds are split over them (`seed_mesh_for`): initialised
on one device, then sharded, or restored from a checkpoint straight into their shards;
each compiled chunk then runs every device's seeds on that device. Several processes
(`jax.distributed`, started by `scripts/train.py --distributed` or its
`--coordinator_address` flags) split the seeds over all their devices the same way and
checkpoint together; process 0 alone holds the workdir lock and writes metrics, plots
and the summary.
Chunk boundaries are the only place the host sees the state, and the RNG key is in the
state, so a run resumed from any checkpoint reproduces the uninterrupted run exactly.
"""
from __future__ import annotations

import collections
import functools
import json
import os
import signal
import time
from typing import Any, Callable, Dict, Optional

import jax
from jax.experimental import multihost_utils
import numpy as np

from credit_jax import algos, envs
from credit_jax.runtime import checkpoint as ckpt_lib
from credit_jax.runtime import divergence
from credit_jax.runtime import extend
from credit_jax.runtime import interrupts
from credit_jax.runtime import launch
from credit_jax.runtime import metrics as metrics_lib
from credit_jax.runtime import parallel
from credit_jax.runtime import watchdog as watchdog_lib
from credit_jax.runtime import workdir as workdir_lib

CHECKPOINT_DIR = "checkpoints"
BEST_DIR = "checkpoints_best"
CURVE_FILE = "learning_curve.png"
SUMMARY_FILE = "summary.json"
# Fields that steer how a run is executed and logged, not what it computes: a resumed run
# may change them.
_RUN_CONTROL_FIELDS = ("chunk_updates", "checkpoint_every", "keep_checkpoints",
                       "best_metric")
LENGTH_FIELDS = extend.LENGTH_FIELDS   # a resumed run may change them: see extend.py
# Records the best checkpoint's score is averaged over (the newest, since the last save).
_BEST_WINDOW = 10


class NonFiniteLossError(FloatingPointError):
  """The loss became NaN/inf; the run stopped before saving or logging that chunk."""


class Interrupted(Exception):
  """SIGINT/SIGTERM stopped the run; the message says what was saved and how to resume.

  Attributes:
    signum: the signal's number (scripts exit with 128 + signum).
    step: the update the last checkpoint holds (None if there is none).
    abandoned: a chunk was abandoned and still runs in a helper thread; a script should
      then leave with `os._exit` (Python's shutdown would abort on that thread).
  """

  def __init__(self, message: str, signum: int, step: Optional[int],
               abandoned: bool = False):
    super().__init__(message)
    self.signum, self.step, self.abandoned = signum, step, abandoned


def config_to_json(config) -> Dict[str, Any]:
  """The config as plain JSON types (tuples become lists), for saving and comparing."""
  return json.loads(json.dumps(config.to_dict(), sort_keys=True, default=str))


def _config_diff(saved: Dict[str, Any], current: Dict[str, Any], prefix: str = "",
                 skip=_RUN_CONTROL_FIELDS + LENGTH_FIELDS):
  diffs = []
  for k in sorted(set(saved) | set(current)):
    if not prefix and k in skip:
      continue
    a, b = saved.get(k, "<missing>"), current.get(k, "<missing>")
    if isinstance(a, dict) and isinstance(b, dict):
      diffs += _config_diff(a, b, prefix + k + ".")
    elif a != b:
      diffs.append(f"{prefix}{k}: saved {a!r}, now {b!r}")
  return diffs


# (train, init, run, compiled chunks) of the configs run last in this process, so that a
# rerun of one (a resumed run, a test, a sweep cell run again) compiles nothing.
_SHARED = collections.OrderedDict()
_SHARED_SIZE = 4


def _shared_fns(config, mesh, checked=None):
  """`(train, init, run, compiled)` for `config` on `mesh`, kept for the next run of the
  same config (fields that only steer execution and logging may differ). `checked`: what
  `algos.validate_config(config)` returned (the `Train` is built on it, not validated
  again)."""
  cfg = config_to_json(config)
  key = json.dumps([{k: v for k, v in cfg.items() if k not in _RUN_CONTROL_FIELDS},
                    None if mesh is None else [d.id for d in mesh.devices.flat],
                    jax.process_count()], sort_keys=True)
  if key in _SHARED:
    _SHARED.move_to_end(key)
    return _SHARED[key]
  train = algos.make_train(config if checked is None else checked)
  _SHARED[key] = (train,) + make_run_fns(train) + ({},)
  while len(_SHARED) > _SHARED_SIZE:
    _SHARED.popitem(last=False)
  return _SHARED[key]


def make_run_fns(train: algos.Train):
  """`(init, run)` over a leading seed axis: `init(keys [S, 2], hp)`,
  `run(num_updates)(states, hp)`; `run` is cached per chunk length."""
  init = jax.jit(jax.vmap(train.init, in_axes=(0, None)))

  @functools.lru_cache(maxsize=None)
  def run(num_updates: int):
    fn = functools.partial(train.run, num_updates=num_updates)
    return jax.jit(jax.vmap(fn, in_axes=(0, None)))
  return init, run


class _NoMetricsWriter:
  """What processes other than 0 write metrics with: nothing."""
  path = None

  def write_records(self, records) -> None:
    del records

  def close(self) -> None:
    pass


def _to_host(tree):
  """Every leaf as a host array; with several processes, gathered from all of them."""
  if jax.process_count() > 1:
    return multihost_utils.process_allgather(tree, tiled=True)
  return jax.device_get(tree)


def seed_mesh_for(seeds: int, log: Callable[[str], None] = print):
  """The mesh `seeds` seeds are split over: the most of this process's devices that
  divides `seeds`, or None when that is one device (then nothing is sharded).

  With several processes (`jax.distributed`) every device of every process, and
  `seeds` must be a multiple of their number (`algos.ConfigError` otherwise).
  """
  if jax.process_count() > 1:
    devices = jax.devices()
    if seeds % len(devices):
      raise algos.ConfigError(
          f"config.seeds: {seeds} seed(s) do not split evenly over the {len(devices)} "
          f"devices of {jax.process_count()} processes; use a multiple of {len(devices)}")
    log(f"seeds split over {len(devices)} devices in {jax.process_count()} processes, "
        f"{seeds // len(devices)} per device")
    return parallel.seed_mesh(devices)
  devices = jax.local_devices()
  count = max(d for d in range(1, len(devices) + 1) if seeds % d == 0)
  if count < len(devices):
    log(f"{seeds} seed(s) do not split evenly over {len(devices)} devices; using "
        f"{count} of them (make config.seeds a multiple of {len(devices)} to use all)")
  if count == 1:
    return None
  log(f"seeds split over {count} devices, {seeds // count} per device")
  return parallel.seed_mesh(devices[:count])


def _any_process(flag: bool) -> bool:
  """True when `flag` holds on some process (every process must take the same branch)."""
  if jax.process_count() == 1:
    return flag
  return bool(np.any(multihost_utils.process_allgather(np.asarray(flag))))


def _lock_workdir(workdir: str, primary: bool, log) -> Optional[workdir_lib.WorkdirLock]:
  """Process 0 takes the workdir's lock for every process of the run; all of them raise
  WorkdirBusyError when it cannot."""
  lock, error = None, None
  if primary:
    try:
      lock = workdir_lib.WorkdirLock(workdir, log=log).acquire()
    except workdir_lib.WorkdirBusyError as e:
      error = e
  if jax.process_count() > 1:
    ok = bool(multihost_utils.broadcast_one_to_all(np.asarray(error is None)))
    if not ok and error is None:
      error = workdir_lib.WorkdirBusyError(
          f"process 0 could not lock workdir {workdir}; see its message")
  if error is not None:
    raise error
  return lock


def _open_checkpoints(config, workdir: str):
  """`(checkpointer, saved config or None)` of the run; ConfigError if the workdir holds
  another config's checkpoints (beyond `LENGTH_FIELDS`), CheckpointError if their config
  file is damaged."""
  cfg_json = config_to_json(config)
  ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, CHECKPOINT_DIR),
                               max_to_keep=int(config.keep_checkpoints), config=cfg_json)
  try:
    saved = ckpt.saved_config()
  except ckpt_lib.CheckpointError:
    ckpt.close()
    raise
  diffs = _config_diff(saved, cfg_json) if saved is not None else []
  if diffs:
    ckpt.close()
    raise algos.ConfigError(
        f"workdir {workdir} holds checkpoints of a different config ("
        + "; ".join(diffs) + "); use a fresh --workdir")
  return ckpt, saved


def _initial_state(train, config, ckpt, mesh, init, hp, log):
  """`(start, state)`: the newest checkpoint that restores, or freshly initialised seeds."""
  keys = jax.random.split(jax.random.PRNGKey(int(config.seed)), int(config.seeds))
  target = jax.eval_shape(init, keys, hp)
  if mesh is not None:   # restored straight into its shards
    sharding = parallel.seed_sharding(mesh)
    target = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), target)
  if ckpt.all_steps() and max(ckpt.all_steps()) > train.num_updates:
    raise algos.ConfigError(
        f"workdir {os.path.dirname(ckpt.directory)} has a checkpoint at update "
        f"{max(ckpt.all_steps())}, past this config's {train.num_updates} updates; use a "
        f"fresh --workdir")
  start, state = ckpt.restore_newest(target, log=log)
  if start:
    log(f"resumed from checkpoint at update {start}/{train.num_updates} in "
        f"{ckpt.directory}")
    return start, state
  state = init(keys, hp)
  if mesh is not None:   # initialised on one device first: see credit_jax/runtime/parallel.py
    state = parallel.shard_seeds(state, mesh)
  return 0, state


class _Loop:
  """The chunk loop of one run: compiles, runs, checks, logs and saves chunk by chunk."""

  def __init__(self, config, train, run, compiled, ckpt, log, on_chunk, best=None):
    self.config, self.train, self.run, self.ckpt = config, train, run, ckpt
    self.log, self.on_chunk, self.best = log, on_chunk, best
    self.guard = divergence.DivergenceGuard(lr=float(config.get("lr", float("nan"))))
    self.writer = _NoMetricsWriter()   # process 0 replaces it once the start is known
    self.total = train.num_updates
    self.hp = train.default_hparams
    self.compiled = compiled   # {chunk length: compiled chunk}, shared (_shared_fns)
    self.compile_s = self.run_s = 0.0
    self.records = []
    self.last_saved: Optional[int] = ckpt.latest_step()
    self.progress = metrics_lib.Progress(
        self.total, train.env_steps_per_update * int(config.seeds), show=train.headline,
        log=log)

  def describe(self) -> str:
    """Where the run can be resumed from (read by the watchdog's thread: no JAX)."""
    if self.last_saved is None:
      return "No checkpoint was saved yet; rerunning the same command starts over."
    return (f"Last checkpoint: update {self.last_saved} in {self.ckpt.directory}; rerun "
            f"the same command to resume from it.")

  def save(self, done: int, state) -> None:
    if self.last_saved != done:
      since = self.last_saved or 0
      self.ckpt.save(done, state)
      self.last_saved = done
      self._offer_best(done, state, since)

  def _offer_best(self, done: int, state, since: int) -> None:
    """Keeps `state` as the best checkpoint when its score (the metric's mean over the
    newest records since the previous save, at most `_BEST_WINDOW`) is the best yet."""
    if self.best is None:
      return
    name = self.best.metric
    values = [r[name] for r in self.records[-_BEST_WINDOW:]
              if since < r["update"] <= done and name in r]
    if values and self.best.offer(done, float(np.mean(values)), state):
      first = min(r["update"] for r in self.records[-_BEST_WINDOW:]
                  if since < r["update"] <= done and name in r)
      span = f"update {done}" if first == done else f"updates {first}-{done}"
      self.log(f"best {name} so far: {np.mean(values):.3f} (mean of {span}); kept the "
               f"checkpoint of update {done} in {self.best.checkpointer.directory}")

  def _chunk(self, state, u: int):
    """Compiles (once per length) and runs a chunk of `u` updates; waits for it.

    A last chunk shorter than `config.chunk_updates` gets a program of its own, and the
    line says why. Masking the extra updates of a full chunk would save that compile but
    compute up to `chunk_updates - 1` updates for nothing, change the compiled program
    whose fixed-seed results are recorded (a select around every update), and break
    `MeasuredTrain`, which measures at chunk-aligned updates.
    """
    if u not in self.compiled:
      t0 = time.perf_counter()
      self.compiled[u] = self.run(u).lower(state, self.hp).compile()
      self.compile_s += time.perf_counter() - t0
      full = int(self.config.chunk_updates)
      why = (f" for the last {u} of {self.total} updates ({self.total} is not a multiple "
             f"of chunk_updates={full}; one that divides it saves this compile)"
             if u < full and self.compiled.keys() - {u} else "")
      self.log(f"compiled a chunk of {u} update{'s' * (u != 1)} in "
               f"{time.perf_counter() - t0:.1f} s{why}")
    t0 = time.perf_counter()
    out = jax.block_until_ready(self.compiled[u](state, self.hp))
    return out, time.perf_counter() - t0

  def _check_finite(self, chunk_metrics, done: int) -> None:
    loss = np.asarray(chunk_metrics["loss"])
    if not np.all(np.isfinite(loss)):
      seed, upd = np.argwhere(~np.isfinite(loss))[0]
      last = (f"the last good checkpoint is update {self.last_saved} in "
              f"{self.ckpt.directory}" if self.last_saved is not None else
              "no checkpoint was saved before it")
      raise NonFiniteLossError(
          f"non-finite loss ({loss[seed, upd]}) at update {done + upd + 1} (seed "
          f"{seed}); stopped without saving it; {last}. Lower config.lr or check "
          f"the rewards/observations for inf/NaN.")

  def _interrupted(self, stop, done: int, abandoned: bool) -> Interrupted:
    how = " (the chunk in flight was abandoned)" if abandoned else ""
    if self.last_saved is None:
      saved = "no update had completed, so there is nothing to resume"
    else:
      saved = (f"the checkpoint of update {self.last_saved} is in {self.ckpt.directory}; "
               f"run the same command again to resume from it")
    who = stop.name or "a signal to another process of the run"
    return Interrupted(f"{who} stopped the run at update {done}/{self.total}{how}: {saved}",
                       stop.signum or signal.SIGTERM, self.last_saved, abandoned)

  def run_all(self, state, start: int, dog: watchdog_lib.Watchdog, stop) -> int:
    """Runs every remaining chunk from update `start`; returns the updates done."""
    done, every = start, int(self.config.checkpoint_every)
    self.last_saved = start or None
    steps_per_update = self.train.env_steps_per_update
    while done < self.total:
      t_iter = time.perf_counter()
      u = min(int(self.config.chunk_updates), self.total - done)
      if self.on_chunk is not None:
        self.on_chunk(done)
      try:
        (new_state, chunk_metrics), dt = stop.wait(functools.partial(self._chunk, state, u))
      except interrupts.Abandoned:
        if jax.process_count() == 1 and done:   # other processes may not stop: no save
          self.save(done, state)
        raise self._interrupted(stop, done, abandoned=True) from None
      chunk_metrics = _to_host(chunk_metrics)
      self.run_s += dt
      self._check_finite(chunk_metrics, done)
      for line in self.guard.observe(chunk_metrics, done + 1):
        self.log(line)
      records = metrics_lib.chunk_to_records(chunk_metrics, done + 1, steps_per_update)
      self.writer.write_records(records)
      self.records += records
      state, done = new_state, done + u
      self.progress.report(done, u, dt, records[-1])
      if done == self.total or (every and done % every == 0):
        self.save(done, state)
      if done < self.total and _any_process(stop.requested):
        stop.announce()
        self.save(done, state)
        raise self._interrupted(stop, done, abandoned=False)
      dog.chunk_done(time.perf_counter() - t_iter)
    return done


def train_and_evaluate(config, workdir: str, log: Callable[[str], None] = print, *,
                       watchdog: watchdog_lib.WatchdogOptions = watchdog_lib.WatchdogOptions(),
                       on_chunk: Optional[Callable[[int], None]] = None) -> Dict[str, Any]:
  """Trains `config` in `workdir` (resuming if it holds checkpoints); returns the summary.

  Args:
    config: a recipe config (see credit_jax/algos).
    workdir: the run's directory.
    log: where progress lines go.
    watchdog: its time limits (`WatchdogOptions(first_s=0)` turns it off); when it fires
      it ends the process (exit code `watchdog.EXIT_CODE`).
    on_chunk: called with the updates done before each chunk is dispatched, inside the
      watched time (for tests and tools: inject a stall or a signal).
  Raises:
    algos.ConfigError: a config field is invalid, or the workdir holds another config
      (or a longer one that compiles differently).
    workdir.WorkdirError: the workdir is a file or not writable.
    workdir.WorkdirBusyError: another live run holds the workdir.
    checkpoint.CheckpointError: checkpoints exist but none restores.
    checkpoint.CheckpointSaveError: a checkpoint could not be written (disk full).
    NonFiniteLossError: the loss became non-finite; the last good checkpoint is kept.
    Interrupted: SIGINT/SIGTERM; a checkpoint of the last completed update was saved.
  """
  try:   # a "pkg.module:Class" env_name is imported and registered here
    envs.resolve(config.env_name)
  except ValueError as e:
    raise algos.ConfigError(f"config.env_name: {e}") from None
  checked = algos.validate_config(config)   # the one validation; the env is made once
  # With several processes (jax.distributed) all of them compute and save checkpoints;
  # process 0 alone logs and writes metrics, plots and the summary.
  primary = jax.process_index() == 0
  if not primary:
    log = lambda _: None  # pylint: disable=unnecessary-lambda-assignment
  seeds = int(config.seeds)
  mesh = seed_mesh_for(seeds, log)   # None: one device, nothing sharded
  workdir = workdir_lib.prepare(workdir)   # WorkdirError: a file, or not writable
  lock = _lock_workdir(workdir, primary, log)
  ckpt = writer = best = None
  try:
    train, init, run, compiled = _shared_fns(config, mesh, checked)
    total = train.num_updates
    ckpt, saved = _open_checkpoints(config, workdir)
    best = _best_checkpoint(config, train, workdir)
    loop = _Loop(config, train, run, compiled, ckpt, log, on_chunk, best)
    dog = watchdog_lib.Watchdog(watchdog, describe=loop.describe,
                                advice=launch.hang_advice)
    with dog:
      extend.check(config, saved, config_to_json(config), train, ckpt.latest_step(), log)
      start, state = _initial_state(train, config, ckpt, mesh, init, loop.hp, log)
      log(f"{config.algo} on {config.env_name}: {total} updates x "
          f"{train.env_steps_per_update} env steps x {seeds} seed(s), "
          f"{_chunk_plan(total - start, int(config.chunk_updates))}")
      if primary:
        writer = loop.writer = metrics_lib.MetricsWriter(workdir, resume_step=start)
      with interrupts.StopSignals(log, lambda: "then saving a checkpoint") as stop:
        loop.run_all(state, start, dog, stop)
    summary = _finish(config, train, workdir, loop, start, primary, log)
  finally:
    if writer is not None:
      writer.close()
    if ckpt is not None:
      ckpt.close()
    if best is not None:
      best.close()
    if lock is not None:
      lock.release()
  return summary


def _chunk_plan(left: int, chunk: int) -> str:
  """How `left` updates split into compiled chunks of at most `chunk`, in words."""
  if left <= chunk:
    return f"one chunk of {left} update{'s' * (left != 1)}"
  full, rest = divmod(left, chunk)
  return (f"{full} chunk{'s' * (full != 1)} of {chunk} updates"
          + (f", then one of {rest} (compiled on its own)" if rest else ""))


def _best_checkpoint(config, train, workdir: str) -> Optional[ckpt_lib.BestCheckpoint]:
  name, mode = ckpt_lib.best_metric_of(config, train.headline)
  if name is None:
    return None
  return ckpt_lib.BestCheckpoint(os.path.join(workdir, BEST_DIR), name, mode,
                                 config=config_to_json(config))


def _finish(config, train, workdir: str, loop: _Loop, start: int, primary: bool, log):
  """Plots the learning curve and writes summary.json (process 0); returns the summary."""
  seeds, total = int(config.seeds), train.num_updates
  records = (metrics_lib.read_jsonl(os.path.join(workdir, metrics_lib.METRICS_FILE))
             if primary else loop.records)
  curve = os.path.join(workdir, CURVE_FILE)
  if primary:
    metrics_lib.plot_learning_curves(records, curve, keys=train.headline,
                                     title=f"{config.algo} on {config.env_name}")
  steps_run = (total - start) * train.env_steps_per_update * seeds
  run_s = loop.run_s
  summary = {
      "algo": config.algo, "env_name": config.env_name, "seeds": seeds,
      "updates": total, "env_steps_per_seed": total * train.env_steps_per_update,
      "final": metrics_lib.summarize(records, train.headline),
      "compile_seconds": loop.compile_s, "run_seconds": run_s,
      "env_steps_per_second": steps_run / run_s if run_s > 0 else None,
      "resumed_from": start, "learning_curve": curve,
      "xla_flags": os.environ.get("XLA_FLAGS", "")}
  if primary:
    with open(os.path.join(workdir, SUMMARY_FILE), "w") as f:
      json.dump(summary, f, indent=2)
  window = min(metrics_lib.FINAL_WINDOW, len(records))
  log(f"final (mean of the last {window} updates): "
      + ", ".join(f"{k} {v:.3f}" for k, v in summary["final"].items())
      + f" | learning curve: {curve}")
  return summary
