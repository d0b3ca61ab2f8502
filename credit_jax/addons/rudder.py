"""Return decomposition (RUDDER, Arjona-Medina et al., NeurIPS 2019, arXiv 1806.07857):
the return redistributed to the steps that changed its prediction.

A return predictor reads an episode step by step and predicts, after each step t, the
episode's return from the prefix `0..t`: `g_t`. The redistributed reward is

    r'_t = g_t - g_{t-1}   (g_{-1} = 0),   and at the episode's last step L also + (G - g_L),

so `sum_t r'_t = G` exactly, whatever the predictor (the correction; return equivalence:
the optimal policies do not change). A perfect predictor, `g_t = E[G | prefix_t]`, puts
the return on the steps that moved its expectation (the decisive step of a key-to-door
or a KeyChain) and nothing on steps that did not; its future redistributed reward has
expectation 0, so credit is immediate and short discounts lose nothing.

The returns-to-go of `r'` are `G - g_{t-1}`: REINFORCE on them is REINFORCE with the
prefix's prediction as a baseline (unbiased for any predictor; `g_{t-1}` is computed
before action t). Discounting them (or GAE with lambda < 1 over `r'`) trades that for
immediacy, as RUDDER intends.

Layout: time-major `[T, B]`, episodes delimited by `dones` (an episode ends at a step
where it terminated or was truncated); several may lie back to back in one column. A
segment that does not end inside the window gets no correction (its `r'` sums to its
last prediction) and is left out of the predictor's loss (its return is unknown).

Here, first the parts: the per-step tokens, the redistribution, the per-step episode
returns, the predictor's loss, and the **lessons buffer**: RUDDER's store of past episodes, half the
highest returns seen and half the lowest (ties: the newest), so that rare successes keep
teaching the predictor long after the batch that found them (`Lessons`, `lessons_add`,
`lessons_sample`). The predictor network is `credit_jax.nets.credit_models.
ReturnPredictor`; its training (`Rudder`) and the hook (`RudderFeature`) follow.

**The hook.** A return predictor trained online, its redistributed rewards in place
of the environment's (`shape_rewards`), so PPO's GAE or REINFORCE's returns read `r'`.

`config.rudder` (`add_config`): `enabled`; the predictor (`hidden_size`,
`encoder_sizes`, `with_reward`: the step's reward in its token); its training
(`lr`, a traced hparam `rudder.lr`; `aux_weight`, traced as `rudder.aux_weight`;
`train_steps` gradient steps per update on the update's episodes plus
`replay_episodes` drawn from the lessons buffer of `capacity` episodes).

Each update (`Rudder.step`): the predictor's error on the new episodes, before it trains
on them, is the accuracy metric; it then trains, the new episodes are offered to the
lessons buffer, and the trained predictor's redistribution of the new episodes
(`redistribute`) becomes the rewards. Metrics (`rudder_` prefix):
`loss`, `pred_mse` (squared error of the final prediction on the fresh episodes),
`explained` (1 - pred_mse / variance of their returns), `buffer_mean_return`, and where
the environment marks its pivotal steps (`info["pivotal"]`), `pivotal_share` (the share of
|r'| on them) and `moved_pivotal_share` (the share of |r' - r|: of the reward that was
moved, how much went to them).

Rollouts: whole episodes (REINFORCE's, PPO's with rollout = "episodes", GRPO's groups),
or a continuing window (PPO) that holds whole episodes of one fixed length (KeyChain's
horizon, a corridor's length) dividing `num_steps`; `validate` checks.

**In GRPO** (a `hooks.GROUPS` recipe) the redistribution alone would change nothing: GRPO
credits every step with its episode's group-normalised score, and `r'` keeps each score.
So there the hook also scores every step (`Signal.step_scores [T, N, K]`) by the
redistributed return-to-go `R'_t = sum_{s >= t} r'_s = G - g_{t-1}`, written as the score
minus the `r'` before t so that `R'_0` is the episode's score to the bit; GRPO normalises
them within each group at every step (`grpo.step_advantages`), so at t = 0 the advantage is
GRPO's and later steps compare what is left of each member's return once the predictor
has read its prefix. The trajectory `[T, N, K]` is read as `N K` episode columns and shaped
back. PRM shaping, which rewrites the scores, is refused beside it (`validate`).
"""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Tuple

