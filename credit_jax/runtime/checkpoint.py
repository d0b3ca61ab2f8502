"""Checkpoints: a thin wrapper over orbax's `CheckpointManager`.

A training run saves its whole train state (parameters, optimizer state, environment
state, the RNG key, the update counter) every N updates, keeps the last few, and writes
the config beside every checkpoint as JSON. Because the RNG key is part of the state, a run
restored from step `s` continues exactly as the uninterrupted run would have.

Saves are synchronous: `save` returns only after orbax has committed the checkpoint
(orbax writes to a temporary directory and renames it), so a process killed at any moment
leaves the previous checkpoints complete and `latest_step()` never names a partial one.

A checkpoint damaged later (a truncated or half-copied file) does not stop a resume:
`restore_newest` restores the newest checkpoint that restores, and moves each newer one
that does not to `<directory>_corrupt/<step>` (kept for inspection, never deleted).
"""
from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any, Callable, List, Mapping, Optional, Tuple

import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp

from credit_jax.runtime import cli

CONFIG_FILE = "config.json"
_CORRUPT_SUFFIX = "_corrupt"


class CheckpointError(RuntimeError):
  """Checkpoints exist but none of them restores."""


class CheckpointSaveError(RuntimeError):
  """A checkpoint could not be written (disk full, I/O error); earlier ones are intact."""


def _write_reason(error: BaseException) -> str:
  """The OS's words for a failed write (orbax/tensorstore put its errno in the text)."""
  for e in (error, error.__cause__, error.__context__):
    if isinstance(e, OSError) and e.errno:
      return os.strerror(e.errno)
  match = re.search(r"os_error_code='?(\d+)", str(error))
  return os.strerror(int(match.group(1))) if match else _reason(error)


# What orbax/tensorstore append to an error: a JSON spec or source locations in brackets,
# and pybind object reprs; none of it says what is wrong.
_NOISE = (re.compile(r"\s*\[(tensorstore_spec|source locations)=.*$"),
          re.compile(r"<([\w.]+) object at 0x[0-9a-fA-F]+>"))


def _reason(error: BaseException, limit: int = 200) -> str:
  """An exception as one short line: without tensorstore's spec and pybind reprs, and,
  when still long, its first and last clauses (the operation and the innermost cause)."""
  text = " ".join(str(error).split())
  text = _NOISE[0].sub("", text)
  text = _NOISE[1].sub(lambda m: m.group(1).rsplit(".", 1)[-1], text)
  if len(text) > limit:
    clauses = re.split(r": (?=[A-Z\"])", text)
    head, tail = clauses[0], clauses[-1]
    text = head if len(clauses) == 1 else f"{head}: ...: {tail}"
    if len(text) > limit:
      text = text[:limit - 3].rsplit(" ", 1)[0] + "..."
  return f"{type(error).__name__}: {text}"


def _all_processes(ok: bool) -> bool:
  """True when `ok` holds on every process (a restore must succeed everywhere)."""
  if jax.process_count() == 1:
    return ok
  return bool(np.all(multihost_utils.process_allgather(np.asarray(ok))))


