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

Here: the per-step tokens, the redistribution, the per-step episode returns, the
predictor's loss, and the **lessons buffer**: RUDDER's store of past episodes, half the
highest returns seen and half the lowest (ties: the newest), so that rare successes keep
teaching the predictor long after the batch that found them (`Lessons`, `lessons_add`,
`lessons_sample`). The predictor network is `credit_jax.nets.credit_models.
ReturnPredictor`; its training and the hook are `credit_jax/addons/rudder.py`.
"""
from __future__ import annotations

from typing import Any, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from credit_jax import replay, returns
from credit_jax.types import Trajectory

Array = jax.Array

__all__ = ["episode_returns", "episode_starts", "episode_tokens", "lessons_add",
           "lessons_init", "lessons_sample", "prediction_loss", "redistribute",
           "segment_cumsum", "trajectory_tokens", "whole_episodes", "window_of"]


def _check_tm(name: str, x: Any, shape: Tuple[int, ...]) -> None:
  if tuple(np.shape(x)) != tuple(shape):
    raise ValueError(f"{name} must be [T, B] = {tuple(shape)}, got {tuple(np.shape(x))}")


def _check_pair(rewards: Any, dones: Any, valid: Any = None) -> Tuple[int, ...]:
  if np.ndim(rewards) != 2:
    raise ValueError(f"rewards must be [T, B] (rank 2), got shape {np.shape(rewards)}")
  shape = tuple(np.shape(rewards))
  _check_tm("dones", dones, shape)
  if valid is not None:
    _check_tm("valid", valid, shape)
  return shape


def episode_starts(dones: Array) -> Array:
  """[T, B] bool: step t starts an episode (t = 0, or the step after a done)."""
  dones = jnp.asarray(dones, bool)
  return jnp.concatenate([jnp.ones_like(dones[:1]), dones[:-1]], axis=0)


def segment_cumsum(x: Array, dones: Array) -> Array:
  """[T, B] running sums of `x [T, B]` restarted at each episode start (`dones [T, B]`
  marks each episode's last step): `C_t = x_t + C_{t-1}` inside an episode."""
  _check_pair(x, dones)
  flip = lambda a: jnp.flip(a, axis=0)
  return flip(returns.discounted_returns(flip(x), 1.0,
                                         terminated=flip(episode_starts(dones))))


def episode_returns(rewards: Array, dones: Array, valid: Array = None
                    ) -> Tuple[Array, Array]:
  """Each step's episode return and whether that episode ends inside the window.

  Args:
    rewards: [T, B] float; dones: [T, B] bool (the episode's last step);
    valid: optional [T, B] bool (invalid steps count as reward 0 and never complete).
  Returns:
    (G [T, B]: the total reward of the episode step t belongs to, up to the window's end;
     complete [T, B] bool: that episode's last step lies inside the window).
  """
  _check_pair(rewards, dones, valid)
  mask = jnp.ones(rewards.shape, bool) if valid is None else jnp.asarray(valid, bool)
  dones = jnp.asarray(dones, bool) & mask
  rewards = jnp.where(mask, rewards, 0.0)
  ahead = returns.discounted_returns(rewards, 1.0, terminated=dones)   # t .. episode end
  total = segment_cumsum(rewards, dones) + ahead - rewards
  ends = returns.discounted_returns(dones.astype(jnp.float32), 1.0,
                                    terminated=dones) > 0
  return total, ends & mask


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
  _check_pair(rewards, dones, valid)
  _check_tm("predictions", predictions, rewards.shape)
  mask = jnp.ones(rewards.shape, bool) if valid is None else jnp.asarray(valid, bool)
  dones = jnp.asarray(dones, bool) & mask
  g = jnp.where(mask, predictions, 0.0)
  rewards = jnp.where(mask, rewards, 0.0)
  prev = jnp.concatenate([jnp.zeros_like(g[:1]), g[:-1]], axis=0)
  prev = jnp.where(episode_starts(dones), 0.0, prev)
  so_far = segment_cumsum(rewards, dones)
  out = g - prev + jnp.where(dones, so_far - g, 0.0)
  return jnp.where(mask, out, 0.0)


def prediction_loss(predictions: Array, targets: Array, dones: Array, complete: Array,
                    aux_weight: Any, weights: Array = None) -> Array:
  """[] RUDDER's predictor loss: the squared error of the prediction at each complete
  episode's last step, plus `aux_weight` times the squared error of every step's
  prediction of its episode's return (which pushes the prediction, and so the
  redistributed reward, to the earliest step that reveals the outcome).

  Args:
    predictions, targets: [T, B] float (`targets`: `episode_returns`' G).
    dones, complete: [T, B] bool (`complete`: `episode_returns`' second output).
    aux_weight: [] float >= 0.
    weights: optional [B] float per-column weights (e.g. 0 for empty buffer slots).
  Returns:
    [] float: (sum of last-step errors + aux_weight * sum of per-step errors / T) over
    the weighted columns' episodes, divided by their number of episodes.
  """
  _check_tm("targets", targets, np.shape(predictions))
  _check_pair(predictions, dones, complete)
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


def episode_tokens(obs: Array, actions: Array, rewards: Array, num_actions: int,
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
  _check_tm("rewards", rewards, np.shape(actions))
  if tuple(np.shape(obs)[:2]) != tuple(np.shape(actions)):
    raise ValueError(f"obs must be [T, B, ...] with [T, B] = {np.shape(actions)}, got "
                     f"{np.shape(obs)}")
  flat = jnp.reshape(obs, np.shape(obs)[:2] + (-1,)).astype(jnp.float32)
  parts = [flat, jax.nn.one_hot(actions, int(num_actions), dtype=jnp.float32)]
  if with_reward:
    parts.append(rewards.astype(jnp.float32)[..., None])
  return jnp.concatenate(parts, axis=-1)


def trajectory_tokens(traj: Trajectory, num_actions: int, with_reward: bool = True
                      ) -> Array:
  """`episode_tokens` of a `Trajectory [T, B]`."""
  return episode_tokens(traj.obs, traj.actions, traj.rewards, num_actions, with_reward)


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