import jax
from jax import Array
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from credit_jax import diagnostics, envs, replay, returns
from credit_jax.addons import hooks
# The learned-credit estimators share one check of their [T, B] inputs.
from credit_jax.addons.contributions import check_shape, check_time_batch
from credit_jax.config import require, require_range
from credit_jax.nets.credit_models import ReturnPredictor

__all__ = ["Columns", "Rudder", "RudderFeature", "add_config", "columns_of", "lessons_add",
           "lessons_init", "lessons_sample", "redistribute", "whole_episodes", "window_of"]


def _episode_starts(dones: Array) -> Array:
  """[T, B] bool: step t starts an episode (t = 0, or the step after a done)."""
  dones = jnp.asarray(dones, bool)
  return jnp.concatenate([jnp.ones_like(dones[:1]), dones[:-1]], axis=0)


def _segment_cumsum(x: Array, dones: Array) -> Array:
  """[T, B] running sums of `x [T, B]` restarted at each episode start (`dones [T, B]`
  marks each episode's last step): `C_t = x_t + C_{t-1}` inside an episode."""
  check_time_batch(x, dones)
  flip = lambda a: jnp.flip(a, axis=0)
  return flip(returns.discounted_returns(flip(x), 1.0,
                                         terminated=flip(_episode_starts(dones))))


def redistribute(predictions: Array, rewards: Array, dones: Array, valid: Array = None
                 ) -> Array:
  """[T, B] redistributed rewards `r'` (module doc) from predictions `g [T, B]`.

  Args:
    predictions: [T, B] float, `g_t` after each step (the predictor's output).
    rewards: [T, B] float, the episode's own rewards (their sum is the return G).
    dones: [T, B] bool, the last step of each episode (terminated or truncated).
    valid: optional [T, B] bool; invalid steps get r' = 0 and do not change g.
  Returns:
    [T, B] float: `g_t - g_{t-1}` (0 before an episode's first step), plus `C_t - g_t` at
    each episode's last step, C_t the episode's rewards so far; summed over an episode
    that ends in the window it is exactly that episode's return.
  """
  check_time_batch(rewards, dones, valid)
  check_shape("predictions", predictions, rewards.shape)
  mask = jnp.ones(rewards.shape, bool) if valid is None else jnp.asarray(valid, bool)
  dones = jnp.asarray(dones, bool) & mask
  g = jnp.where(mask, predictions, 0.0)
  rewards = jnp.where(mask, rewards, 0.0)
  prev = jnp.concatenate([jnp.zeros_like(g[:1]), g[:-1]], axis=0)
  prev = jnp.where(_episode_starts(dones), 0.0, prev)
  so_far = _segment_cumsum(rewards, dones)
  out = g - prev + jnp.where(dones, so_far - g, 0.0)
  return jnp.where(mask, out, 0.0)


def _prediction_loss(predictions: Array, targets: Array, dones: Array, complete: Array,
                    aux_weight: Any, weights: Array = None) -> Array:
  """[] RUDDER's predictor loss: the squared error of the prediction at each complete
  episode's last step, plus `aux_weight` times the squared error of every step's
  prediction of its episode's return (which pushes the prediction, and so the
  redistributed reward, to the earliest step that reveals the outcome).

  Args:
    predictions, targets: [T, B] float (`targets`: the return of the episode step t
      belongs to).
    dones, complete: [T, B] bool (`complete`: that episode ends inside the window).
    aux_weight: [] float >= 0.
    weights: optional [B] float per-column weights (e.g. 0 for empty buffer slots).
  Returns:
    [] float: (sum of last-step errors + aux_weight * sum of per-step errors / T) over
    the weighted columns' episodes, divided by their number of episodes.
  """
  check_shape("targets", targets, np.shape(predictions))
  check_time_batch(predictions, dones, complete)
  w = jnp.ones(predictions.shape[1:], jnp.float32) if weights is None else weights
  if tuple(np.shape(w)) != tuple(np.shape(predictions)[1:]):
    raise ValueError(f"weights must be [B] = {np.shape(predictions)[1:]}, got "
                     f"{np.shape(w)}")
  complete = jnp.asarray(complete, bool)
  err = jnp.where(complete, jnp.square(predictions - targets), 0.0) * w
  last = jnp.sum(jnp.where(jnp.asarray(dones, bool), err, 0.0))
  count = jnp.sum(jnp.where(jnp.asarray(dones, bool) & complete, 1.0, 0.0) * w)
  per_step = jnp.sum(err) / predictions.shape[0]
  return (last + aux_weight * per_step) / jnp.maximum(count, 1.0)