class Checkpointer:
  """Saves and restores a train-state pytree under `directory`.

  Args:
    directory: where the step directories live (created if missing).
    max_to_keep: how many of the newest checkpoints to keep.
    config: a JSON-serialisable mapping saved beside every checkpoint and also written
      once to `directory/config.json`, so a checkpoint can always be read with the
      config that produced it.
  """

  def __init__(self, directory: str, max_to_keep: int = 3,
               config: Optional[Mapping[str, Any]] = None):
    if max_to_keep < 1:
      raise ValueError(f"max_to_keep must be >= 1, got {max_to_keep}")
    self.directory = os.path.abspath(directory)
    os.makedirs(self.directory, exist_ok=True)
    self._config = dict(config) if config is not None else None
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True, enable_async_checkpointing=False,
            cleanup_tmp_directories=True))

  def latest_step(self) -> Optional[int]:
    """The newest complete checkpoint's step, or None when there is none."""
    return self._manager.latest_step()

  def all_steps(self) -> list:
    """All complete checkpoint steps, oldest first."""
    return sorted(self._manager.all_steps())

  def saved_config(self) -> Optional[dict]:
    """The config written beside the checkpoints by an earlier run, if any
    (CheckpointError if that file is damaged)."""
    path = os.path.join(self.directory, CONFIG_FILE)
    if not os.path.exists(path):
      return None
    try:
      with open(path) as f:
        return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise CheckpointError(
          f"{path} is damaged ({_reason(e)}); every checkpoint holds its config too "
          f"(<step>/config): copy one back, or move the directory away to start "
          f"over") from None

  def save(self, step: int, state: Any) -> None:
    """Saves `state` (any pytree of arrays) as checkpoint `step` and waits for it.

    Raises:
      CheckpointSaveError: the write failed (disk full, read-only or I/O error), in one
        line naming the newest checkpoint that is intact.
    """
    latest = self.latest_step()
    try:
      self._save(step, state)
    except Exception as e:  # pylint: disable=broad-except  # orbax/tensorstore raise many types
      if not cli.is_write_failure(e):
        raise
      kept = (f"update {latest} is the newest intact one" if latest is not None
              else "none was saved before")
      raise CheckpointSaveError(
          f"could not save the checkpoint of update {step} in {self.directory} "
          f"({_write_reason(e)}); {kept}: free space and rerun the same command to "
          f"resume") from e

  def _save(self, step: int, state: Any) -> None:
    items = {"state": ocp.args.StandardSave(state)}
    if self._config is not None:
      items["config"] = ocp.args.JsonSave(self._config)
      path = os.path.join(self.directory, CONFIG_FILE)
      # One writer per run; rewritten when a run is extended (a longer num_updates).
      if jax.process_index() == 0 and self.saved_config() != self._config:
        with open(path + ".tmp", "w") as f:
          json.dump(self._config, f, indent=2, sort_keys=True)
        os.replace(path + ".tmp", path)
    self._manager.save(int(step), args=ocp.args.Composite(**items), force=True)
    self._manager.wait_until_finished()

  def restore(self, step: int, target: Any) -> Any:
    """Restores checkpoint `step` into the structure, shapes and dtypes of `target`.

    `target` may be a concrete pytree or its `jax.eval_shape` (ShapeDtypeStructs).
    """
    if step not in self._manager.all_steps():
      raise ValueError(
          f"no checkpoint for step {step} in {self.directory}; have {self.all_steps()}")
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
    restored = self._manager.restore(
        int(step), args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
    return restored["state"]

  def restore_newest(self, target: Any, log: Callable[[str], None] = print
                     ) -> Tuple[Optional[int], Any]:
    """`(step, state)` of the newest checkpoint that restores into `target`.

    Each newer checkpoint that fails to restore is reported through `log` (step and
    reason) and moved aside (`move_aside`). Returns `(None, None)` when there is none.
    Raises:
      CheckpointError: there are checkpoints but none restores (then none is moved: a
        failure of all of them points at the code or the target, not at the files).
    """
    failed: List[Tuple[int, str]] = []
    for step in reversed(self.all_steps()):
      try:
        state, reason = self.restore(step, target), None
      except Exception as e:  # pylint: disable=broad-except  # orbax/tensorstore raise many types
        state, reason = None, _reason(e)
      if _all_processes(reason is None):
        for bad, why in failed:
          log(f"checkpoint at update {bad} does not restore ({why}); moved it to "
              f"{self.move_aside(bad)}")
        return step, state
      failed.append((step, reason or "failed on another process"))
    if failed:
      raise CheckpointError(
          f"no checkpoint in {self.directory} restores: " + "; ".join(
              f"update {s}: {r}" for s, r in failed)
          + ". Move the directory away (or use a fresh --workdir) to start over.")
    return None, None

  def move_aside(self, step: int) -> str:
    """Moves checkpoint `step` to `<directory>_corrupt/<step>` (a new name if taken);
    returns where it went. With several processes, process 0 moves it and all wait."""
    dest_dir = self.directory + _CORRUPT_SUFFIX
    dest = os.path.join(dest_dir, str(step))
    n = 1
    while os.path.exists(dest):
      dest, n = os.path.join(dest_dir, f"{step}.{n}"), n + 1
    if jax.process_index() == 0:
      os.makedirs(dest_dir, exist_ok=True)
      shutil.move(os.path.join(self.directory, str(step)), dest)
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices(f"credit_jax_move_aside_{step}")
    self._manager.reload()
    return dest

  def close(self) -> None:
    self._manager.close()

  def __enter__(self) -> "Checkpointer":
    return self

  def __exit__(self, *exc) -> None:
    self.close()


_BEST_FILE = "best.json"


def best_metric_of(config, headline) -> Tuple[Optional[str], str]:
  """`(metric, mode)` a run keeps its best checkpoint by: `config.best_metric` ("" or
  absent: the recipe's first headline metric, e.g. success; "none": no best checkpoint);
  minimised for `loss` and names ending in `_loss`, else maximised."""
  name = str(config.get("best_metric", "") or "") or (headline[0] if headline else "")
  if not name or name == "none":
    return None, "max"
  return name, "min" if name == "loss" or name.endswith("_loss") else "max"


class BestCheckpoint:
  """The checkpoint with the best value of one metric so far, in its own directory.

  `offer(step, value, state)` saves `state` there, replacing the previous best, when
  `value` beats it (`mode` "max" or "min"); `directory/best.json` records the metric,
  mode, step and value, and is read back on a resume (and by scripts/evaluate.py).

  Args:
    directory: where the best checkpoint lives (beside the run's `checkpoints/`).
    metric: the metric's name; `mode`: "max" or "min".
    config: saved beside it, as `Checkpointer` does.
  """

  def __init__(self, directory: str, metric: str, mode: str = "max",
               config: Optional[Mapping[str, Any]] = None):
    if mode not in ("max", "min"):
      raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    self.metric, self.mode = metric, mode
    self.checkpointer = Checkpointer(directory, max_to_keep=1, config=config)
    self.best = read_best(self.checkpointer.directory)
    if self.best is not None and (self.best.get("metric"), self.best.get("mode")) != (
        metric, mode):
      self.best = None   # kept by another metric: the next offer replaces it

  def offer(self, step: int, value: float, state: Any) -> bool:
    """Saves `state` as the best when `value` beats the best so far; True if it did."""
    value = float(value)
    if not np.isfinite(value):
      return False
    if self.best is not None:
      best = float(self.best["value"])
      if not (value > best if self.mode == "max" else value < best):
        return False
    self.checkpointer.save(step, state)
    info = {"metric": self.metric, "mode": self.mode, "step": int(step), "value": value}
    if jax.process_index() == 0:
      path = os.path.join(self.checkpointer.directory, _BEST_FILE)
      with open(path + ".tmp", "w") as f:
        json.dump(info, f, indent=2)
      os.replace(path + ".tmp", path)
    self.best = info
    return True

  def close(self) -> None:
    self.checkpointer.close()


def read_best(directory: str) -> Optional[dict]:
  """`best.json` of a `BestCheckpoint` directory, if it names a checkpoint that exists."""
  try:
    with open(os.path.join(directory, _BEST_FILE)) as f:
      info = json.load(f)
  except (OSError, ValueError):
    return None
  step = info.get("step") if isinstance(info, dict) else None
  return info if step is not None and os.path.isdir(os.path.join(directory, str(step))) else None
