"""Shared pieces of credit_jax's environments: a gymnax base class and argument checks.

Every environment here subclasses gymnax's `Environment`, so `reset`, `step` (with
gymnax 1.0's auto-reset and the six-value return) and jit/vmap come from gymnax. What
this module adds is one rule about episode ends that gymnax leaves open:

  * `terminated`: the task itself is over (goal reached, submitted, horizon of a
    fixed-length task); no bootstrapping.
  * `truncated`: the time limit `params.max_steps_in_episode` cut the episode short.
    It is never set on a step that also terminates, so a boundary has exactly one kind
    and estimators never have to break a tie.

Shape-determining settings (horizon, sizes, vocabularies) are static attributes of the
environment object, validated by the constructor; numeric settings that a sweep may vary
live in the `EnvParams` pytree so a sweep over them is a `vmap`.

Environments whose transitions are deterministic (KeyChain, BitFlip, TextEdit) set
`deterministic_transitions`, and `step` then hands its key to the auto-reset whole
instead of splitting it first; results are distributed exactly as with gymnax's `step`.
"""
from __future__ import annotations

import functools
from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from gymnax.environments import environment, spaces

# Largest step limit: the episode's step counter `time` is an int32.
MAX_STEPS = 2 ** 31 - 1


class CreditEnv(environment.Environment):
  """gymnax `Environment` whose time limit never overlaps a natural termination.

  Subclasses implement `step_env`, `reset_env`, `get_obs`, `is_terminated` and
  `num_actions`, set `obs_shape`, and may extend `validate_params`. Actions are
  discrete and observations float32 vectors in [0, 1].
  """

  obs_shape: tuple
  # True when `step_env` never reads its key. gymnax's `step` splits every key into a
  # transition key and an auto-reset key; with deterministic transitions the whole key
  # can go to the reset instead and the split is skipped: the bit generator is the main
  # cost of a cheap step (see BENCHMARKS.md, "Environment stepping").
  deterministic_transitions: bool = False

  @functools.partial(jax.jit, static_argnames=("self",))
  def step(self, key: jax.Array, state: Any, action: Any, params: Any = None
           ) -> Tuple[Any, Any, jax.Array, jax.Array, jax.Array, Dict[str, Any]]:
    """gymnax 1.0's `step` (auto-reset, six values, the same info entries)."""
    if not self.deterministic_transitions:
      return super().step(key, state, action, params)
    if params is None:
      params = self.default_params
    obs_st, state_st, reward, terminated, info = self.step_env(key, state, action,
                                                               params)
    truncated = self.is_truncated(state_st, params)
    done = jnp.logical_or(terminated, truncated)
    obs_re, state_re = self.reset_env(key, params)
    state, obs = jax.tree.map(lambda re, st: jax.lax.select(done, re, st),
                              (state_re, obs_re), (state_st, obs_st))
    info = {**info, "terminated": terminated, "truncated": truncated,
            "final_observation": obs_st}
    return obs, state, reward, terminated, truncated, info

  def action_space(self, params: Any = None) -> spaces.Discrete:
    return spaces.Discrete(self.num_actions)

  def observation_space(self, params: Any = None) -> spaces.Box:
    return spaces.Box(0.0, 1.0, self.obs_shape, jnp.float32)

  def is_truncated(self, state: Any, params: Any) -> jax.Array:
    """[] bool: the time limit was reached by a step that did not end the task."""
    out_of_time = state.time >= params.max_steps_in_episode
    return jnp.logical_and(out_of_time,
                           jnp.logical_not(self.is_terminated(state, params)))

  def validate_params(self, params: Any) -> None:
    """Raises ValueError naming the field when concrete `params` are impossible."""
    check_step_limit(params.max_steps_in_episode)


def check_step_limit(value: Any) -> None:
  """`max_steps_in_episode` must be a whole number in [1, MAX_STEPS] (an int32 count)."""
  check_param_range("max_steps_in_episode", value, 1, MAX_STEPS, integral=True)


def check_int(name: str, value: Any, *, minimum: int | None = None,
              maximum: int | None = None) -> int:
  """Returns `value` as a Python int, or raises ValueError naming `name`.

  Static settings must be concrete integers (not bools, floats or arrays), because
  they fix array shapes or Python-level structure.
  """
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"{name} must be an integer, got {value!r}")
  value = int(value)
  if minimum is not None and value < minimum:
    raise ValueError(f"{name} must be >= {minimum}, got {value}")
  if maximum is not None and value > maximum:
    raise ValueError(f"{name} must be <= {maximum}, got {value}")
  return value


def check_bool(name: str, value: Any) -> bool:
  """`value` as a Python bool, or ValueError naming `name` (0/1 ints are refused too)."""
  if not isinstance(value, (bool, np.bool_)):
    raise ValueError(f"{name} must be True or False, got {value!r}")
  return bool(value)


def check_nonnegative(name: str, value: Any) -> float:
  """`value` as a finite Python float >= 0, or ValueError naming `name`."""
  if isinstance(value, (bool, np.bool_)) or not isinstance(
      value, (int, float, np.integer, np.floating)):
    raise ValueError(f"{name} must be a number >= 0, got {value!r}")
  value = float(value)
  if not (np.isfinite(value) and value >= 0.0):
    raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
  return value


def check_param_range(name: str, value: Any, low: float,
                      high: float = float("inf"), *, integral: bool = False) -> None:
  """Raises ValueError naming `name` unless concrete `value` (any shape) is in [low, high].

  NaN is outside every range. With `integral`, every element must also be a whole
  number. Params may be batched for a sweep, so every element is checked; traced values
  (a sweep built inside jit) cannot be inspected and are left to the caller.
  """
  if isinstance(value, jax.core.Tracer):
    return
  try:
    values = np.asarray(value)
  except (TypeError, ValueError) as error:      # ragged sequences and the like
    raise ValueError(f"{name} must be numeric, got {value!r}") from error
  if values.dtype == bool or not np.issubdtype(values.dtype, np.number):
    raise ValueError(f"{name} must be numeric, got {value!r}")
  if not np.all((values >= low) & (values <= high)):   # False for NaN
    raise ValueError(f"{name} must lie in [{low}, {high}], got {value!r}")
  if integral and not np.all(values == np.round(values)):
    raise ValueError(f"{name} must be a whole number, got {value!r}")
