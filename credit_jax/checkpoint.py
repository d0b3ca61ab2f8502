"""Checkpoints: a thin wrapper over orbax's `CheckpointManager`.

A training run saves its whole train state (parameters, optimizer state, environment
state, the RNG key, the update counter) every N updates, keeps the last few, and writes
the config beside every checkpoint as JSON. Because the RNG key is part of the state, a run
restored from step `s` continues exactly as the uninterrupted run would have.

Saves are synchronous: `save` returns only after orbax has committed the checkpoint
(orbax writes to a temporary directory and renames it), so a process killed at any moment
leaves the previous checkpoints complete and `latest_step()` never names a partial one.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional

import jax
import orbax.checkpoint as ocp

CONFIG_FILE = "config.json"


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
    """The config written beside the checkpoints by an earlier run, if any."""
    path = os.path.join(self.directory, CONFIG_FILE)
    if not os.path.exists(path):
      return None
    with open(path) as f:
      return json.load(f)

  def save(self, step: int, state: Any) -> None:
    """Saves `state` (any pytree of arrays) as checkpoint `step` and waits for it."""
    items = {"state": ocp.args.StandardSave(state)}
    if self._config is not None:
      items["config"] = ocp.args.JsonSave(self._config)
      path = os.path.join(self.directory, CONFIG_FILE)
      if jax.process_index() == 0 and not os.path.exists(path):   # one writer per run
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

  def close(self) -> None:
    self._manager.close()

  def __enter__(self) -> "Checkpointer":
    return self

  def __exit__(self, *exc) -> None:
    self.close()
