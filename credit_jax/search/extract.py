"""Best-trajectory extraction: track the best simulated episode, then replay it.

Among all simulated episodes (tree path + rollout) the search keeps the best by
(complete, total undiscounted reward): a complete episode (ended by the environment)
beats any incomplete one, then the larger total wins. Storing rollout actions would
cost O(max_depth) per simulation, so we keep the leaf node and the rollout key and re-run
that episode once at the end: the tree path's actions, then the rollout's, with the same
environment keys as the search (`credit_jax/search/model.py`). The returned
`Trajectory` is that replay, so its rewards are the truth.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
from jax import Array
import jax.numpy as jnp

from credit_jax.search.model import EnvModel, choose
from credit_jax.search.tree import SearchTree
from credit_jax.types import Trajectory


class BestEpisode(NamedTuple):
  node: Array         # [B] int32, tree leaf where the episode left the tree
  rollout_key: Array  # [B] key the rollout from that leaf used
  total: Array        # [B] float32, undiscounted reward of the episode
  complete: Array     # [B] bool, it ended by terminated or truncated


def no_episode(rollout_keys: Array) -> BestEpisode:
  """The initial record: node 0, total -inf, incomplete (any episode beats it)."""
  batch = rollout_keys.shape[0]
  return BestEpisode(jnp.zeros((batch,), jnp.int32), rollout_keys,
                     jnp.full((batch,), -jnp.inf), jnp.zeros((batch,), bool))


def keep_better(best: BestEpisode, candidate: BestEpisode, valid: Array) -> BestEpisode:
  """Per root, `candidate` where it is `valid` and beats `best`, else `best`."""
  better = valid & ((candidate.complete & ~best.complete) |
                    ((candidate.complete == best.complete) & (candidate.total > best.total)))

  def pick(new_v, old_v):  # raw uint32 keys have a trailing [2]
    return jnp.where(better.reshape(better.shape + (1,) * (new_v.ndim - 1)), new_v, old_v)
  return BestEpisode(*(pick(n, o) for n, o in zip(candidate, best)))


def path_actions(tree: SearchTree, node: Array, max_depth: int) -> Array:
  """Actions [max_depth] int32 on the path from the root to `node` of ONE tree.

  Entry t is the action at depth t for t < depth(node), 0 beyond.
  """
  num_slots = tree.num_slots

  def path_step(_, c):
    n, actions = c
    at = jnp.where(n > 0, tree.depth[n] - 1, max_depth)  # the root writes to a spare cell
    parent = jnp.maximum(tree.up[n, 0] // num_slots, 0)
    return parent, actions.at[at].set(tree.action[n])
  _, path = jax.lax.fori_loop(0, max_depth, path_step,
                              (node, jnp.zeros((max_depth + 1,), jnp.int32)))
  return path[:max_depth]  # the spare cell dropped


def replay_episode(model: EnvModel, params: Any, env_params: Any, tree: SearchTree,
                   env_key: Array, node: Array, rollout_key: Array, root_obs: Any) -> tuple:
  """ONE root's episode re-run: the tree path to `node`, then its rollout with `rollout_key`.

  Returns per-step arrays `[max_depth, ...]`: (obs, action, reward, terminated, truncated,
  log_prob, next_obs, valid, info); steps after the episode ended, or after the rollout's
  `rollout_depth` steps, are invalid with zero reward.
  """
  max_depth = model.max_depth
  path = path_actions(tree, node, max_depth)
  leaf_depth = tree.depth[node]

  def step(c, t):
    state, obs, ended = c
    masked = model.masked_logits(params, obs, state)
    roll_action = choose(masked, jax.random.fold_in(rollout_key, t - leaf_depth), model.greedy)
    action = jnp.where(t < leaf_depth, path[t], roll_action)
    valid = ~ended & (t < leaf_depth + model.rollout_depth)
    next_obs, next_state, reward, term, trunc, info = model.step(
        env_params, jax.random.fold_in(env_key, t), state, action)
    info = {**info, "terminated": term, "truncated": trunc, "final_observation": next_obs}
    out = (obs, action, jnp.where(valid, reward, 0.0), term & valid, trunc & valid,
           jax.nn.log_softmax(masked)[action], next_obs, valid, info)
    return (next_state, next_obs, ended | ~valid | term | trunc), out

  root_state = jax.tree.map(lambda x: x[0], tree.state)
  _, out = jax.lax.scan(step, (root_state, root_obs, jnp.bool_(False)),
                        jnp.arange(max_depth))
  return out


def best_trajectory(model: EnvModel, params: Any, env_params: Any, tree: SearchTree,
                    env_keys: Array, best: BestEpisode, root_obs: Any) -> Trajectory:
  """The time-major `Trajectory` [max_depth, B] of each root's best episode (a replay)."""
  def one(tree, env_key, node, rollout_key, obs):
    return replay_episode(model, params, env_params, tree, env_key, node, rollout_key, obs)
  out = jax.vmap(one)(tree, env_keys, best.node, best.rollout_key, root_obs)
  obs, actions, rewards, term, trunc, log_probs, final_obs, valid, info = jax.tree.map(
      lambda x: jnp.swapaxes(x, 0, 1), out)
  return Trajectory(obs=obs, actions=actions, rewards=rewards, terminated=term,
                    truncated=trunc, log_probs=log_probs, final_obs=final_obs, valid=valid,
                    extras={}, info=info)
