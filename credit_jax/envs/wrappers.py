"""Environment wrappers: a window of past observations, and the episode's goal in `info`.

HistoryWrapper: observations become a window of the last `W` observations. Memory for
policies under the rollout engine's `policy_fn(params, obs, key)` contract, which has no
recurrent carry: the window lives in the environment state, so it is scanned, vmapped,
auto-reset (a new episode starts from an all-zero history) and copied into group rollouts
like any other state. A KeyChain cue shown `cue_delay` steps before its pivotal step is
inside a window of `W >= cue_delay + 1` observations. The wrapper implements gymnax's
`step_env`/`reset_env`, so the base class's auto-reset, `terminated`/`truncated` split and
`info["final_observation"]` (here: the final window) work unchanged. Environment-specific
`info` entries pass through.

DesiredGoalWrapper: a goal environment (`credit_jax/envs/goal.py`) whose `step` also
reports the episode's goal and what was achieved before the step, which hindsight
relabeling (`credit_jax/hindsight.py`) needs.
"""
from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
from gymnax.environments import environment, spaces
from gymnax.wrappers.purerl import GymnaxWrapper

Array = jax.Array


@flax.struct.dataclass
class HistoryState:
  inner: Any       # the wrapped environment's state
  window: Array    # [W, *obs_shape] the last W observations, oldest first


class HistoryWrapper(environment.Environment):
  """Observations `[W, *obs_shape]`: the last `window` observations, oldest first.

  Positions before the episode's first observation are zeros.
  """

  def __init__(self, env: environment.Environment, window: int):
    super().__init__()
    if window < 1:
      raise ValueError(f"window must be >= 1, got {window}")
    self._env = env
    self.window = int(window)

  @property
  def inner(self) -> environment.Environment:
    return self._env

  @property
  def default_params(self):
    return self._env.default_params

  def _push(self, window: Array, obs: Array) -> Array:
    return jnp.concatenate([window[1:], obs[None].astype(window.dtype)], axis=0)

  def reset_env(self, key: Array, params) -> tuple:
    obs, inner = self._env.reset_env(key, params)
    obs = jnp.asarray(obs)
    window = jnp.zeros((self.window,) + obs.shape, jnp.float32)
    window = self._push(window, obs)
    return window, HistoryState(inner=inner, window=window)

  def step_env(self, key: Array, state: HistoryState, action, params) -> tuple:
    obs, inner, reward, terminated, info = self._env.step_env(key, state.inner, action,
                                                              params)
    window = self._push(state.window, jnp.asarray(obs))
    return window, HistoryState(inner=inner, window=window), reward, terminated, info

  def is_truncated(self, state: HistoryState, params) -> Array:
    return self._env.is_truncated(state.inner, params)

  def is_terminated(self, state: HistoryState, params) -> Array:
    return self._env.is_terminated(state.inner, params)

  def observation_space(self, params) -> spaces.Box:
    # Only the shape is meaningful: a zero-padded window of the inner observations.
    shape = (self.window,) + tuple(self._env.observation_space(params).shape)
    return spaces.Box(-jnp.inf, jnp.inf, shape, jnp.float32)

  def action_space(self, params):
    return self._env.action_space(params)

  @property
  def num_actions(self) -> int:
    return self._env.num_actions

  @property
  def name(self) -> str:
    return f"History{self.window}({self._env.name})"


class DesiredGoalWrapper(GymnaxWrapper):
  """A goal environment whose `step` also reports the episode's goal.

  Adds `info["desired_goal"]` ([*goal_shape] int32), the goal of the episode the step
  belongs to, and `info["prev_achieved_goal"]`, what was achieved before the step (both
  read from the state before the step, so an auto-reset does not shift them).
  `hindsight.relabel` needs the first to name the goal each example was relabeled from
  and the second to tell what an episode had achieved before acting. Everything else
  (reset, attributes such as `goal_reward` and `obs_with_goal`) is the wrapped env's.
  """

  @property
  def inner(self) -> environment.Environment:
    """The wrapped goal environment (`credit_jax.envs.success` reads its kind)."""
    return self._env

  def reset(self, key: Array, params: Any = None):
    return self._env.reset(key, params)

  def step(self, key: Array, state: Any, action: Any, params: Any = None):
    obs, new_state, reward, terminated, truncated, info = self._env.step(
        key, state, action, params)
    info = {**info, "desired_goal": self._env.desired_goal(state),
            "prev_achieved_goal": self._env.achieved_goal(state)}
    return obs, new_state, reward, terminated, truncated, info
