"""JAX environments with ground-truth credit, and `make` for them and every gymnax id.

  env, params = make("KeyChain-v0", horizon=1000, num_pivotal=3, num_actions=4)
  env, params = make("CartPole-v1")                  # any gymnax id passes through

All environments follow gymnax 1.0 (`reset(key, params)`, `step(key, state, action,
params) -> (obs, state, reward, terminated, truncated, info)`, auto-reset). An override
given to `make` goes to the environment's constructor when it fixes shapes or structure
(static: horizon, sizes, vocabularies) and into its params pytree when it is numeric and
sweepable (e.g. `max_steps_in_episode`, GoalGrid's `slip_prob`). Impossible values raise
ValueError naming the field; `overrides_of(name)` lists what an id accepts.

Wrappers (`credit_jax/envs/wrappers.py`): `HistoryWrapper(env, W)` turns observations
into a window of the last W; `DesiredGoalWrapper(env)` adds the episode's goal to a goal
environment's `info` for hindsight relabeling.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Dict, Tuple

import gymnax

from credit_jax.envs.base import CreditEnv, check_param_range, check_step_limit
from credit_jax.envs.bitflip import BitFlip
from credit_jax.envs.goal import GoalEnvMixin
from credit_jax.envs.goalgrid import GoalGrid
from credit_jax.envs.keychain import KeyChain
from credit_jax.envs.keytodoor import KeyToDoor
from credit_jax.envs.linear_keytodoor import LinearKeyToDoor
from credit_jax.envs.runningsum import RunningSum
from credit_jax.envs.textedit import TextEdit
from credit_jax.envs.wrappers import DesiredGoalWrapper, HistoryState, HistoryWrapper

_REGISTRY: Dict[str, type] = {
    "KeyChain-v0": KeyChain,
    "BitFlip-v0": BitFlip,
    "GoalGrid-v0": GoalGrid,
    "TextEdit-v0": TextEdit,
    "RunningSum-v0": RunningSum,
    "KeyToDoor-v0": KeyToDoor,
    "LinearKeyToDoor-v0": LinearKeyToDoor,
}


def registered_envs() -> Tuple[str, ...]:
  """The ids `make` accepts: credit_jax's own, then gymnax's."""
  return tuple(_REGISTRY) + tuple(
      name for name in gymnax.registered_envs if name not in _REGISTRY)


def overrides_of(name: str) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
  """(static constructor options, params fields) that `make(name, ...)` accepts."""
  if name in _REGISTRY:
    factory = _REGISTRY[name]
    params = factory().default_params
  elif name in gymnax.registered_envs:
    env, params = gymnax.make(name)
    factory = type(env)
  else:
    raise ValueError(f"unknown environment {name!r}; known: "
                     f"{', '.join(registered_envs())}")
  static = tuple(p for p in inspect.signature(factory).parameters
                 if p not in ("self", "args", "kwargs"))
  return static, tuple(f.name for f in dataclasses.fields(params))


def make(name: str, **overrides: Any) -> Tuple[Any, Any]:
  """Builds environment `name` with `overrides`; returns `(env, env_params)`.

  Args:
    name: a credit_jax id (`KeyChain-v0`, `BitFlip-v0`, `GoalGrid-v0`, `TextEdit-v0`,
      `KeyToDoor-v0`, `LinearKeyToDoor-v0`)
      or any gymnax id (`CartPole-v1`, ...).
    **overrides: constructor options and/or params fields (see `overrides_of`).
  Raises:
    ValueError: unknown `name` (the message lists the known ids), an override the
      environment does not have (the message lists those it has), or an impossible value
      (the message names the field).
  """
  if not isinstance(name, str):
    raise ValueError(f"name must be a string environment id, got {name!r}")
  static_names, param_names = overrides_of(name)
  unknown = sorted(set(overrides) - set(static_names) - set(param_names))
  if unknown:
    raise ValueError(
        f"{name} has no option {', '.join(unknown)}; constructor options: "
        f"{', '.join(static_names) or '(none)'}; params fields: {', '.join(param_names)}")
  static = {k: v for k, v in overrides.items() if k in static_names}
  param_overrides = {k: v for k, v in overrides.items() if k not in static_names}
  if name in _REGISTRY:
    env = _REGISTRY[name](**static)
    params = env.default_params.replace(**param_overrides)
    env.validate_params(params)
  else:
    env, params = gymnax.make(name, **static)
    params = params.replace(**param_overrides)
    if "max_steps_in_episode" in param_overrides:
      check_step_limit(params.max_steps_in_episode)
  return env, params


__all__ = [
    "BitFlip", "CreditEnv", "DesiredGoalWrapper", "GoalEnvMixin", "GoalGrid",
    "HistoryState", "HistoryWrapper", "KeyChain", "KeyToDoor", "LinearKeyToDoor",
    "RunningSum", "TextEdit", "make", "overrides_of", "registered_envs",
]
