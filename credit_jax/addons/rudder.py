"""RUDDER as a hook: a return predictor trained online, its redistributed rewards in place
of the environment's (`shape_rewards`), so PPO's GAE or REINFORCE's returns read `r'`.

`config.rudder` (`add_config`): `enabled`; the predictor (`hidden_size`,
`encoder_sizes`, `with_reward`: the step's reward in its token); its training
(`lr`, a traced hparam `rudder.lr`; `aux_weight`, traced as `rudder.aux_weight`;
`train_steps` gradient steps per update on the update's episodes plus
`replay_episodes` drawn from the lessons buffer of `capacity` episodes).

Each update (`Rudder.step`): the predictor's error on the new episodes, before it trains
on them, is the accuracy metric; it then trains, the new episodes are offered to the
lessons buffer, and the trained predictor's redistribution of the new episodes
(`return_decomposition.redistribute`) becomes the rewards. Metrics (`rudder_` prefix):
`loss`, `pred_mse` (squared error of the final prediction on the fresh episodes),
`explained` (1 - pred_mse / variance of their returns), `buffer_mean_return`, and where
the environment marks its pivotal steps (`info["pivotal"]`), `pivotal_share` (the share of
|r'| on them) and `moved_pivotal_share` (the share of |r' - r|: of the reward that was
moved, how much went to them).

Rollouts: whole episodes (REINFORCE's, PPO's with rollout = "episodes"), or a
continuing window (PPO) that holds whole episodes of one fixed length (KeyChain's
horizon, a corridor's length) dividing `num_steps`; `validate` checks. GRPO refuses it:
its credit is each episode's score, which the redistribution keeps.
"""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Tuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from credit_jax import diagnostics, envs
from credit_jax.addons import hooks
from credit_jax.addons import return_decomposition as rd
from credit_jax.config import require
from credit_jax.nets.credit_models import ReturnPredictor

Array = jax.Array

__all__ = ["Columns", "Rudder", "RudderFeature", "add_config", "columns_of",
           "pivotal_shares"]

OWNS = ("rudder_params", "rudder_opt", "rudder_lessons")


def add_config(c: ml_collections.ConfigDict, **overrides) -> ml_collections.ConfigDict:
  """Adds an enabled `config.rudder` block to `c` (fields overridden by `overrides`)."""
  r = ml_collections.ConfigDict()
  r.enabled = True            # redistributed rewards replace the environment's
  r.hidden_size = 32          # the predictor's GRU width
  r.encoder_sizes = (32,)     # MLP layers before the GRU
  r.with_reward = True        # the step's reward is part of its token
  r.lr = 3e-3                 # the predictor's Adam step size (traced: rudder.lr)
  r.aux_weight = 0.5          # weight of the every-step prediction loss (traced)
  r.train_steps = 4           # predictor gradient steps per update
  r.replay_episodes = 32      # lessons-buffer episodes in each of those steps
  r.capacity = 128            # lessons-buffer episodes (half high, half low returns)
  for k, v in overrides.items():
    r[k] = v
  c.rudder = r
  return c


class Columns(NamedTuple):
  """One whole episode per column: what the predictor trains on and redistributes."""
  tokens: Array      # [T, N, D]
  rewards: Array     # [T, N]
  dones: Array       # [T, N] bool, the episode's last step
  valid: Array       # [T, N] bool
  complete: Array    # [N] bool, the episode ended inside the window
  ret: Array         # [N] its return
  pivotal: Any       # [T, N] bool oracle mask, or None


def columns_of(traj, num_actions: int, with_reward: bool, horizon: int = 0) -> Columns:
  """`Columns` of a `Trajectory [T, B]` of whole episodes (`horizon = 0`), or of a
  continuing window of fixed-length episodes of `horizon` steps (`[m T, B] -> [T, m B]`).
  Batch dims after the first are flattened (GRPO's `[T, tasks, K]`)."""
  flat = lambda x: jnp.reshape(x, np.shape(x)[:1] + (-1,) + tuple(np.shape(x)[
      np.ndim(traj.actions):]))
  obs, actions, rewards = flat(traj.obs), flat(traj.actions), flat(traj.rewards)
  dones, valid = flat(traj.dones), flat(traj.valid)
  pivotal = traj.info.get("pivotal") if isinstance(traj.info, dict) else None
  pivotal = None if pivotal is None else flat(pivotal)
  if horizon:
    obs, actions, rewards, dones, valid = (rd.whole_episodes(x, horizon) for x in (
        obs, actions, rewards, dones, valid))
    pivotal = None if pivotal is None else rd.whole_episodes(pivotal, horizon)
  dones = dones & valid
  tokens = rd.episode_tokens(obs, actions, rewards, num_actions, with_reward)
  return Columns(tokens=tokens, rewards=rewards, dones=dones, valid=valid,
                 complete=jnp.any(dones, axis=0),
                 ret=jnp.sum(jnp.where(valid, rewards, 0.0), axis=0), pivotal=pivotal)