# ---------------------------------------------------------------------------------------
# Tokens: what the predictor reads at each step.


def _episode_tokens(obs: Array, actions: Array, rewards: Array, num_actions: int,
                   with_reward: bool = True) -> Array:
  """[T, B, D] tokens `[obs (flattened), one-hot(action), reward]` of each step.

  The reward is part of the token by default: where it varies beside the outcome (a
  key-to-door's apples) the predictor can only account for it by seeing it; the
  auxiliary loss keeps the prediction from waiting for the final reward.

  Args:
    obs: [T, B, ...] observations acted on; actions: [T, B] int; rewards: [T, B] float.
    num_actions: A (static).
  """
  if np.ndim(actions) != 2:
    raise ValueError(f"actions must be [T, B], got shape {np.shape(actions)}")
  check_shape("rewards", rewards, np.shape(actions))
  if tuple(np.shape(obs)[:2]) != tuple(np.shape(actions)):
    raise ValueError(f"obs must be [T, B, ...] with [T, B] = {np.shape(actions)}, got "
                     f"{np.shape(obs)}")
  flat = jnp.reshape(obs, np.shape(obs)[:2] + (-1,)).astype(jnp.float32)
  parts = [flat, jax.nn.one_hot(actions, int(num_actions), dtype=jnp.float32)]
  if with_reward:
    parts.append(rewards.astype(jnp.float32)[..., None])
  return jnp.concatenate(parts, axis=-1)


def window_of(x: Array, steps: int) -> Array:
  """The inverse of `whole_episodes`: `[T, m B, ...] -> [m T, B, ...]` for `steps = m T`."""
  horizon = np.shape(x)[0]
  if int(steps) % horizon:
    raise ValueError(f"steps = {steps} is not a multiple of the episode length {horizon}")
  m = int(steps) // horizon
  x = jnp.reshape(x, (horizon, m, -1) + tuple(np.shape(x)[2:]))
  return jnp.reshape(jnp.swapaxes(x, 0, 1), (int(steps), -1) + tuple(np.shape(x)[3:]))


def whole_episodes(x: Array, horizon: int) -> Array:
  """`[m T, B, ...] -> [T, m B, ...]`: a window of m fixed-length episodes per column
  (a continuing rollout whose episodes all last `horizon` steps and start with the
  window) as one episode per column, episode j of column b at column `j B + b`."""
  steps = np.shape(x)[0]
  if steps % int(horizon):
    raise ValueError(f"the window's {steps} steps are not whole episodes of {horizon}")
  m = steps // int(horizon)
  x = jnp.reshape(x, (m, int(horizon)) + tuple(np.shape(x)[1:]))
  return jnp.reshape(jnp.swapaxes(x, 0, 1), (int(horizon), -1) + tuple(np.shape(x)[3:]))


# ---------------------------------------------------------------------------------------
# The lessons buffer: whole episodes, one per slot (episode-major).


def lessons_init(horizon: int, token_dim: int, capacity: int) -> replay.ReplayState:
  """An empty lessons buffer of `capacity` episodes of `horizon` steps (`replay`'s ring,
  whose items are `{"tokens": [T, D], "valid": [T], "ret": [], "stamp": []}`; the
  filled slots are always the first `size`)."""
  if int(capacity) < 2:
    raise ValueError(f"capacity must be >= 2 (a high and a low half), got {capacity}")
  example = {"tokens": jnp.zeros((int(horizon), int(token_dim)), jnp.float32),
             "valid": jnp.zeros((int(horizon),), bool),
             "ret": jnp.zeros((), jnp.float32), "stamp": jnp.zeros((), jnp.int32)}
  return replay.init(example, int(capacity))


