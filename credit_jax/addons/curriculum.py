"""Horizon curricula: train on short episodes first, as a recipe option (`config.curriculum`).

The lecture's brute-force answer to long horizons: do not give the model a long-horizon
problem; train on T = 20, then 50, 100, ... up to the target. Three ways to pick the
episode length of each update, all inside compiled training:

  * "fixed":  a schedule, `stage_updates[i]` updates at `stages[i]` (the last value runs
              to the end of training);
  * "gated":  success-gated promotion: stay at `stages[stage]` until the mean success of
              the last `window` updates at that stage is >= `threshold`, then move on;
  * "plr":    a prioritised sampler over `stages` (PLR-style, arXiv 2010.03934): each
              update draws a value with probability proportional to its learnability
              `p (1 - p)` (p: a running estimate of the success rate at that value,
              starting at the optimistic 0.5) raised to `1 / plr_temperature`, mixed with a
              uniform draw of weight `plr_explore`.

How one compile serves every stage: the rollout always has the static length
`config.horizon` (the longest episode), and the episode length is a **traced env param**
(`config.curriculum.param`): KeyToDoor-v0's `distractor_length`, or `horizon` of
`VariableHorizonKeyChain` (KeyChain with its episode length in the params, which
`make_env` substitutes for KeyChain-v0). Shorter episodes terminate early; the rollout's
`valid` mask drops the rest, and the recipe reports the steps actually taken as
`env_steps`. So a schedule of any number of stages costs exactly **one compile**; the
price is that each update computes the padded rollout (wall time per update does not
shrink with the stage, env steps do). The method itself (kind, stage values, schedule,
threshold) is traced too (`Curriculum.carry`), so different methods with the same number
of stages share that one compile and can be vmapped side by side.

Each seed runs its own curriculum (the state rides in `TrainState.aux["curriculum"]`),
so seeds vmapped side by side promote at their own times. Per-update metrics:
`curriculum_stage` (index into `stages`) and `curriculum_value` (the episode-length param
used).
"""
from __future__ import annotations

import dataclasses
from typing import Dict

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import struct

from credit_jax import envs
from credit_jax.config import ConfigError, require, require_one_of, require_range
from credit_jax.addons import hooks
from credit_jax.envs import base, keychain

KINDS = ("none", "fixed", "gated", "plr")
_SCORES = ("learnability", "value_loss", "positive_value_loss")