class Rudder:
  """The predictor, its optimiser and the lessons buffer (module doc), as pure functions.

  `init(key) -> carry` ({`OWNS`}); `predict(params, tokens [T, N, D]) -> g [T, N]`;
  `step(carry, cols, lr, aux_weight, key, stamp) -> (r' [T, N], carry, metrics)`.
  """

  def __init__(self, cfg, num_actions: int, obs_size: int, horizon: int):
    self.cfg = cfg
    self.num_actions, self.horizon = int(num_actions), int(horizon)
    self.token_dim = int(obs_size) + self.num_actions + int(bool(cfg.with_reward))
    self.net = ReturnPredictor(hidden_size=int(cfg.hidden_size),
                               encoder_sizes=tuple(cfg.encoder_sizes))
    self.tx = optax.scale_by_adam()
    self.train_steps, self.replay = int(cfg.train_steps), int(cfg.replay_episodes)
    self.capacity = int(cfg.capacity)

  def init(self, key) -> Dict[str, Any]:
    tokens = jnp.zeros((self.horizon, 1, self.token_dim), jnp.float32)
    params = self.net.init(key, tokens, jnp.ones((self.horizon, 1), bool))
    return {"rudder_params": params, "rudder_opt": self.tx.init(params),
            "rudder_lessons": rd.lessons_init(self.horizon, self.token_dim, self.capacity)}

  def predict(self, params, tokens: Array) -> Array:
    starts = jnp.zeros(tokens.shape[:2], bool).at[0].set(True)
    return self.net.apply(params, tokens, starts)

  def loss(self, params, tokens, valid, ret, weight, aux_weight):
    """The predictor loss on episode columns (`return_decomposition.prediction_loss`)."""
    last = valid & ~jnp.concatenate([valid[1:], jnp.zeros_like(valid[:1])], axis=0)
    targets = jnp.broadcast_to(ret[None], valid.shape)
    return rd.prediction_loss(self.predict(params, tokens), targets, last, valid,
                              aux_weight, weight)

  def train(self, params, opt_state, cols: Columns, lessons, lr, aux_weight, key):
    """`train_steps` Adam steps on the new complete episodes plus `replay_episodes`
    from the lessons buffer, redrawn each step; returns (params, opt_state, last loss)."""
    grad_fn = jax.value_and_grad(self.loss)
    weight_new = cols.complete.astype(jnp.float32)

    def body(carry, k):
      params, opt_state = carry
      tok, val, ret, w = rd.lessons_sample(lessons, k, self.replay)
      batch = (jnp.concatenate([cols.tokens, tok], axis=1),
               jnp.concatenate([cols.valid, val], axis=1),
               jnp.concatenate([cols.ret, ret]), jnp.concatenate([weight_new, w]))
      loss, grads = grad_fn(params, *batch, aux_weight)
      grads = optax.clip_by_global_norm(1.0).update(grads, optax.EmptyState())[0]
      updates, opt_state = self.tx.update(grads, opt_state, params)
      params = jax.tree.map(lambda p, u: p - lr * u, params, updates)
      return (params, opt_state), loss

    (params, opt_state), losses = jax.lax.scan(
        body, (params, opt_state), jax.random.split(key, self.train_steps))
    return params, opt_state, losses[-1]

  def step(self, carry, cols: Columns, lr, aux_weight, key, stamp
           ) -> Tuple[Array, Dict[str, Any], Dict[str, Array]]:
    params, opt_state, lessons = (carry[k] for k in OWNS)
    n_done = jnp.maximum(jnp.sum(cols.complete), 1)
    last_g = jnp.sum(jnp.where(cols.dones, self.predict(params, cols.tokens), 0.0), 0)
    sq = jnp.where(cols.complete, jnp.square(last_g - cols.ret), 0.0)
    mse = jnp.sum(sq) / n_done
    mean_ret = jnp.sum(jnp.where(cols.complete, cols.ret, 0.0)) / n_done
    var = jnp.sum(jnp.where(cols.complete, jnp.square(cols.ret - mean_ret), 0.0)) / n_done
    params, opt_state, loss = self.train(params, opt_state, cols, lessons, lr,
                                         aux_weight, key)
    lessons = rd.lessons_add(lessons, cols.tokens, cols.valid, cols.ret, stamp,
                             offered=cols.complete)
    shaped = rd.redistribute(self.predict(params, cols.tokens), cols.rewards, cols.dones,
                             cols.valid)
    metrics = {"rudder_loss": loss, "rudder_pred_mse": mse,
               "rudder_explained": jnp.where(var > 0, 1.0 - mse / jnp.where(
                   var > 0, var, 1.0), 0.0),
               "rudder_buffer_mean_return": jnp.sum(jnp.where(
                   jnp.arange(self.capacity) < lessons.size, lessons.data["ret"], 0.0)) /
               jnp.maximum(lessons.size, 1)}
    if cols.pivotal is not None:
      metrics.update(pivotal_shares(shaped, cols))
    carry = {"rudder_params": params, "rudder_opt": opt_state, "rudder_lessons": lessons}
    return shaped, carry, metrics


