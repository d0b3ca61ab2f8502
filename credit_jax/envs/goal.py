"""The goal-environment interface that makes hindsight relabeling generic.

A goal environment (BitFlip-v0, GoalGrid-v0, TextEdit-v0) keeps its goal in the state,
shows it as the trailing `goal_obs_size` entries of its flat float32 observation, and
declares how success is verified. Relabeling code then needs nothing env-specific:

  * `achieved_goal(state) -> [*goal_shape] int32`: what the agent has achieved so far;
    also returned by every step as `info["achieved_goal"]` (state after the step, before
    any auto-reset), so a Trajectory alone suffices to relabel.
  * `desired_goal(state) -> [*goal_shape] int32`: the episode's goal.
  * `goal_reward(achieved, goal) -> [...] float32`: 1.0 where they match, else 0.0.
  * `info["goal_checked"]`: bool, True on the steps where the environment compares the
    achieved goal with its goal (every step for BitFlip/GoalGrid, submit steps for
    TextEdit). The env's own reward is exactly
    `goal_checked * goal_reward(achieved_goal, desired_goal)`, so a relabeled reward is
    `goal_checked * goal_reward(info["achieved_goal"], new_goal)`.
  * `obs_with_goal(obs, goal) -> obs`: the same observation with the goal replaced.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp


class GoalEnvMixin:
  """Goal API shared by the goal environments; subclasses set the goal layout.

  Subclasses define `goal_shape` (tuple), `goal_obs_size` (int), `encode_goal(goal)`
  and keep the goal in `state.goal` and what is achieved via `achieved_goal(state)`.
  """

  goal_shape: Tuple[int, ...]
  goal_obs_size: int

  def achieved_goal(self, state) -> jax.Array:
    """[*goal_shape] int32: the goal the state has achieved (unbatched state)."""
    raise NotImplementedError

  def desired_goal(self, state) -> jax.Array:
    """[*goal_shape] int32: the goal of the episode (unbatched state)."""
    return state.goal

  def encode_goal(self, goal: jax.Array) -> jax.Array:
    """goal: [..., *goal_shape] int -> [..., goal_obs_size] float32 observation part."""
    raise NotImplementedError

  def goal_reward(self, achieved: jax.Array, goal: jax.Array) -> jax.Array:
    """1.0 where `achieved` equals `goal` on every goal entry, else 0.0.

    Args:
      achieved: [..., *goal_shape] integer goals.
      goal: [..., *goal_shape] integer goals (broadcastable with `achieved`).
    Returns:
      [...] float32.
    """
    achieved = jnp.asarray(achieved)
    goal = jnp.asarray(goal)
    rank = len(self.goal_shape)
    for name, x in (("achieved", achieved), ("goal", goal)):
      if x.ndim < rank or tuple(x.shape[x.ndim - rank:]) != tuple(self.goal_shape):
        raise ValueError(f"{name} must end in goal shape {self.goal_shape}, "
                         f"got shape {x.shape}")
    axes = tuple(range(-rank, 0))
    return jnp.all(achieved == goal, axis=axes).astype(jnp.float32)

  def reach_goal_outcome(self, state, params) -> Tuple[
      jax.Array, Any, jax.Array, jax.Array, Dict[str, jax.Array]]:
    """`step_env`'s return for envs that check the goal every step and end on it.

    `state` is the state after the transition; the reward is 1.0 exactly when the
    episode terminates by reaching the goal.
    """
    terminated = self.is_terminated(state, params)
    info = {"achieved_goal": self.achieved_goal(state), "goal_checked": jnp.array(True)}
    return (self.get_obs(state), state, terminated.astype(jnp.float32), terminated,
            info)

  def obs_with_goal(self, obs: jax.Array, goal: jax.Array) -> jax.Array:
    """Replaces the goal part of observations.

    Args:
      obs: [..., obs_size] float32 observations of this environment.
      goal: [..., *goal_shape] integer goals, same leading dims as `obs`.
    Returns:
      [..., obs_size] float32, the trailing `goal_obs_size` entries encoding `goal`.
    """
    obs = jnp.asarray(obs)
    goal = jnp.asarray(goal)
    if obs.ndim < 1 or obs.shape[-1] < self.goal_obs_size:
      raise ValueError(f"obs must have a last axis of at least {self.goal_obs_size} "
                       f"entries, got shape {obs.shape}")
    rank = len(self.goal_shape)
    if (goal.ndim < rank or tuple(goal.shape[goal.ndim - rank:]) != self.goal_shape
        or goal.shape[:goal.ndim - rank] != obs.shape[:-1]):
      raise ValueError(f"goal must have shape {obs.shape[:-1] + self.goal_shape} for "
                       f"obs of shape {obs.shape}, got {goal.shape}")
    return jnp.concatenate(
        [obs[..., :obs.shape[-1] - self.goal_obs_size], self.encode_goal(goal)],
        axis=-1)
