"""Running a recipe for real: seeds vmapped, compiled chunks, metrics, checkpoints, plots.

`train_and_evaluate(config, workdir)` is everything `scripts/train.py` does:

1. validate the config and build the recipe's `Train` (errors name the field);
2. resume from the newest checkpoint in `workdir/checkpoints` if there is one (the config
   must match the one saved beside it), else initialise `config.seeds` seeds;
3. run `config.chunk_updates` updates per compiled call (all seeds vmapped in it), and
   after each chunk: stop on a non-finite loss before anything is written, append the
   chunk's metrics to `metrics.jsonl` / TensorBoard, print a progress line, and save a
   checkpoint every `config.checkpoint_every` updates and at the end;
4. plot the learning curve to `learning_curve.png` and write `summary.json`.

Compilation is done ahead of time and timed separately, so env steps/s excludes it.
On CPU with jaxlib 0.10, start Python with
`XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false` (scripts/train.py sets
it for multi-seed runs through scripts/xla_cpu_flags.py, only on jaxlib versions known to
accept it): without it the XLA CPU runtime was seen to hang for good on vmapped
multi-seed runs.
With more than one local device (GPUs, TPU cores, or CPU devices from
`JAX_NUM_CPU_DEVICES=N`), the seeds are split over them (`seed_mesh_for`): initialised
on one device, then sharded, or restored from a checkpoint straight into their shards;
each compiled chunk then runs every device's seeds on that device. Several processes
(`jax.distributed`, started by `scripts/train.py --distributed` or its
`--coordinator_address` flags) split the seeds over all their devices the same way and
checkpoint together; process 0 alone writes metrics, plots and the summary.
Chunk boundaries are the only place the host sees the state, and the RNG key is in the
state, so a run resumed from any checkpoint reproduces the uninterrupted run exactly.
"""
from __future__ import annotations

import functools
import json
import os
import time
from typing import Any, Callable, Dict

import jax
from jax.experimental import multihost_utils
import numpy as np

from credit_jax import algos
from credit_jax import checkpoint as ckpt_lib
from credit_jax import metrics as metrics_lib
from credit_jax import parallel

CHECKPOINT_DIR = "checkpoints"
CURVE_FILE = "learning_curve.png"
SUMMARY_FILE = "summary.json"
# Fields that steer how a run is executed and logged, not what it computes: a resumed run
# may change them.
_RUN_CONTROL_FIELDS = ("chunk_updates", "checkpoint_every", "keep_checkpoints")


class NonFiniteLossError(FloatingPointError):
  """The loss became NaN/inf; the run stopped before saving or logging that chunk."""


def config_to_json(config) -> Dict[str, Any]:
  """The config as plain JSON types (tuples become lists), for saving and comparing."""
  return json.loads(json.dumps(config.to_dict(), sort_keys=True, default=str))


def _config_diff(saved: Dict[str, Any], current: Dict[str, Any], prefix: str = ""):
  diffs = []
  for k in sorted(set(saved) | set(current)):
    if not prefix and k in _RUN_CONTROL_FIELDS:
      continue
    a, b = saved.get(k, "<missing>"), current.get(k, "<missing>")
    if isinstance(a, dict) and isinstance(b, dict):
      diffs += _config_diff(a, b, prefix + k + ".")
    elif a != b:
      diffs.append(f"{prefix}{k}: saved {a!r}, now {b!r}")
  return diffs


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