def add_config(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Adds `c.curriculum` (off by default) to a recipe config; returns `c`."""
  cc = ml_collections.ConfigDict()
  cc.kind = "none"          # none | fixed | gated | plr (see credit_jax/addons/curriculum.py)
  cc.param = "horizon"      # env params field set per update (KeyChain: horizon; KeyToDoor: distractor_length)
  cc.stages = (10, 25, 50)  # its stage values, easiest first; the last is the target
  cc.stage_updates = (20, 20)  # fixed: updates at each value but the last (which runs to the end)
  cc.threshold = 0.9        # gated: promote when the mean success of the last `window` updates >= this
  cc.window = 3             # gated: updates the promotion rule averages
  cc.plr_temperature = 0.3  # plr: P(value) ∝ (p (1 - p))^(1 / temperature)
  cc.plr_explore = 0.1      # plr: weight of a uniform draw mixed in
  cc.plr_ema = 0.3          # plr: step size of each value's running score estimates
  cc.plr_score = "learnability"  # plr: learnability (success p(1-p)) | value_loss | positive_value_loss (PPO)
  c.curriculum = cc
  return c


def enabled(config) -> bool:
  cc = config.get("curriculum")
  return cc is not None and cc.kind != "none"


def validate(config, critic: bool = False) -> None:
  """Raises `ConfigError` naming the first `curriculum.*` field that cannot run.

  `critic`: the recipe learns a value function (PPO), which the value-loss PLR scores
  need."""
  if not enabled(config):
    if config.get("curriculum") is not None:
      require_one_of(config.curriculum.kind, "curriculum.kind", KINDS)
    return
  cc, req = config.curriculum, require
  from credit_jax import episodes
  req(episodes.has_success(config), "curriculum.kind",
      f"a curriculum is gated and scored by success; {config.env_name} has none")
  require_one_of(cc.kind, "curriculum.kind", KINDS)
  values = tuple(cc.stages)
  req(len(values) >= 1, "curriculum.stages", "needs at least one value")
  if cc.kind == "fixed":
    req(len(tuple(cc.stage_updates)) == len(values) - 1, "curriculum.stage_updates",
        f"needs one entry per value but the last ({len(values) - 1}), got "
        f"{tuple(cc.stage_updates)}")
    req(all(int(u) >= 0 for u in cc.stage_updates), "curriculum.stage_updates",
        "must be >= 0")
  require_range(cc, "threshold", 0.0, 1.0, prefix="curriculum.")
  require_range(cc, "window", 1, prefix="curriculum.")
  req(cc.plr_temperature > 0.0, "curriculum.plr_temperature", "must be > 0")
  req(0.0 <= cc.plr_explore <= 1.0, "curriculum.plr_explore", "must lie in [0, 1]")
  req(0.0 < cc.plr_ema <= 1.0, "curriculum.plr_ema", "must lie in (0, 1]")
  score = str(cc.get("plr_score", "learnability"))
  require_one_of(score, "curriculum.plr_score", _SCORES)
  req(score == "learnability" or critic, "curriculum.plr_score",
      f"{score!r} scores a level by its value loss and needs a critic (use PPO), "
      f"this recipe has none; use 'learnability'")
  try:
    _, params = make_env(config)
  except ValueError as e:
    raise ConfigError(f"config.curriculum.param: {e}") from e
  field = cc.param
  for v in values:
    try:
      base.check_param_range(field, v, 0)
      if field == "horizon":
        base.check_param_range(field, v, 1, config.get("horizon", params.horizon))
      if field == "distractor_length":
        base.check_param_range(field, v, 0, params.distractor_length)
    except ValueError as e:
      raise ConfigError(f"config.curriculum.stages: {e}") from e


def _validate_ppo(config) -> None:
  """`validate` for PPO's hook: a critic (value-loss scores allowed), MLP networks, and
  the episode length `horizon` as the param (PPO's episodes continue across updates, so
  the param must be fixed when an episode starts, as VariableHorizonKeyChain's horizon
  is; PPO's success is a positive return, which KeyToDoor's apples would fake)."""
  if not enabled(config):
    return validate(config, critic=True)
  req = require
  req(str(config.network.get("kind", "mlp")) == "mlp", "network.kind",
      "PPO runs a curriculum with network.kind='mlp' only")
  req(config.curriculum.param == "horizon", "curriculum.param",
      f"PPO's curriculum varies the episode length 'horizon' (KeyChain-v0), got "
      f"{config.curriculum.param!r}")
  validate(config, critic=True)


# ---------------------------------------------------------------------------- the rules

def fixed_stage(update: jax.Array, stage_updates) -> jax.Array:
  """[] int32: the stage of update index `update` under a fixed schedule.

  `stage_updates: [S-1]` updates spent at each stage but the last (may be traced).
  """
  ends = jnp.cumsum(jnp.asarray(stage_updates, jnp.int32).reshape(-1))
  return jnp.sum(jnp.asarray(update, jnp.int32) >= ends).astype(jnp.int32)


def gate_step(stage, buf, count, success, *, threshold: float, num_stages: int):
  """One update of the success-gated promotion rule.

  Args:
    stage: [] int32 current stage; buf: [W] float32 the last W successes at this stage
      (a ring); count: [] int32 updates done at this stage; success: [] float32 this
      update's success rate at the current stage.
  Returns:
    (stage, buf, count) after the update: promoted (next stage, empty buffer) when at
    least W updates were done at this stage, their mean success is >= threshold and a
    next stage exists.
  """
  window = buf.shape[0]
  buf = buf.at[count % window].set(jnp.asarray(success, jnp.float32))
  count = count + 1
  promote = ((count >= window) & (jnp.mean(buf) >= threshold)
             & (stage < num_stages - 1))
  stage = jnp.where(promote, stage + 1, stage).astype(jnp.int32)
  buf = jnp.where(promote, jnp.zeros_like(buf), buf)
  count = jnp.where(promote, 0, count).astype(jnp.int32)
  return stage, buf, count


def learnability(p: jax.Array) -> jax.Array:
  """p (1 - p): highest for values solved half the time, 0 for never or always solved."""
  return p * (1.0 - p)


def plr_probs(p_est: jax.Array, temperature: float, explore: float) -> jax.Array:
  """[S] sampling probabilities from `p_est: [S]` running success estimates."""
  w = (learnability(p_est) + 1e-6) ** (1.0 / temperature)
  return (1.0 - explore) * w / jnp.sum(w) + explore / p_est.shape[0]


def score_probs(scores: jax.Array, visited: jax.Array, temperature: float,
                explore: float) -> jax.Array:
  """[S] sampling probabilities from value-loss scores `scores: [S]` (>= 0).

  PLR's value-loss prioritisation: weights `(s / max s)^(1 / temperature)` (scale-free),
  a value never visited gets the largest weight (it is tried first), mixed with a
  uniform draw of weight `explore`. `visited: [S]` bool.
  """
  top = jnp.max(jnp.where(visited, scores, 0.0))
  rel = jnp.where(visited, scores / jnp.maximum(top, 1e-12), 1.0)
  rel = jnp.where(top > 0, rel, 1.0)    # nothing scored yet: uniform
  w = (rel + 1e-6) ** (1.0 / temperature)
  return (1.0 - explore) * w / jnp.sum(w) + explore / scores.shape[0]


def value_loss_score(advantages: jax.Array, kind: str) -> jax.Array:
  """[] PLR's level score from the GAE advantages `advantages: [T, B]` of a rollout at
  that level: "value_loss" the mean |A| (L1 value loss), "positive_value_loss" the mean
  max(A, 0) (arXiv 2010.03934, eq. 3, averaged over every step of the rollout)."""
  a = jnp.asarray(advantages, jnp.float32)
  if a.ndim != 2:
    raise ValueError(f"advantages must be [T, B], got shape {a.shape}")
  if kind == "value_loss":
    return jnp.mean(jnp.abs(a))
  if kind == "positive_value_loss":
    return jnp.mean(jnp.maximum(a, 0.0))
  raise ValueError(f"kind must be value_loss or positive_value_loss, got {kind!r}")


def plr_observe(p_est: jax.Array, idx: jax.Array, success: jax.Array, ema: float):
  """`p_est` with entry `idx` moved a step `ema` towards this update's `success`."""
  return p_est.at[idx].set((1.0 - ema) * p_est[idx] + ema * success)


# ---------------------------------------------------------------- the recipe-side object

class Curriculum:
  """The per-seed curriculum state machine a recipe calls once per update.

  Everything a method is made of (kind, stage values, fixed schedule, threshold) lives
  in the traced carry, so runs of different methods with the same number of stages are
  one compiled program and can be vmapped side by side (`carry(...)` builds one).
  """

  def __init__(self, config, env_params):
    cc = config.curriculum
    self.param = str(cc.param)
    self.dtype = jnp.asarray(getattr(env_params, self.param)).dtype
    self.num_stages = len(tuple(cc.stages))
    self.window = int(cc.window)
    self.temperature, self.explore = float(cc.plr_temperature), float(cc.plr_explore)
    self.ema = float(cc.plr_ema)
    self.score = str(cc.get("plr_score", "learnability"))
    self._default = (str(cc.kind), tuple(cc.stages), tuple(cc.stage_updates),
                     float(cc.threshold))

  def carry(self, kind: str, stages, stage_updates=(), threshold: float = 0.9
            ) -> Dict[str, jax.Array]:
    """A fresh carry for method `kind` over `stages` ([S] values, S as configured)."""
    if kind not in KINDS[1:] or len(tuple(stages)) != self.num_stages:
      raise ValueError(f"kind must be one of {KINDS[1:]} and stages have "
                       f"{self.num_stages} values; got {kind!r}, {tuple(stages)}")
    ups = np.zeros((max(self.num_stages - 1, 0),), np.int32)
    if kind == "fixed":   # (validated to have S-1 entries; other kinds ignore it)
      given = tuple(stage_updates)[:ups.size]
      ups[:len(given)] = given
    return {"kind": jnp.int32(KINDS.index(kind)),
            "values": jnp.asarray(np.asarray(tuple(stages)), self.dtype),
            "stage_updates": jnp.asarray(ups), "threshold": jnp.float32(threshold),
            "stage": jnp.zeros((), jnp.int32),
            "gate_buf": jnp.zeros((self.window,), jnp.float32),
            "gate_count": jnp.zeros((), jnp.int32),
            "p_est": jnp.full((self.num_stages,), 0.5, jnp.float32),
            "score_est": jnp.zeros((self.num_stages,), jnp.float32),
            "visited": jnp.zeros((self.num_stages,), bool)}

  def init(self) -> Dict[str, jax.Array]:
    """The configured method's carry for `TrainState.aux["curriculum"]`."""
    return self.carry(*self._default)

  def select(self, carry, update: jax.Array, key: jax.Array) -> jax.Array:
    """[] int32: the stage index this update trains on."""
    fixed = jnp.minimum(fixed_stage(update, carry["stage_updates"]), self.num_stages - 1)
    if self.score == "learnability":
      probs = plr_probs(carry["p_est"], self.temperature, self.explore)
    else:
      probs = score_probs(carry["score_est"], carry["visited"], self.temperature,
                          self.explore)
    plr = jax.random.categorical(key, jnp.log(probs)).astype(jnp.int32)
    kind = carry["kind"]
    return jnp.where(kind == 1, fixed, jnp.where(kind == 2, carry["stage"], plr))

  def env_params(self, carry, env_params, idx: jax.Array):
    return env_params.replace(**{self.param: carry["values"][idx]})

  def observe(self, carry, idx: jax.Array, success: jax.Array, score=None):
    """The carry after an update at stage `idx` whose episodes succeeded at `success`
    (the gate moves only for the gated kind; the success estimates always). `score`:
    [] this update's value-loss score (`value_loss_score`), needed when `plr_score` is
    not "learnability"."""
    carry = dict(carry)
    gated = carry["kind"] == 2
    new = gate_step(carry["stage"], carry["gate_buf"], carry["gate_count"], success,
                    threshold=carry["threshold"], num_stages=self.num_stages)
    for name, value in zip(("stage", "gate_buf", "gate_count"), new):
      carry[name] = jnp.where(gated, value, carry[name])
    carry["p_est"] = plr_observe(carry["p_est"], idx, success, self.ema)
    if self.score != "learnability":
      if score is None:
        raise ValueError(f"plr_score={self.score!r} needs this update's score")
      first = jnp.logical_not(carry["visited"][idx])   # first visit: take it as is
      est = plr_observe(carry["score_est"], idx, score, self.ema)
      carry["score_est"] = jnp.where(first, carry["score_est"].at[idx].set(score), est)
      carry["visited"] = carry["visited"].at[idx].set(True)
    return carry

  def metrics(self, carry, idx: jax.Array) -> Dict[str, jax.Array]:
    return {"curriculum_stage": idx.astype(jnp.float32),
            "curriculum_value": carry["values"][idx].astype(jnp.float32)}


def episode_success(traj, returns: jax.Array) -> jax.Array:
  """[...] bool per episode: `info["success"]` at a valid step when the env reports it
  (KeyToDoor: apples make the return no guide), else `returns > 0`.

  Args:
    traj: a Trajectory with `valid: [T, ...]`; returns: [...] episode returns.
  """
  succ = traj.info.get("success") if isinstance(traj.info, dict) else None
  if succ is None:
    return returns > 0
  return jnp.any(jnp.logical_and(succ, traj.valid), axis=0)


# ------------------------------------------------- KeyChain with a traced episode length

@struct.dataclass
class VariableKeyChainState(keychain.KeyChainState):
  episode_horizon: jax.Array = 0   # [] int32 this episode's length (params.horizon at reset)


@struct.dataclass
class VariableKeyChainParams(keychain.KeyChainParams):
  horizon: int = 100   # episode length T (traced), in [cue_delay + k, the static horizon]


class VariableHorizonKeyChain(keychain.KeyChain):
  """KeyChain-v0 whose episode length is `params.horizon` (traced, <= the static
  `horizon`, which fixes the longest rollout). For a given T its episodes are
  distributed as KeyChain-v0's with `horizon=T` (same draws from the same key)."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    if not self._packed_draws:
      raise ValueError(f"horizon={self.horizon} is too long for a variable horizon "
                       f"(segments must be <= 2**16 steps)")

  @property
  def default_params(self) -> VariableKeyChainParams:
    return VariableKeyChainParams(max_steps_in_episode=self.horizon, horizon=self.horizon)

  def validate_params(self, params) -> None:
    super().validate_params(params)
    base.check_param_range("horizon", params.horizon, self.cue_delay + self.num_pivotal,
                           self.horizon)

  def reset_env(self, key, params):
    k = self.num_pivotal
    horizon = jnp.asarray(params.horizon, jnp.int32)
    edges = self.cue_delay + (jnp.arange(k + 1, dtype=jnp.int32)
                              * (horizon - self.cue_delay)) // k
    seg_start, seg_len = edges[:-1], (edges[1:] - edges[:-1]).astype(jnp.uint32)
    words = jax.random.bits(key, (k,), jnp.uint32)
    low, high = words & 0xFFFF, words >> 16
    cues = (low % self._num_actions).astype(jnp.int32)
    if self.positions == "fixed":
      positions = seg_start + (seg_len // 2).astype(jnp.int32)
    else:
      positions = seg_start + ((high * seg_len) >> 16).astype(jnp.int32)
    state = VariableKeyChainState(positions=positions, cues=cues,
                                  all_correct=jnp.array(True),
                                  time=jnp.zeros((), jnp.int32), episode_horizon=horizon)
    return self.get_obs(state), state

  def is_terminated(self, state, params) -> jax.Array:
    return state.time >= state.episode_horizon

  def get_obs(self, state, params=None, key=None) -> jax.Array:
    obs = super().get_obs(state, params, key)
    return obs.at[-1].set(state.time.astype(jnp.float32)
                          / state.episode_horizon.astype(jnp.float32))


def make_env(config):
  """`(env, env_params)` as `algos.train.make_env`, with KeyChain-v0 made a
  `VariableHorizonKeyChain` when the curriculum varies `horizon`; raises ValueError when
  the env's params have no field `config.curriculum.param`."""
  kwargs = dict(config.get("env_kwargs", {}) or {})
  env, params = envs.make(config.env_name, **kwargs)
  param = config.curriculum.param
  if param == "horizon" and isinstance(env, keychain.KeyChain):
    static = {k: v for k, v in kwargs.items() if k != "max_steps_in_episode"}
    env = VariableHorizonKeyChain(**static)
    params = env.default_params.replace(max_steps_in_episode=params.max_steps_in_episode)
  names = [f.name for f in dataclasses.fields(params)]
  if param not in names:
    raise ValueError(f"{config.env_name} params have no field {param!r}; fields: "
                     f"{', '.join(names)}")
  window = int(config.get("history_window", 0) or 0)
  if window > 0:
    env = envs.HistoryWrapper(env, window)
  return env, params


# ------------------------------------------------------------------------------ the hook

class CurriculumFeature(hooks.Feature):
  """The curriculum as a hook (`credit_jax/addons/hooks.py`): it replaces the environment
  with one whose episode length is a param (`make_env`), sets that param per update
  (slot `env_params`; PPO's first episodes start at stage 0 via `initial_env_params`) and
  moves its state machine after the update (slot `observe`), adding `curriculum_stage`
  and `curriculum_value` to the metrics. Its steps vary with the stage, so a recipe that
  runs it reports the steps actually taken as `env_steps` (`Bound.counts_steps`)."""
  name = "curriculum"
  field = "curriculum.kind"

  def enabled(self, config) -> bool:
    return enabled(config)

  def validate(self, config, recipe: hooks.Recipe) -> None:
    if recipe.rollout == hooks.CONTINUING:
      _validate_ppo(config)
    else:
      validate(config, critic=recipe.critic)

  def wrap_env(self, config, env, env_params):
    del env, env_params
    return make_env(config)

  def bind(self, context: hooks.Context) -> hooks.Bound:
    return _CurriculumBound(Curriculum(context.config, context.env_params),
                            context.recipe.rollout == hooks.CONTINUING)


class _CurriculumBound(hooks.Bound):
  owns = ("curriculum",)
  counts_steps = True

  def __init__(self, cur: Curriculum, continuing: bool):
    self.cur, self.continuing = cur, continuing

  def init(self, key):
    del key
    return {"curriculum": self.cur.init()}

  def initial_env_params(self, carry, env_params):
    return self.cur.env_params(carry["curriculum"], env_params, 0)

  def env_params(self, carry, env_params, update, key):
    stage = self.cur.select(carry["curriculum"], update, key)
    return self.cur.env_params(carry["curriculum"], env_params, stage), stage

  def observe(self, carry, note, outcome: hooks.Outcome, metrics):
    del metrics
    score = None
    if self.continuing and self.cur.score != "learnability":   # PPO's value-loss scores
      score = value_loss_score(outcome.advantages, self.cur.score)
    new = self.cur.observe(carry["curriculum"], note, outcome.success, score)
    return {"curriculum": new}, self.cur.metrics(new, note)
