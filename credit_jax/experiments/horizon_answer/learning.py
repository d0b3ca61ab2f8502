"""Part B of the horizon answer: tabular policies learning the credit probe and the
control, each arm's updates and env steps to exact J >= 0.9.

Every arm trains the same zero-initialised softmax table `W [R, A]` over the probe's
one-hot observation parts (`anatomy.make_probe`: the credit probe at sigma 0, or the
default KeyChain as control), with Adam at a learning rate tuned per arm, from the same
kind of batch: `episodes` episodes of T steps per update (`anatomy._keychain_rollout`,
which also returns the exact observation and oracle values and P(U = 1 | o, a) at every
step). An arm is its advantage (the per-step weight of grad log pi) and its update:

  * `reinforce_loo`: G_t - the leave-one-out mean of G_t over the update's other
    episodes (G_t the return-to-go, gamma 1);
  * `grpo` / `rloo`: `episodes / group_size` groups of `group_size` episodes from one
    reset; the episode's advantage from `baselines.group_advantages` ("grpo": std
    normalised; "rloo": leave-one-out) at every step;
  * `ppo_obs_<lambda>` / `ppo_oracle_<lambda>`: GAE(lambda) (gamma 1) under the exact
    observation critic (V(o) = E[G_t | o_t = o] under the current policy, by DP: the best
    any critic of the observation can be) or the exact full-state (oracle) critic; PPO's
    clipped surrogate (`ppo_clip`) for `ppo_epochs` full-batch Adam steps per update;
  * `cocoa_exact` / `cocoa_learned`: COCOA's reward-conditioned estimator (part A's,
    `anatomy._advantages`), r_t grad log pi + sum_a grad pi(a | o_t) C_t(a), with
    C_t(a) = w(o_t, a) r_{T-1}[success], w = P(U | o, a) / P(U | o) - 1 either exact
    (the DP's) or learned: a table P_hat(U = 1 | row, a) of decayed success counts
    (`cocoa_decay` per update) from the episodes of earlier updates (this update's
    episodes enter it after the gradient is taken, so its coefficients do not depend on
    them);
  * `vine`: VinePPO's Monte-Carlo values (`credit_jax/addons/vine_ppo.py`): `vine_trajectories`
    episodes, `vine_k` vines from every `T // vine_points`-th step of each (at least 1),
    segment advantages `vine_ppo.vine_advantages`, the REINFORCE-style update (one Adam
    step). Its env steps per update count every vine step (`vine_ppo.VineValues.env_steps`).

Env steps per update (`steps_per_update`) are the trajectories' T x episodes plus, for
the vine, K sum_j (T - t_j) per trajectory; the training loop counts what it ran and the
tests check the two agree. Every `check_every` updates each lane's exact J comes from
the DP (`credit_jax/exact.py` via `anatomy.success_of`); a lane's time is its first
check with J >= `threshold`, censored at `max_updates`.

Seeds and rates run as lanes of one vmapped program per (family, arm, T): tuning at
`tune_horizon`, `tune_seeds` seeds (`tune_seed`, `tune_seed` + 1, ...) x `rates`, picks
the rate of least restricted mean updates (tau `tune_max_updates`); reporting, `seeds`
seeds (`seed`, `seed` + 1, ...), disjoint from the tuning seeds, at that rate. A lane's
keys come from its seed alone (`jax.random.fold_in` of its seed and the check index),
so a cell resumed from its checkpoint (`save_every_s`) continues bit-identically.
"""
from __future__ import annotations

import json
import os
import time
from typing import Callable, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from credit_jax import baselines, returns, rollout
from credit_jax.addons import vine_ppo
from credit_jax.algos import ConfigError
from credit_jax.experiments.horizon_answer import anatomy
from credit_jax.nets import tabular

__all__ = ["ARMS", "arm_names", "batch_gradient", "default_config", "make_program",
           "make_update", "ppo_surrogate", "run_cell", "seed_lists", "steps_per_update",
           "validate_config", "vine_every"]

ARMS = ("reinforce_loo", "grpo", "rloo", "ppo_obs_1", "ppo_obs_0.95", "ppo_oracle_1",
        "ppo_oracle_0.95", "cocoa_exact", "cocoa_learned", "vine")


