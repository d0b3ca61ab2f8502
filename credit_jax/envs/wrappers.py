"""Environment wrappers: the base every credit_jax wrapper builds on, a window of past
observations, and the episode's goal in `info`.

Wrapper: the one base (module-level docstring of the class). Every wrapper in the library
derives from it (HistoryWrapper and DesiredGoalWrapper here, `PaddedChain` in
credit_jax/experiments/bsuite/padded.py, `RetryWrapper` in credit_jax/addons/critique.py,
`StepStateWrapper` in credit_jax/addons/step_states.py, `SubgoalWrapper` in
credit_jax/algos/hierarchy.py, `OracleFeatureWrapper` in credit_jax/algos/ppo_agent.py)
and overrides only what it changes.

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
reports the episode's goal and what was achieved before the step, which relabeling
(`credit_jax/relabel.py`) needs.
"""
from __future__ import annotations

from typing import Any

import flax.struct
from jax import Array
import jax.numpy as jnp
from gymnax.environments import environment, spaces


class Wrapper(environment.Environment):
  """A gymnax environment around another, `inner`, which it delegates to.

  `name`, `num_actions`, `default_params`, `observation_space`, `action_space`,
  `reset_env`, `step_env`, `is_terminated` and `is_truncated` are the inner env's unless
  the wrapper overrides them; a subclass overrides only what it changes.

  Two kinds, told apart by `wraps_state`:
    * False (the default): the wrapper's state IS the inner env's state (it adds to the
      observation or `info`). Boundary checks and `get_obs` take the state as it is, and
      any other attribute (`horizon`, `goal_reward`, `oracle`, ...) is the inner env's.
    * True: the wrapper's state holds the inner env's as `state.inner` (a window, a
      subgoal, retry bookkeeping). Boundary checks read `state.inner`; no other
      attribute is forwarded, since the inner env's methods would get the wrong state.
  A wrapper that is also a `CreditEnv` lists `CreditEnv` first among its bases, so that
  CreditEnv's own `step`, `action_space`, `observation_space` and `is_truncated` win
  over this class's delegation.
  """

  wraps_state: bool = False

  def __init__(self, env: environment.Environment):
    super().__init__()
    self._env = env

  @property
  def inner(self) -> environment.Environment:
    """The wrapped environment (`credit_jax.envs.success` follows it to the task)."""
    return self._env

  @property
  def name(self) -> str:
    return self._env.name

  @property
  def num_actions(self) -> int:
    return self._env.num_actions

  @property
  def default_params(self) -> Any:
    return self._env.default_params

  def observation_space(self, params: Any = None) -> Any:
    return self._env.observation_space(params)

  def action_space(self, params: Any = None) -> Any:
    return self._env.action_space(params)

  def _inner_state(self, state: Any) -> Any:
    return state.inner if self.wraps_state else state

  def reset_env(self, key: Array, params: Any) -> tuple:
    return self._env.reset_env(key, params)

  def step_env(self, key: Array, state: Any, action: Any, params: Any) -> tuple:
    return self._env.step_env(key, state, action, params)

  def is_terminated(self, state: Any, params: Any) -> Array:
    return self._env.is_terminated(self._inner_state(state), params)

  def is_truncated(self, state: Any, params: Any) -> Array:
    return self._env.is_truncated(self._inner_state(state), params)

  def get_obs(self, state: Any, params: Any = None, key: Any = None) -> Any:
    if self.wraps_state:
      raise NotImplementedError(f"{type(self).__name__} returns its observations from "
                                f"reset and step")
    return self._env.get_obs(state, params)

  def __getattr__(self, name: str) -> Any:
    # Only reached for attributes the wrapper does not have; `_env` itself is looked up
    # normally, so this never recurses (nor does it before `__init__` sets `_env`).
    if name == "_env" or type(self).wraps_state:
      raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
    return getattr(self._env, name)


@flax.struct.dataclass
class HistoryState:
  inner: Any       # the wrapped environment's state
  window: Array    # [W, *obs_shape] the last W observations, oldest first


class HistoryWrapper(Wrapper):
  """Observations `[W, *obs_shape]`: the last `window` observations, oldest first.

  Positions before the episode's first observation are zeros.
  """

  wraps_state = True

  def __init__(self, env: environment.Environment, window: int):
    super().__init__(env)
    if window < 1:
      raise ValueError(f"window must be >= 1, got {window}")
    self.window = int(window)

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

  def observation_space(self, params) -> spaces.Box:
    # Only the shape is meaningful: a zero-padded window of the inner observations.
    shape = (self.window,) + tuple(self._env.observation_space(params).shape)
    return spaces.Box(-jnp.inf, jnp.inf, shape, jnp.float32)

  @property
  def name(self) -> str:
    return f"History{self.window}({self._env.name})"


class DesiredGoalWrapper(Wrapper):
  """A goal environment whose `step` also reports the episode's goal.

  Adds `info["desired_goal"]` ([*goal_shape] int32), the goal of the episode the step
  belongs to, and `info["prev_achieved_goal"]`, what was achieved before the step (both
  read from the state before the step, so an auto-reset does not shift them).
  `relabel.relabel` needs the first to name the goal each example was relabeled from
  and the second to tell what an episode had achieved before acting. Everything else
  (reset, attributes such as `goal_reward` and `obs_with_goal`) is the wrapped env's.
  """

  def reset(self, key: Array, params: Any = None):
    return self._env.reset(key, params)

  def step(self, key: Array, state: Any, action: Any, params: Any = None):
    obs, new_state, reward, terminated, truncated, info = self._env.step(
        key, state, action, params)
    info = {**info, "desired_goal": self._env.desired_goal(state),
            "prev_achieved_goal": self._env.achieved_goal(state)}
    return obs, new_state, reward, terminated, truncated, info
