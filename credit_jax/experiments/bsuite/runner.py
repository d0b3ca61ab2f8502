"""Training one (method, cell) of the bsuite study and what it records.

A cell's runs (its settings x `config.seeds` seeds) are vmapped in one compiled program
built by `credit_jax.algos.make_train` and run in chunks of updates (a progress line
each, which also feeds the watchdog). Per run and update the record keeps the episodes
that ended, how many of them succeeded (`success`: right umbrella, right recall, bonus
chain) and the sum of their returns, read from the recipe's metrics: `episodes` (PPO)
or the fixed `episodes_per_update` (GRPO, REINFORCE, DQN: every episode is whole), times its
`success` and `return` means. From these the scores follow bsuite's definitions:
umbrella regret = 2 (episodes - successes), memory total_perfect = successes,
discounting total_return = the returns' sum.

A bucketed cell (specs.py) runs several settings in one program on a `PaddedChain`
(credit_jax/envs/bsuite.py), each run's setting placed after `init` by
`place_settings`, through what the recipe already carries per run:
  * PPO (MLP, GRU): its continuing rollout keeps the environments' states in
    `TrainState.aux["env_state"]` (and their observations in `aux["obs"]`); a padded
    state keeps its setting through every reset, so each run's first episodes are
    drawn again with its setting (`PaddedChain.with_setting`, the same keys);
  * GRPO, REINFORCE (MLP, GRU) and DQN: a one-stage fixed curriculum on the swept field
    (credit_jax/addons/curriculum.py), whose stage value is traced per run in
    `aux["curriculum"]["values"]`; each update's episodes reset with it.
PPO counts the padding episode that follows each real one as an episode (return 0, no
success); a padded PPO run ends exactly one real episode per environment and update
(`episodes_per_update`), so its counts are taken from that.

The umbrella critic probe (PPO with an MLP critic, umbrella experiments): after every
chunk, the value head on hand-built step-2 observations (the umbrella chosen, need and
has shown, the time feature at t = 1, the run's distractor bits drawn at random):
`V(has = need) - V(has != need)`, averaged over need and 32 distractor draws. A critic
that has learned the final reward's sign gives `2 gamma^(L - 2)` (a chain of L >= 2).
"""
from __future__ import annotations

import math
import time
import zlib
from typing import Callable, Dict, Optional

import jax
import jax.numpy as jnp
import numpy as np

from credit_jax import envs
from credit_jax.algos import make_train
from credit_jax.algos import train as train_lib
from credit_jax.experiments.bsuite import specs

PROBE_DRAWS = 32   # distractor draws per need value in the critic probe


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


def run_settings(cell: specs.Cell, config) -> np.ndarray:
  """[R] int32 each run's setting, in `run_keys`' order."""
  return np.repeat(np.asarray(cell.settings, np.int32), int(config.seeds))


def place_settings(state, settings: jax.Array, family: str, cfg):
  """`state` ([R]-batched TrainState from `init`) with run r on setting `settings[r]`.

  See the module docstring: PPO's reset environments drawn again with the setting,
  GRPO's one-stage curriculum value set. Raises ValueError when the recipe's state does
  not carry what this needs (a recipe whose aux changed)."""
  aux = dict(state.aux)
  if family in specs.CURRICULUM_FAMILIES:
    if "curriculum" not in aux:
      raise ValueError(f"{family}'s state has no aux['curriculum']: the bucketed "
                       f"program needs the one-stage curriculum specs.recipe_config sets")
    cur = dict(aux["curriculum"])
    cur["values"] = jnp.broadcast_to(
        jnp.asarray(settings, cur["values"].dtype)[:, None], cur["values"].shape)
    aux["curriculum"] = cur
  elif family == "ppo":
    if "env_state" not in aux or "obs" not in aux:
      raise ValueError("PPO's state has no aux['env_state'] / aux['obs'] to set the "
                       "settings in")
    env, env_params = envs.make(cfg.env_name, **dict(cfg.env_kwargs))
    redraw = jax.vmap(jax.vmap(env.with_setting, in_axes=(0, None, None)),
                      in_axes=(0, None, 0))
    obs, env_state = redraw(aux["env_state"], env_params, jnp.asarray(settings))
    aux["env_state"], aux["obs"] = env_state, obs.astype(aux["obs"].dtype)
  else:
    raise ValueError(f"family {family!r} takes no setting per run")
  return state.replace(aux=aux) if hasattr(state, "replace") else state._replace(aux=aux)


def _counts(m: Dict[str, np.ndarray], per_update: int, padded_ppo: bool = False):
  """(episodes, successes, return_sum), each [R, chunk], from a chunk's metrics."""
  success = np.asarray(m["success"], np.float64)
  if "episodes" in m:
    ended = np.rint(np.asarray(m["episodes"], np.float64)).astype(np.int64)
  else:
    ended = np.full(success.shape, int(per_update), np.int64)
  # `success` and `return` are means over the ended episodes (PPO carries the last
  # value when none ended): times the count they are the update's totals (padding
  # episodes add nothing to either).
  successes = np.where(ended > 0, np.rint(success * ended), 0).astype(np.int64)
  returns = np.where(ended > 0, np.asarray(m["return"], np.float64) * ended, 0.0)
  episodes = np.full(success.shape, int(per_update), np.int64) if padded_ppo else ended
  return episodes, successes, returns