def pivotal_shares(shaped: Array, cols: Columns) -> Dict[str, Array]:
  """`rudder_pivotal_share` and `rudder_moved_pivotal_share` (module doc) of `r' [T, N]`.

  Step 0's `r'` is the first prediction, which holds the return every episode expects
  before acting; its batch mean is no step's credit and is taken out of step 0 first
  (what remains is what the first action changed: a key-to-door's pivotal key step).
  """
  n = jnp.maximum(jnp.sum(cols.complete), 1)
  start = jnp.sum(jnp.where(cols.complete, shaped[0], 0.0)) / n
  centred = shaped.at[0].add(-start)
  moved = centred - jnp.where(cols.valid, cols.rewards, 0.0)
  return {"rudder_pivotal_share": diagnostics.credit_accuracy(centred, cols.pivotal,
                                                              cols.valid),
          "rudder_moved_pivotal_share": diagnostics.credit_accuracy(moved, cols.pivotal,
                                                                    cols.valid)}


def episode_length(config, recipe: hooks.Recipe) -> Tuple[int, int]:
  """(T the predictor's episodes last, horizon for `columns_of`: 0 for whole-episode
  rollouts) from the config; ValueError when a continuing window does not hold whole
  episodes of one length."""
  if recipe.rollout != hooks.CONTINUING:   # whole episodes: PPO's rollout is num_steps
    return int(config.get("horizon", None) or config.num_steps), 0
  env, env_params = envs.make(config.env_name, **dict(config.get("env_kwargs", {}) or {}))
  horizon = int(getattr(env, "horizon", 0) or 0)
  if not horizon or int(env_params.max_steps_in_episode) < horizon:
    raise ValueError(f"{config.env_name} has no fixed episode length (horizon)")
  if int(config.num_steps) % horizon:
    raise ValueError(f"num_steps = {config.num_steps} must be a multiple of the episode "
                     f"length {horizon}: the predictor reads whole episodes")
  return horizon, horizon


class RudderFeature(hooks.Feature):
  name = "rudder"
  field = "rudder.enabled"
  traced = ("lr", "aux_weight")

  def validate(self, config, recipe: hooks.Recipe) -> None:
    r = config.rudder
    require(recipe.rollout != hooks.GROUPS, "rudder.enabled",
            f"the {recipe.name} recipe credits each step with its episode's group-"
            f"normalised score, which a redistribution that keeps every return leaves "
            f"unchanged; use REINFORCE or PPO")
    for f in ("hidden_size", "train_steps", "replay_episodes"):
      require(int(r[f]) >= 1, f"rudder.{f}", f"must be >= 1, got {r[f]}")
    require(int(r.capacity) >= 2, "rudder.capacity", f"must be >= 2, got {r.capacity}")
    require(float(r.lr) > 0, "rudder.lr", f"must be > 0, got {r.lr}")
    require(float(r.aux_weight) >= 0, "rudder.aux_weight",
            f"must be >= 0, got {r.aux_weight}")
    require(int(config.get("history_window", 0) or 0) == 0, "history_window",
            "the predictor reads the observations as the environment gives them")
    try:
      episode_length(config, recipe)
    except ValueError as e:
      require(False, "num_steps", str(e))

  def bind(self, context: hooks.Context) -> hooks.Bound:
    return _RudderBound(context)


class _RudderBound(hooks.Bound):
  owns = OWNS
  init_key = True

  def __init__(self, context: hooks.Context):
    cfg = context.config.rudder
    env, params = context.env, context.env_params
    obs_size = int(np.prod(env.observation_space(params).shape))
    length, self.window_horizon = episode_length(context.config, context.recipe)
    self.rudder = Rudder(cfg, env.num_actions, obs_size, length)
    self.with_reward = bool(cfg.with_reward)

  def init(self, key):
    return self.rudder.init(key)

  def shape_rewards(self, carry, signal: hooks.Signal, traj, hp, key, update, params):
    del params
    cols = columns_of(traj._replace(rewards=signal.rewards), self.rudder.num_actions,
                      self.with_reward, self.window_horizon)
    shaped, carry, metrics = self.rudder.step(carry, cols, hp["rudder.lr"],
                                              hp["rudder.aux_weight"], key, update)
    if self.window_horizon:
      shaped = rd.window_of(shaped, signal.rewards.shape[0])
    return signal._replace(rewards=jnp.reshape(shaped, signal.rewards.shape)), carry, \
        metrics

