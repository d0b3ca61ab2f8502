"""Training one (method, cell) of the bsuite study and what it records.

A cell's runs (its settings x `config.seeds` seeds) are vmapped in one compiled program
built by `credit_jax.algos.make_train` and run in chunks of updates (a progress line
each, which also feeds the watchdog). Per run and update the record keeps the episodes
that ended, how many of them succeeded (`success`: right umbrella, right recall, bonus
chain) and the sum of their returns, read from the recipe's metrics: `episodes` (PPO)
or the fixed `episodes_per_update` (GRPO, REINFORCE: every episode is whole), times its
`success` and `return` means. From these the scores follow bsuite's definitions:
umbrella regret = 2 (episodes - successes), memory total_perfect = successes,
discounting total_return = the returns' sum.
"""
from __future__ import annotations

import math
import time
import zlib
from typing import Callable, Dict

import jax
import jax.numpy as jnp
import numpy as np

from credit_jax.algos import make_train
from credit_jax.experiments.bsuite import specs


def run_keys(cell: specs.Cell, config) -> jax.Array:
  """[R, 2] keys of the cell's runs, settings-major: run (setting i, seed j) -> i S + j.

  A run's key depends on its experiment, setting and seed only, so a cell gives the
  same numbers however the settings are grouped and whichever method is trained.
  """
  base = jax.random.fold_in(jax.random.PRNGKey(int(config.seed)),
                            zlib.crc32(cell.experiment.encode()) & 0x7FFFFFFF)
  keys = [jax.random.fold_in(jax.random.fold_in(base, s), j)
          for s in cell.settings for j in range(int(config.seeds))]
  return jnp.stack(keys)


def _counts(m: Dict[str, np.ndarray], per_update: int):
  """(episodes, successes, return_sum), each [R, chunk], from a chunk's metrics."""
  success = np.asarray(m["success"], np.float64)
  if "episodes" in m:
    episodes = np.rint(np.asarray(m["episodes"], np.float64)).astype(np.int64)
  else:
    episodes = np.full(success.shape, int(per_update), np.int64)
  ended = episodes > 0
  # `success` and `return` are means over the ended episodes (PPO carries the last
  # value when none ended): times the count they are the update's totals.
  successes = np.where(ended, np.rint(success * episodes), 0).astype(np.int64)
  returns = np.where(ended, np.asarray(m["return"], np.float64) * episodes, 0.0)
  return episodes, successes, returns


def train_cell(method: str, cell: specs.Cell, config, log: Callable, tag: str) -> dict:
  """Trains `method` on every run of `cell`; returns the cell's record (JSON-ready).

  Record: method, experiment, settings [R] and seeds [R] of the runs, per-update
  `episodes`, `successes`, `return_sum` as [R][U] lists, `compile_s`, `run_s`,
  `env_steps` (per run).
  """
  cfg = specs.recipe_config(method, cell, config)
  train = make_train(cfg)
  keys = run_keys(cell, config)
  n = keys.shape[0]
  updates = specs.num_updates(cell.experiment, config)
  chunk = math.gcd(updates, int(config.chunk_updates))
  hp = {k: jnp.full((n,), v, jnp.float32) for k, v in train.default_hparams.items()}
  t0 = time.perf_counter()
  state = jax.jit(jax.vmap(train.init))(keys, hp)
  program = jax.jit(jax.vmap(lambda s, h: train.run(s, h, chunk))).lower(
      state, hp).compile()
  compile_s = time.perf_counter() - t0
  per_update = int(config.episodes_per_update)
  episodes, successes, returns = [], [], []
  run_s, done = 0.0, 0
  while done < updates:
    t0 = time.perf_counter()
    state, m = program(state, hp)
    m = jax.device_get(m)
    e, s, r = _counts(m, per_update)
    dt = time.perf_counter() - t0
    run_s += dt
    episodes.append(e)
    successes.append(s)
    returns.append(r)
    done += chunk
    rate = s[:, -1].sum() / max(e[:, -1].sum(), 1)
    log(f"{tag}: update {done}/{updates} | success {rate:.2f} | {chunk * train.env_steps_per_update * n / dt:,.0f} env steps/s | "
        f"{compile_s + run_s:.0f}s")
  episodes = np.concatenate(episodes, axis=1)
  seeds = int(config.seeds)
  return {"method": method, "experiment": cell.experiment, "cell": cell.name,
          "episode_len": cell.episode_len,
          "settings": [s for s in cell.settings for _ in range(seeds)],
          "seeds": [j for _ in cell.settings for j in range(seeds)],
          "episodes": episodes.tolist(),
          "successes": np.concatenate(successes, axis=1).tolist(),
          "return_sum": np.concatenate(returns, axis=1).tolist(),
          "env_steps": int(updates * train.env_steps_per_update),
          "compile_s": compile_s, "run_s": run_s}