def default_config() -> ml_collections.ConfigDict:
  """Part B's fields (`config.learning` of the study's config)."""
  c = ml_collections.ConfigDict()
  c.families = ("probe", "control")   # the credit probe at sigma 0, the default KeyChain
  c.horizons = (10, 30, 100, 300, 1000)
  c.arms = ARMS
  c.episodes = 64                     # episodes per update (every arm but the vine)
  c.group_size = 8                    # grpo / rloo: episodes per reset
  c.ppo_epochs = 4                    # PPO: full-batch Adam steps per update
  c.ppo_clip = 0.2
  c.cocoa_decay = 0.9                 # cocoa_learned: count decay per update
  c.vine_trajectories = 8             # vine: trajectories per update
  c.vine_k = 2                        # vine: vines per point
  c.vine_points = 8                   # vine: points per trajectory (every T // this step)
  c.rates = (0.015, 0.05, 0.15)       # Adam learning rates tuned over
  c.tune_horizon = 100
  c.tune_seeds = 4
  c.tune_seed = 0                     # tuning seeds: tune_seed, ..., + tune_seeds - 1
  c.tune_max_updates = 1000
  c.seeds = 10
  c.seed = 1000                       # reported seeds: seed, ..., + seeds - 1
  c.max_updates = 3000                # the budget (censoring), in updates
  c.check_every = 5                   # updates between exact-J checks
  c.threshold = 0.9
  c.save_every_s = 60.0               # a running cell's checkpoint interval
  c.new_cells = True                  # False: tabulate what is saved, run nothing
  return c


def arm_names(config) -> List[str]:
  return [str(a) for a in config.arms]


def seed_lists(config) -> Tuple[List[int], List[int]]:
  """(tuning seeds, reported seeds) of `config.learning`."""
  tune = list(range(int(config.tune_seed), int(config.tune_seed) + int(config.tune_seeds)))
  report = list(range(int(config.seed), int(config.seed) + int(config.seeds)))
  return tune, report


def validate_config(config) -> None:
  """Raises ConfigError naming the first field of `config.learning` that cannot run."""
  for a in config.arms:
    if a not in ARMS:
      raise ConfigError(f"config.learning.arms: {a!r} is not one of {ARMS}")
  for f in ("families",):
    for fam in config[f]:
      if fam not in ("probe", "control"):
        raise ConfigError(f"config.learning.families: 'probe' or 'control', got {fam!r}")
  for f in ("episodes", "group_size", "ppo_epochs", "vine_trajectories", "vine_k",
            "vine_points", "tune_seeds", "tune_max_updates", "seeds", "max_updates",
            "check_every"):
    if int(config[f]) < 1:
      raise ConfigError(f"config.learning.{f}: must be >= 1, got {config[f]}")
  if int(config.episodes) % int(config.group_size) or int(config.group_size) < 2:
    raise ConfigError(f"config.learning.group_size: must be >= 2 and divide episodes = "
                      f"{config.episodes}, got {config.group_size}")
  if int(config.episodes) < 2:
    raise ConfigError("config.learning.episodes: the leave-one-out baseline needs >= 2")
  for f in ("max_updates", "tune_max_updates"):
    if int(config[f]) % int(config.check_every):
      raise ConfigError(f"config.learning.{f}: must be a multiple of check_every = "
                        f"{config.check_every}, got {config[f]}")
  tune, report = seed_lists(config)
  if set(tune) & set(report):
    raise ConfigError(f"config.learning.seed: the reported seeds {report[0]}..{report[-1]} "
                      f"overlap the tuning seeds {tune[0]}..{tune[-1]}")
  if not config.rates or any(float(r) <= 0 for r in config.rates):
    raise ConfigError(f"config.learning.rates: positive learning rates, got {config.rates}")
  if not 0.0 < float(config.threshold) <= 1.0:
    raise ConfigError(f"config.learning.threshold: must lie in (0, 1], got "
                      f"{config.threshold}")
  if not 0.0 <= float(config.cocoa_decay) < 1.0:
    raise ConfigError(f"config.learning.cocoa_decay: must lie in [0, 1), got "
                      f"{config.cocoa_decay}")


