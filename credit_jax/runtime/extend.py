"""Extending a run: a finished (or resumed) run may change only how long it is.

`train_and_evaluate` (credit_jax/runtime/run.py) refuses to resume from checkpoints of
another config, except for the fields that set the run's length, `LENGTH_FIELDS`: raising
`num_updates` (or PPO's `total_timesteps`) on a finished run continues it from its last
checkpoint. That is allowed only when every update compiles to the same program under
the old and the new length (`check` lowers one chunk under each and compares the text),
so the extended run is exactly the longer run: its metrics equal those of one run of the
new length from scratch. A setting that reads the length inside the update refuses:
`anneal_lr=True` (the learning rate falls to 0 over `num_updates`, so a longer run has a
different rate at every update), and any recipe schedule of that kind. Lowering costs a
trace of one chunk per length, only when a length changed.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Optional

import jax
import numpy as np

from credit_jax import algos

LENGTH_FIELDS = ("num_updates", "total_timesteps")


def _chunk_program(train, seeds: int, chunk: int) -> str:
  """The lowered text of `train`'s chunk of `chunk` updates over `seeds` vmapped seeds."""
  init = jax.vmap(train.init, in_axes=(0, None))
  run = jax.vmap(functools.partial(train.run, num_updates=chunk), in_axes=(0, None))
  keys = jax.ShapeDtypeStruct((int(seeds), 2), np.uint32)
  target = jax.eval_shape(init, keys, train.default_hparams)
  return jax.jit(run).lower(target, train.default_hparams).as_text()


def check(config, saved: Optional[Dict[str, Any]], current: Dict[str, Any], train,
          done: Optional[int], log: Callable[[str], None],
          make_train: Callable = algos.make_train) -> None:
  """Allows `config` (JSON form `current`) to resume checkpoints saved under `saved`
  when they differ only in `LENGTH_FIELDS` and the compiled update is unchanged; logs the
  extension, else raises ConfigError naming the field. No-op when nothing changed."""
  changed = [f for f in LENGTH_FIELDS if saved is not None
             and saved.get(f, "<missing>") != current.get(f, "<missing>")]
  if not changed:
    return
  what = ", ".join(f"config.{f} from {saved.get(f)!r} to {current.get(f)!r}"
                   for f in changed)
  previous = config.copy_and_resolve_references()
  with previous.unlocked():
    for f in changed:
      previous[f] = saved[f]
  seeds, chunk = int(config.seeds), int(config.chunk_updates)
  if _chunk_program(make_train(previous), seeds, chunk) != _chunk_program(train, seeds,
                                                                         chunk):
    why = (" (config.anneal_lr=True: the learning rate falls to 0 over num_updates)"
           if config.get("anneal_lr") else "")
    raise algos.ConfigError(
        f"config.{changed[0]}: changing {what} changes the compiled update{why}, so "
        f"the longer run would not continue this one; use a fresh --workdir")
  log(f"extending the run: {what}" + (f", from update {done}" if done else ""))