def probes_critic(method: str, cell: specs.Cell) -> bool:
  """Whether the umbrella critic probe runs: PPO with an MLP critic on umbrella."""
  return (method.startswith("ppo_mlp_")
          and specs.SCORED_AS[cell.experiment] == "umbrella_length")


def critic_probe_fn(cfg, cell: specs.Cell) -> Callable:
  """`fn(params [R, ...], settings [R], key) -> [R]` V(right) - V(wrong) at step 2
  (module docstring), for the PPO MLP network of `cfg` on `cell`."""
  env, env_params = train_lib.make_env(cfg)
  network, _ = train_lib.make_network(cfg, env, env_params, value_head=True)
  dim = int(env.observation_space(env_params).shape[0])
  n_bits = dim - 3
  distract = cell.experiment == "umbrella_distract"

  def one(params, setting, key):
    length = jnp.float32(specs.UMBRELLA_DISTRACT_LENGTH) if distract else \
        jnp.asarray(setting, jnp.float32)
    active = setting if distract else n_bits
    bits = jax.random.bernoulli(key, 0.5, (2, PROBE_DRAWS, n_bits)).astype(jnp.float32)
    bits = jnp.where(jnp.arange(n_bits) < active, bits, 0.0)
    need = jnp.broadcast_to(jnp.arange(2, dtype=jnp.float32)[:, None], (2, PROBE_DRAWS))
    time_left = jnp.full((2, PROBE_DRAWS), 1.0 - 1.0 / length)

    def obs(has):
      return jnp.concatenate([need[..., None], has[..., None], time_left[..., None],
                              bits], axis=-1)
    v_right = network.apply(params, obs(need))[1]
    v_wrong = network.apply(params, obs(1.0 - need))[1]
    return jnp.mean(v_right - v_wrong)

  return jax.jit(jax.vmap(one, in_axes=(0, 0, None)))


def train_cell(method: str, cell: specs.Cell, config, log: Callable, tag: str) -> dict:
  """Trains `method` on every run of `cell`; returns the cell's record (JSON-ready).

  Record: method, experiment, settings [R] and seeds [R] of the runs, per-update
  `episodes`, `successes`, `return_sum` as [R][U] lists, `compile_s`, `run_s`,
  `env_steps_per_seed` (real steps, summed over the cell's settings),
  `program_steps_per_seed` (steps the program computes, padding included), and for the
  critic probe `critic_gap` [R][chunks] with `probe_episodes` [chunks].
  """
  cfg = specs.recipe_config(method, cell, config)
  family = specs.family_of(method)
  train = make_train(cfg)
  keys = run_keys(cell, config)
  settings = run_settings(cell, config)
  n = keys.shape[0]
  updates = specs.num_updates(cell.experiment, config)
  chunk = math.gcd(updates, int(config.chunk_updates))
  hp = {k: jnp.full((n,), v, jnp.float32) for k, v in train.default_hparams.items()}
  padded = cell.field is not None
  t0 = time.perf_counter()
  state = jax.jit(jax.vmap(train.init))(keys, hp)
  if padded:
    state = jax.jit(lambda s, v: place_settings(s, v, family, cfg))(
        state, jnp.asarray(settings))
  program = jax.jit(jax.vmap(lambda s, h: train.run(s, h, chunk))).lower(
      state, hp).compile()
  compile_s = time.perf_counter() - t0
  probe: Optional[Callable] = critic_probe_fn(cfg, cell) if probes_critic(method, cell) \
      else None
  per_update = int(config.episodes_per_update)
  episodes, successes, returns, gaps = [], [], [], []
  run_s, done = 0.0, 0
  real_steps = per_update * np.asarray([specs.episode_len(cell.experiment, int(s), config)
                                        for s in settings], np.float64)
  while done < updates:
    t0 = time.perf_counter()
    state, m = program(state, hp)
    m = jax.device_get(m)
    e, s, r = _counts(m, per_update, padded and family == "ppo")
    dt = time.perf_counter() - t0
    run_s += dt
    episodes.append(e)
    successes.append(s)
    returns.append(r)
    done += chunk
    if probe is not None:
      gaps.append(np.asarray(probe(state.params, jnp.asarray(settings),
                                   jax.random.PRNGKey(done))))
    rate = s[:, -1].sum() / max(e[:, -1].sum(), 1)
    log(f"{tag}: update {done}/{updates} | success {rate:.2f} | "
        f"{chunk * real_steps.sum() / dt:,.0f} env steps/s | {compile_s + run_s:.0f}s")
  seeds = int(config.seeds)
  per_seed_settings = sorted(set(cell.settings))
  rec = {"method": method, "experiment": cell.experiment, "cell": cell.name,
         "episode_len": cell.episode_len, "padded": padded,
         "settings": settings.tolist(),
         "seeds": [j for _ in cell.settings for j in range(seeds)],
         "episodes": np.concatenate(episodes, axis=1).tolist(),
         "successes": np.concatenate(successes, axis=1).tolist(),
         "return_sum": np.concatenate(returns, axis=1).tolist(),
         "env_steps_per_seed": int(updates * per_update * sum(
             specs.episode_len(cell.experiment, s, config) for s in per_seed_settings)),
         "program_steps_per_seed": int(updates * train.env_steps_per_update
                                       * len(per_seed_settings)),
         "compile_s": compile_s, "run_s": run_s}
  if gaps:
    rec["critic_gap"] = np.stack(gaps, axis=1).tolist()
    rec["probe_episodes"] = [int(chunk * (i + 1) * per_update) for i in range(len(gaps))]
  return rec