def train_and_evaluate(config, workdir: str, log: Callable[[str], None] = print
                       ) -> Dict[str, Any]:
  """Trains `config` in `workdir` (resuming if it holds checkpoints); returns the summary.

  Raises:
    algos.ConfigError: a config field is invalid, or the workdir holds another config.
    NonFiniteLossError: the loss became non-finite; the last good checkpoint is kept.
  """
  train = algos.make_train(config)
  # With several processes (jax.distributed) all of them compute and save checkpoints;
  # process 0 alone logs and writes metrics, plots and the summary.
  primary = jax.process_index() == 0
  if not primary:
    log = lambda _: None  # pylint: disable=unnecessary-lambda-assignment
  seeds, total = int(config.seeds), train.num_updates
  mesh = seed_mesh_for(seeds, log)   # None: one device, nothing sharded
  workdir = os.path.abspath(workdir)
  os.makedirs(workdir, exist_ok=True)
  cfg_json = config_to_json(config)
  ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, CHECKPOINT_DIR),
                               max_to_keep=int(config.keep_checkpoints), config=cfg_json)
  saved = ckpt.saved_config()
  if saved is not None:
    diffs = _config_diff(saved, cfg_json)
    if diffs:
      ckpt.close()
      raise algos.ConfigError(
          f"workdir {workdir} holds checkpoints of a different config ("
          + "; ".join(diffs) + "); use a fresh --workdir")

  hp = train.default_hparams
  keys = jax.random.split(jax.random.PRNGKey(int(config.seed)), seeds)
  init, run = make_run_fns(train)
  start = ckpt.latest_step() or 0
  if start > total:
    ckpt.close()
    raise algos.ConfigError(
        f"workdir {workdir} has a checkpoint at update {start}, past this config's "
        f"{total} updates; use a fresh --workdir")
  if start:
    target = jax.eval_shape(init, keys, hp)
    if mesh is not None:   # restored straight into its shards
      sharding = parallel.seed_sharding(mesh)
      target = jax.tree.map(
          lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), target)
    state = ckpt.restore(start, target)
    log(f"resumed from checkpoint at update {start}/{total} in {ckpt.directory}")
  else:
    state = init(keys, hp)
    if mesh is not None:   # initialised on one device first: see credit_jax/parallel.py
      state = parallel.shard_seeds(state, mesh)

  steps_per_update = train.env_steps_per_update
  log(f"{config.algo} on {config.env_name}: {total} updates x {steps_per_update} env "
      f"steps x {seeds} seed(s), chunks of {config.chunk_updates} updates")
  writer = (metrics_lib.MetricsWriter(workdir, resume_step=start) if primary
            else _NoMetricsWriter())
  session_records = []
  progress = metrics_lib.Progress(total, steps_per_update * seeds, show=train.headline,
                                  log=log)
  compiled, compile_s, run_s = {}, 0.0, 0.0
  done = start
  try:
    while done < total:
      u = min(int(config.chunk_updates), total - done)
      if u not in compiled:
        t0 = time.perf_counter()
        compiled[u] = run(u).lower(state, hp).compile()
        compile_s += time.perf_counter() - t0
        log(f"compiled a chunk of {u} updates in {time.perf_counter() - t0:.1f} s")
      t0 = time.perf_counter()
      new_state, chunk_metrics = compiled[u](state, hp)
      chunk_metrics = _to_host(chunk_metrics)
      dt = time.perf_counter() - t0
      run_s += dt
      loss = np.asarray(chunk_metrics["loss"])
      if not np.all(np.isfinite(loss)):
        seed, upd = np.argwhere(~np.isfinite(loss))[0]
        raise NonFiniteLossError(
            f"non-finite loss ({loss[seed, upd]}) at update {done + upd + 1} (seed "
            f"{seed}); stopped without saving it. Last good checkpoint: update "
            f"{ckpt.latest_step()} in {ckpt.directory}. Lower config.lr or check the "
            f"rewards/observations for inf/NaN.")
      records = metrics_lib.chunk_to_records(chunk_metrics, done + 1, steps_per_update)
      writer.write_records(records)
      session_records += records
      state, done = new_state, done + u
      progress.report(done, u, dt, records[-1])
      every = int(config.checkpoint_every)
      if done == total or (every and done % every == 0):
        ckpt.save(done, state)
  finally:
    writer.close()
    ckpt.close()

  records = metrics_lib.read_jsonl(writer.path) if primary else session_records
  curve = os.path.join(workdir, CURVE_FILE)
  if primary:
    metrics_lib.plot_learning_curves(records, curve, keys=train.headline,
                                     title=f"{config.algo} on {config.env_name}")
  steps_run = (total - start) * steps_per_update * seeds
  summary = {
      "algo": config.algo, "env_name": config.env_name, "seeds": seeds,
      "updates": total, "env_steps_per_seed": total * steps_per_update,
      "final": metrics_lib.summarize(records, train.headline),
      "compile_seconds": compile_s, "run_seconds": run_s,
      "env_steps_per_second": steps_run / run_s if run_s > 0 else None,
      "resumed_from": start, "learning_curve": curve}
  if primary:
    with open(os.path.join(workdir, SUMMARY_FILE), "w") as f:
      json.dump(summary, f, indent=2)
  log("final " + ", ".join(f"{k} {v:.3f}" for k, v in summary["final"].items())
      + f" | learning curve: {curve}")
  return summary