def vine_every(config, horizon: int) -> int:
  """The vine's spacing m: T // vine_points, at least 1."""
  return max(1, int(horizon) // int(config.vine_points))


def steps_per_update(config, arm: str, horizon: int) -> int:
  """Env steps one update of `arm` costs at T = `horizon` (KeyChain's episodes always run
  T steps): episodes x T; the vine: trajectories x (T + K sum_j (T - t_j))."""
  horizon = int(horizon)
  if arm != "vine":
    return int(config.episodes) * horizon
  points = vine_ppo.vine_points(horizon, vine_every(config, horizon))
  per_traj = horizon + int(config.vine_k) * int(np.sum(horizon - points))
  return int(config.vine_trajectories) * per_traj


# ---------------------------------------------------------------------------- updates

def _aggregate(probe, row, action, weight):
  """sum over steps of `weight` at each (row, action): [R, A] (row, action, weight
  [T, B]). A one-hot product, not a scatter (faster on CPU)."""
  flat = (row * probe.A + action).reshape(-1)
  onehot = jax.nn.one_hot(flat, probe.R * probe.A, dtype=jnp.float32)
  return (weight.reshape(-1) @ onehot).reshape(probe.R, probe.A)


def _row_sum(probe, row, values):
  """sum over steps of `values [T, B, A]` at each row: [R, A]."""
  onehot = jax.nn.one_hot(row.reshape(-1), probe.R, dtype=jnp.float32)
  return onehot.T @ values.reshape(-1, probe.A)


def _score_gradient(w, s):
  """grad wrt the logits of sum_steps adv_t log pi(a_t | row_t), from the aggregated
  s[R, A] = sum of adv at (row, action): s - pi * rowsum(s)."""
  pi = jax.nn.softmax(w, axis=-1)
  return s - pi * s.sum(-1, keepdims=True)


def _advantage(arm, config, probe, roll, group_size):
  """Per-step advantage [T, B] of a score-function arm (not PPO, not COCOA)."""
  row, action, reward = roll[0], roll[1], roll[2]
  horizon, b = reward.shape
  if arm == "reinforce_loo":
    g = jnp.cumsum(reward[::-1], axis=0)[::-1]
    return g - (g.sum(1, keepdims=True) - g) / (b - 1)
  if arm in ("grpo", "rloo"):
    ret = reward.sum(0).reshape(b // group_size, group_size)
    adv = baselines.group_advantages(ret, arm)[0].reshape(b)
    return jnp.broadcast_to(adv[None, :], (horizon, b))
  raise ValueError(arm)


def _gae(roll, critic: str, lam: float):
  reward, v = roll[2], roll[3] if critic == "obs" else roll[4]
  horizon, b = reward.shape
  values = jnp.concatenate([v, jnp.zeros((1, b))])
  terminated = jnp.zeros((horizon, b), bool).at[-1].set(True)
  return returns.gae(reward, jnp.float32(1.0), values, jnp.float32(lam),
                     terminated=terminated)


def _cocoa_credit(probe, w, roll, pu1_a):
  """COCOA's C_t(a) [T, B, A] from P(U = 1 | o_t, a) `pu1_a` [T, B, A] (anatomy's)."""
  row, reward, success = roll[0], roll[2], roll[-1]
  horizon = reward.shape[0]
  probs = jax.nn.softmax(w, axis=-1)[row]
  pu1 = jnp.sum(probs * pu1_a, axis=-1, keepdims=True)
  w_coef = jnp.where(pu1 > 0, pu1_a / jnp.where(pu1 > 0, pu1, 1.0) - 1.0, 0.0)
  last = jnp.where(success, reward[-1], 0.0)
  later = jnp.arange(horizon)[:, None, None] < horizon - 1
  return jnp.where(later, w_coef * last[None, :, None], 0.0)


def _table_policy(probe):
  """`PolicyFn(W [R, A], obs [D], key) -> (action [], log_prob [], ())` for
  credit_jax/rollout.py (the vine arm)."""
  def policy(w, obs, key):
    logits = w[tabular.joint_index(obs, probe.groups)]
    action = jax.random.categorical(key, logits).astype(jnp.int32)
    return action, jax.nn.log_softmax(logits)[action], ()
  return policy


def ppo_surrogate(v, w_old, s_pos, s_neg, clip: float):
  """PPO's clipped surrogate of logits `v` against the behaviour logits `w_old`, from the
  per-(row, action) sums of the positive and the negative advantages s_pos, s_neg [R, A]
  (a step's ratio depends on its row and action alone, so the sums are sufficient)."""
  ratio = jax.nn.softmax(v, axis=-1) / jax.nn.softmax(w_old, axis=-1)
  clipped = jnp.clip(ratio, 1.0 - clip, 1.0 + clip)
  return jnp.sum(s_pos * jnp.minimum(ratio, clipped) + s_neg * jnp.maximum(ratio, clipped))


def batch_gradient(config, probe, arm: str, w, roll, pu1_a=None):
  """[R, A]: the arm's policy-gradient estimate from one batch `roll`
  (`anatomy._keychain_rollout`'s tuple), the mean over its episodes: every arm but the
  vine (PPO: the gradient of its surrogate at the behaviour policy, where clipping is
  inactive); `pu1_a` [T, B, A] is cocoa_learned's model of P(U = 1 | o_t, a)."""
  row, action, reward = roll[0], roll[1], roll[2]
  b = reward.shape[1]
  if arm.startswith("ppo_"):
    _, critic, lam = arm.split("_")
    adv = _gae(roll, critic, float(lam))
  elif arm.startswith("cocoa_"):
    credit = _cocoa_credit(probe, w, roll, roll[5] if arm == "cocoa_exact" else pu1_a)
    pi = jax.nn.softmax(w, axis=-1)
    c_sum = _row_sum(probe, row, credit)
    g = _score_gradient(w, _aggregate(probe, row, action, reward))
    return (g + pi * (c_sum - jnp.sum(pi * c_sum, -1, keepdims=True))) / b
  else:
    adv = _advantage(arm, config, probe, roll, int(config.group_size))
  return _score_gradient(w, _aggregate(probe, row, action, adv)) / b


def make_update(config, probe, arm: str) -> Tuple[Callable, Callable]:
  """(init(w) -> state, update(state, key, lr) -> (state, env_steps [] int32)) of one
  lane: one update of `arm` on `probe`. state = (W [R, A], Adam state, aux)."""
  if arm not in ARMS:
    raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
  b, group = int(config.episodes), int(config.group_size)
  adam = optax.scale_by_adam()

  def init(w):
    aux = (jnp.zeros((probe.R, probe.A)), jnp.zeros((probe.R, probe.A)))   # cocoa counts
    return (w, adam.init(w), aux)

  def ascend(w, opt, g, lr):
    direction, opt = adam.update(g, opt, w)
    return w + lr * direction, opt

  def update(state, key, lr):
    w, opt, aux = state
    if arm == "vine":
      return _vine_update(config, probe, state, key, lr, ascend)
    k_roll, k_reset = jax.random.split(key)
    if arm in ("grpo", "rloo"):
      reset = jnp.repeat(jax.random.split(k_reset, b // group), group, axis=0)
    else:
      reset = jax.random.split(k_reset, b)
    roll = anatomy._keychain_rollout(probe, w, jax.random.split(k_roll, b), reset)  # noqa: SLF001
    row, action = roll[0], roll[1]
    steps = jnp.int32(row.size)
    if arm.startswith("ppo_"):
      _, critic, lam = arm.split("_")
      adv = _gae(roll, critic, float(lam))
      s_pos = _aggregate(probe, row, action, jnp.maximum(adv, 0.0)) / b
      s_neg = _aggregate(probe, row, action, jnp.minimum(adv, 0.0)) / b
      w_old = w

      def epoch(carry, _):
        v, o = carry
        g = jax.grad(ppo_surrogate)(v, w_old, s_pos, s_neg, float(config.ppo_clip))
        return ascend(v, o, g, lr), None
      (w, opt), _ = jax.lax.scan(epoch, (w, opt), None, length=int(config.ppo_epochs))
      return (w, opt, aux), steps
    pu1_a = None
    if arm == "cocoa_learned":
      ones, succ = aux
      model = jnp.where(ones > 1e-6, succ / jnp.where(ones > 1e-6, ones, 1.0),
                        (succ.sum(-1, keepdims=True) /
                         jnp.maximum(ones.sum(-1, keepdims=True), 1e-6)))
      pu1_a = model[row]
    g = batch_gradient(config, probe, arm, w, roll, pu1_a)
    w_new, opt = ascend(w, opt, g, lr)
    if arm == "cocoa_learned":
      u = jnp.broadcast_to(roll[-1].astype(jnp.float32)[None, :], row.shape)
      decay = float(config.cocoa_decay)
      aux = (decay * aux[0] + _aggregate(probe, row, action, jnp.ones_like(u)),
             decay * aux[1] + _aggregate(probe, row, action, u))
    return (w_new, opt, aux), steps

  return init, update


def _vine_update(config, probe, state, key, lr, ascend):
  w, opt, aux = state
  b, horizon = int(config.vine_trajectories), probe.horizon
  every = vine_every(config, horizon)
  policy = _table_policy(probe)
  k_traj, k_vine = jax.random.split(key)
  traj, states = rollout.collect_episodes(probe.env, probe.env_params, policy, w, k_traj, b,
                                          horizon, keep_states=True)
  values = vine_ppo.collect_vines(probe.env, probe.env_params, policy, w, k_vine, traj, states,
                              num_vines=int(config.vine_k), every=every)
  adv = vine_ppo.vine_advantages(traj.rewards, values.values, every=every,
                             terminated=traj.terminated, truncated=traj.truncated,
                             valid=traj.valid)
  row = tabular.joint_index(traj.obs, probe.groups)
  g = _score_gradient(w, _aggregate(probe, row, traj.actions, adv)) / b
  w, opt = ascend(w, opt, g, lr)
  steps = jnp.sum(traj.valid).astype(jnp.int32) + values.env_steps.astype(jnp.int32)
  return (w, opt, aux), steps


def make_program(config, probe, arm: str):
  """(init(n) -> states of n lanes, chunk(states, seeds [n], lrs [n], check) ->
  (states, env_steps [n], J [n])): `check_every` updates of every lane, vmapped, then
  each lane's exact J. Lane i's keys: fold_in(PRNGKey(seeds[i]), check * every + u)."""
  init, update = make_update(config, probe, arm)
  every = int(config.check_every)
  success = anatomy.success_of(probe)

  def lane(state, seed, lr, check):
    base = jax.random.PRNGKey(seed)

    def body(carry, u):
      state, steps = carry
      state, s = update(state, jax.random.fold_in(base, check * every + u), lr)
      return (state, steps + s), None
    (state, steps), _ = jax.lax.scan(body, (state, jnp.int32(0)), jnp.arange(every))
    return state, steps, success(state[0])

  chunk = jax.jit(jax.vmap(lane, in_axes=(0, 0, 0, None)))

  def init_lanes(n):
    w = jnp.zeros((n, probe.R, probe.A), jnp.float32)
    return jax.vmap(init)(w)
  return init_lanes, chunk


# ---------------------------------------------------------------------------- cells

def _save(path: str, obj: dict) -> None:
  with open(path + ".tmp", "w") as f:
    json.dump(obj, f)
  os.replace(path + ".tmp", path)


def _save_state(path: str, states) -> None:
  leaves = jax.tree.leaves(states)
  with open(path + ".tmp", "wb") as f:
    np.savez(f, *[np.asarray(x) for x in leaves])
  os.replace(path + ".tmp", path)


def _load_state(path: str, template):
  with np.load(path) as data:
    leaves = [jnp.asarray(data[f"arr_{i}"]) for i in range(len(data.files))]
  return jax.tree.unflatten(jax.tree.structure(template), leaves)


def run_cell(config, probe, arm: str, seeds: List[int], lrs: List[float],
             max_updates: int, path: str, log=print,
             stop_after_s: Optional[float] = None, program=None) -> dict:
  """Trains the lanes (seeds[i], lrs[i]) of `arm` on `probe` until every lane has exact J
  >= threshold or `max_updates`; returns (and saves at `path`) the cell record. A
  checkpoint (`path` + ".ckpt.json" / ".ckpt.npz") every `save_every_s` seconds lets a
  killed run resume where it was; `stop_after_s` (tests) stops after that many seconds
  of training, leaving only the checkpoint; `program` (`make_program`'s for this probe
  and arm) reuses a compiled program (same lane count: no recompilation)."""
  if len(seeds) != len(lrs):
    raise ValueError(f"seeds and lrs must be as long, got {len(seeds)} and {len(lrs)}")
  n, every = len(seeds), int(config.check_every)
  threshold = float(config.threshold)
  init_lanes, chunk = program or make_program(config, probe, arm)
  ckpt_json, ckpt_npz = path + ".ckpt.json", path + ".ckpt.npz"
  states = init_lanes(n)
  rec = {"family": probe.family, "horizon": probe.horizon, "arm": arm,
         "seeds": list(map(int, seeds)), "lrs": list(map(float, lrs)),
         "max_updates": int(max_updates), "check_every": every, "threshold": threshold,
         "steps_per_update": steps_per_update(config, arm, probe.horizon),
         "checks": [], "curve": [], "env_steps": [], "train_s": 0.0, "resumed": 0}
  if os.path.exists(ckpt_json) and os.path.exists(ckpt_npz):
    with open(ckpt_json) as f:
      saved = json.load(f)
    if saved["seeds"] == rec["seeds"] and saved["lrs"] == rec["lrs"]:
      rec = saved
      rec["resumed"] += 1
      states = _load_state(ckpt_npz, states)
  seeds_a = jnp.asarray(seeds, jnp.uint32)
  lrs_a = jnp.asarray(lrs, jnp.float32)
  steps = np.asarray(rec["env_steps"][-1] if rec["env_steps"] else np.zeros(n), np.int64)
  reached = (np.asarray(rec["curve"]) >= threshold).any(0) if rec["curve"] else np.zeros(n, bool)
  start, last_save = time.time(), time.time()
  train_s0 = float(rec["train_s"])
  while (len(rec["checks"]) * every < max_updates) and not reached.all():
    check = len(rec["checks"])
    tick = time.time()
    states, s, j = chunk(states, seeds_a, lrs_a, check)
    j = np.asarray(j, np.float64)
    if "first_chunk_s" not in rec:   # compilation (unless reused) and one chunk
      rec["first_chunk_s"] = time.time() - tick
    steps = steps + np.asarray(s, np.int64)
    rec["checks"].append((check + 1) * every)
    rec["curve"].append(j.tolist())
    rec["env_steps"].append(steps.tolist())
    reached |= j >= threshold
    rec["train_s"] = train_s0 + time.time() - start
    now = time.time()
    if now - last_save >= float(config.save_every_s) or reached.all():
      _save_state(ckpt_npz, states)
      _save(ckpt_json, rec)
      last_save = now
      log(f"horizon B {probe.name} {arm}: update {rec['checks'][-1]} | J median "
          f"{np.median(j):.3f} | {int(reached.sum())}/{n} at {threshold} | "
          f"{rec['train_s']:.0f}s")
    if stop_after_s is not None and now - start >= stop_after_s:
      _save_state(ckpt_npz, states)
      _save(ckpt_json, rec)
      return rec
  times, events = _first_times(rec, threshold)
  rec["times"], rec["events"] = times, events
  rec["steps_to"] = [float(rec["env_steps"][int(t) // every - 1][i]) if rec["checks"] else 0.0
                     for i, t in enumerate(times)]
  _save(path, rec)
  for p in (ckpt_json, ckpt_npz):
    if os.path.exists(p):
      os.remove(p)
  return rec


def _first_times(rec: dict, threshold: float) -> Tuple[List[float], List[bool]]:
  """Per lane, the first checked update with J >= threshold (True), else the last
  update run (False: censored)."""
  curve = np.asarray(rec["curve"], np.float64)         # [checks, n]
  checks = np.asarray(rec["checks"], np.float64)
  hit = curve >= threshold
  events = hit.any(0)
  first = np.where(events, hit.argmax(0), len(checks) - 1)
  return checks[first].tolist(), events.tolist()