def lessons_add(buffer: replay.ReplayState, tokens: Array, valid: Array, ret: Array,
                stamp: Array, offered: Array = None) -> replay.ReplayState:
  """The buffer after offering it a batch of whole episodes.

  Of the stored and the offered episodes it keeps the `capacity // 2` highest returns
  and, of the others, the lowest, newest first among equal returns (`stamp`: the
  update's index, larger is newer).

  Args:
    buffer: from `lessons_init`.
    tokens: [T, N, D] tokens of N whole episodes (time-major, one per column).
    valid: [T, N] bool; ret: [N] float episode returns; stamp: [] int.
    offered: optional [N] bool, the episodes to offer (default all; e.g. those that
      ended inside the window).
  """
  cap = buffer.capacity
  t, n = np.shape(valid)
  if tuple(np.shape(tokens)[:2]) != (t, n) or np.shape(ret) != (n,):
    raise ValueError(f"lessons_add needs tokens [T, N, D], valid [T, N], ret [N]; got "
                     f"{np.shape(tokens)}, {np.shape(valid)}, {np.shape(ret)}")
  new = {"tokens": jnp.swapaxes(tokens, 0, 1).astype(jnp.float32),
         "valid": jnp.swapaxes(jnp.asarray(valid, bool), 0, 1),
         "ret": jnp.asarray(ret, jnp.float32),
         "stamp": jnp.full((n,), stamp, jnp.int32)}
  pool = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), buffer.data, new)
  offered = jnp.ones((n,), bool) if offered is None else jnp.asarray(offered, bool)
  exists = jnp.concatenate([jnp.arange(cap) < buffer.size, offered])
  big = jnp.float32(np.finfo(np.float32).max)
  high_key = jnp.where(exists, -pool["ret"], big)
  high = jnp.lexsort((-pool["stamp"], high_key))[:cap // 2]
  taken = jnp.zeros(exists.shape, bool).at[high].set(True)
  low_key = jnp.where(exists & ~taken, pool["ret"], big)
  low = jnp.lexsort((-pool["stamp"], low_key))[:cap - cap // 2]
  order = jnp.concatenate([high, low])
  keep = jnp.concatenate([exists[high], exists[low] & ~taken[low]])
  # Existing episodes first, so the filled slots are the first `size` (replay.sample).
  order = order[jnp.argsort(~keep, stable=True)]
  size = jnp.sum(keep).astype(jnp.int32)
  data = jax.tree.map(lambda x: x[order], pool)
  return replay.ReplayState(data=data, position=size % cap, size=size)


def lessons_sample(buffer: replay.ReplayState, key: Array, num: int
                   ) -> Tuple[Array, Array, Array, Array]:
  """`num` stored episodes, uniformly with replacement, time-major: (tokens [T, num, D],
  valid [T, num], ret [num], weight [num]: 1.0, or 0.0 for all when the buffer is empty).
  """
  items = replay.sample(buffer, key, int(num))
  weight = jnp.full((int(num),), jnp.where(buffer.size > 0, 1.0, 0.0), jnp.float32)
  return (jnp.swapaxes(items["tokens"], 0, 1), jnp.swapaxes(items["valid"], 0, 1),
          items["ret"], weight)


# ---------------------------------------------------------------- the predictor and the hook

_OWNS = ("rudder_params", "rudder_opt", "rudder_lessons")


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
    obs, actions, rewards, dones, valid = (whole_episodes(x, horizon) for x in (
        obs, actions, rewards, dones, valid))
    pivotal = None if pivotal is None else whole_episodes(pivotal, horizon)
  dones = dones & valid
  tokens = _episode_tokens(obs, actions, rewards, num_actions, with_reward)
  return Columns(tokens=tokens, rewards=rewards, dones=dones, valid=valid,
                 complete=jnp.any(dones, axis=0),
                 ret=jnp.sum(jnp.where(valid, rewards, 0.0), axis=0), pivotal=pivotal)


class Rudder:
  """The predictor, its optimiser and the lessons buffer (module doc), as pure functions.

  `init(key) -> carry` ({`_OWNS`}); `predict(params, tokens [T, N, D]) -> g [T, N]`;
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
            "rudder_lessons": lessons_init(self.horizon, self.token_dim, self.capacity)}

  def predict(self, params, tokens: Array) -> Array:
    starts = jnp.zeros(tokens.shape[:2], bool).at[0].set(True)
    return self.net.apply(params, tokens, starts)

  def loss(self, params, tokens, valid, ret, weight, aux_weight):
    """The predictor loss on episode columns (`_prediction_loss`)."""
    last = valid & ~jnp.concatenate([valid[1:], jnp.zeros_like(valid[:1])], axis=0)
    targets = jnp.broadcast_to(ret[None], valid.shape)
    return _prediction_loss(self.predict(params, tokens), targets, last, valid,
                              aux_weight, weight)

  def train(self, params, opt_state, cols: Columns, lessons, lr, aux_weight, key):
    """`train_steps` Adam steps on the new complete episodes plus `replay_episodes`
    from the lessons buffer, redrawn each step; returns (params, opt_state, last loss)."""
    grad_fn = jax.value_and_grad(self.loss)
    weight_new = cols.complete.astype(jnp.float32)

    def body(carry, k):
      params, opt_state = carry
      tok, val, ret, w = lessons_sample(lessons, k, self.replay)
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
    params, opt_state, lessons = (carry[k] for k in _OWNS)
    n_done = jnp.maximum(jnp.sum(cols.complete), 1)
    last_g = jnp.sum(jnp.where(cols.dones, self.predict(params, cols.tokens), 0.0), 0)
    sq = jnp.where(cols.complete, jnp.square(last_g - cols.ret), 0.0)
    mse = jnp.sum(sq) / n_done
    mean_ret = jnp.sum(jnp.where(cols.complete, cols.ret, 0.0)) / n_done
    var = jnp.sum(jnp.where(cols.complete, jnp.square(cols.ret - mean_ret), 0.0)) / n_done
    params, opt_state, loss = self.train(params, opt_state, cols, lessons, lr,
                                         aux_weight, key)
    lessons = lessons_add(lessons, cols.tokens, cols.valid, cols.ret, stamp,
                             offered=cols.complete)
    shaped = redistribute(self.predict(params, cols.tokens), cols.rewards, cols.dones,
                             cols.valid)
    metrics = {"rudder_loss": loss, "rudder_pred_mse": mse,
               "rudder_explained": jnp.where(var > 0, 1.0 - mse / jnp.where(
                   var > 0, var, 1.0), 0.0),
               "rudder_buffer_mean_return": jnp.sum(jnp.where(
                   jnp.arange(self.capacity) < lessons.size, lessons.data["ret"], 0.0)) /
               jnp.maximum(lessons.size, 1)}
    if cols.pivotal is not None:
      metrics.update(_pivotal_shares(shaped, cols))
    carry = {"rudder_params": params, "rudder_opt": opt_state, "rudder_lessons": lessons}
    return shaped, carry, metrics


def _pivotal_shares(shaped: Array, cols: Columns) -> Dict[str, Array]:
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
    prm = config.get("prm")
    prm_on = prm is not None and bool(prm.get("enabled", False))
    require(recipe.rollout != hooks.GROUPS or not prm_on,
            "rudder.enabled",
            f"in the {recipe.name} recipe RUDDER scores each step by its redistributed "
            f"return-to-go, which PRM shaping's rewritten episode scores (prm.enabled) "
            f"would contradict; turn one off")
    require_range(r, ("hidden_size", "train_steps", "replay_episodes"), 1,
                  prefix="rudder.")
    require_range(r, "capacity", 2, prefix="rudder.")
    require_range(r, "lr", 0.0, strict=True, prefix="rudder.")
    require_range(r, "aux_weight", 0.0, prefix="rudder.")
    require(int(config.get("history_window", 0) or 0) == 0, "history_window",
            "the predictor reads the observations as the environment gives them")
    try:
      episode_length(config, recipe)
    except ValueError as e:
      require(False, "num_steps", str(e))

  def bind(self, context: hooks.Context) -> hooks.Bound:
    return _RudderBound(context)


class _RudderBound(hooks.Bound):
  owns = _OWNS
  init_key = True

  def __init__(self, context: hooks.Context):
    cfg = context.config.rudder
    env, params = context.env, context.env_params
    obs_size = int(np.prod(env.observation_space(params).shape))
    length, self.window_horizon = episode_length(context.config, context.recipe)
    self.groups = context.recipe.rollout == hooks.GROUPS
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
      shaped = window_of(shaped, signal.rewards.shape[0])
    shaped = jnp.reshape(shaped, signal.rewards.shape)   # GRPO's [T, N K] -> [T, N, K]
    signal = signal._replace(rewards=shaped)
    if self.groups:   # each step's redistributed return-to-go (module doc)
      if signal.scores is None:
        raise ValueError("a GROUPS recipe hands RUDDER its episode scores (Signal.scores)")
      before = jnp.concatenate([jnp.zeros_like(shaped[:1]),   # sum_{s < t} r'_s
                                jnp.cumsum(shaped, axis=0)[:-1]])
      signal = signal._replace(step_scores=jnp.where(
          traj.valid, signal.scores[None] - before, 0.0))
    return signal, carry, metrics
