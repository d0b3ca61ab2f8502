"""JAX environments with ground-truth credit, and `make` for them and every gymnax id.

  env, params = make("KeyChain-v0", horizon=1000, num_pivotal=3, num_actions=4)
  env, params = make("CartPole-v1")                  # any gymnax id passes through

All environments follow gymnax 1.0 (`reset(key, params)`, `step(key, state, action,
params) -> (obs, state, reward, terminated, truncated, info)`, auto-reset). An override
given to `make` goes to the environment's constructor when it fixes shapes or structure
(static: horizon, sizes, vocabularies) and into its params pytree when it is numeric and
sweepable (e.g. `max_steps_in_episode`, GoalGrid's `slip_prob`). Impossible values raise
ValueError naming the field; `overrides_of(name)` lists what an id accepts.

Token environments (`credit_jax/envs/tokens.py`: the vocabulary, the stream and the
grammar of tool calls): `ToolArith-v0` (a chain of calculator calls) and `ToolLookup-v0`
(chained lookups in a hidden table); observations are `[2]` int32 tokens, not floats.

Your own environment: `register("MyEnv-v0", MyEnv)` (a gymnax `Environment` class, or a
function returning one, whose keyword parameters are its static options), or name it by
import path in a config, `env_name="my_pkg.my_module:MyEnv"` (imported and registered
on first use). A `CreditEnv` subclass reports `success` (return > 0) in every recipe.

bsuite's chains: `bsuite/UmbrellaChain-v0`, `bsuite/MemoryChain-v0`,
`bsuite/DiscountingChain-v0` (credit_jax/envs/bsuite.py) are the tasks as bsuite defines
them. gymnax's `UmbrellaChain-bsuite`, `MemoryChain-bsuite`, `DiscountingChain-bsuite`
pass through too, but they are different environments, not other spellings:
`GYMNAX_VARIANTS` says how each differs, and every id listing marks them.

Wrappers (`credit_jax/envs/wrappers.py`): `HistoryWrapper(env, W)` turns observations
into a window of the last W; `DesiredGoalWrapper(env)` adds the episode's goal to a goal
environment's `info` for hindsight relabeling.
"""
from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
from typing import Any, Callable, Dict, Optional, Tuple

import gymnax

from credit_jax.envs import bsuite, conveyor_treasure, success
from credit_jax.envs.base import CreditEnv, check_param_range, check_step_limit
from credit_jax.envs.bitflip import BitFlip
from credit_jax.envs.goal import GoalEnvMixin
from credit_jax.envs.goalgrid import GoalGrid
from credit_jax.envs.keychain import KeyChain
from credit_jax.envs.keytodoor import KeyToDoor
from credit_jax.envs.linear_keytodoor import LinearKeyToDoor
from credit_jax.envs.runningsum import RunningSum
from credit_jax.envs.textedit import TextEdit
from credit_jax.envs.tool_arith import ToolArith
from credit_jax.envs.tool_lookup import ToolLookup
from credit_jax.envs.wrappers import DesiredGoalWrapper, HistoryState, HistoryWrapper

_REGISTRY: Dict[str, type] = {
    "KeyChain-v0": KeyChain,
    "BitFlip-v0": BitFlip,
    "GoalGrid-v0": GoalGrid,
    "TextEdit-v0": TextEdit,
    "RunningSum-v0": RunningSum,
    "KeyToDoor-v0": KeyToDoor,
    "LinearKeyToDoor-v0": LinearKeyToDoor,
    "ConveyorTreasure-v0": conveyor_treasure.ConveyorTreasure,   # COCOA's corridor exactly
    # bsuite's chains as bsuite defines them: the ids to use for bsuite's tasks
    # (`GYMNAX_VARIANTS` below: gymnax's versions under gymnax's ids differ).
    "bsuite/UmbrellaChain-v0": bsuite.UmbrellaChain,
    "bsuite/MemoryChain-v0": bsuite.MemoryChain,
    "bsuite/DiscountingChain-v0": bsuite.DiscountingChain,
    "ToolArith-v0": ToolArith,
    "ToolLookup-v0": ToolLookup,
}


# gymnax's own versions of bsuite's three chains, passed through unchanged under gymnax's
# ids. They are not other spellings of the bsuite/ ids but different environments
# (credit_jax/envs/bsuite.py's docstring says how, line by line; the same dynamics only
# where these notes say nothing): a result on bsuite's task uses the bsuite/ id. Every
# listing of ids (`describe_env`, an unknown id's message) says so beside the gymnax id.
GYMNAX_VARIANTS: Dict[str, Tuple[str, str]] = {
    "UmbrellaChain-bsuite": (
        "bsuite/UmbrellaChain-v0", "0 distractor bits, not 20; cut at 100 steps; no "
        "info['success'], so recipes report no success"),
    "MemoryChain-bsuite": (
        "bsuite/MemoryChain-v0", "cut at 1000 steps; no info['success'], where the "
        "recipes' positive-reward test agrees"),
    "DiscountingChain-bsuite": (
        "bsuite/DiscountingChain-v0", "bonus chain indexed by mapping_seed itself, so "
        "15 of bsuite's 20 seeds have no bonus; ends by truncation, not termination; no "
        "info['success']"),
}


def describe_env(name: str) -> str:
  """`name` as an id listing shows it: gymnax's bsuite chains name bsuite's task and how
  they differ (`GYMNAX_VARIANTS`), every other id is itself."""
  if name in GYMNAX_VARIANTS:
    task, differs = GYMNAX_VARIANTS[name]
    return f"{name} (gymnax's variant, not bsuite's task {task}: {differs})"
  return name


def register(name: str, factory: Callable[..., Any], *, replace: bool = False) -> None:
  """Makes `make(name, **options)` build `factory(**static_options)`.

  Args:
    name: the new id. Not a gymnax id; not registered already to another factory unless
      `replace` (registering the same factory again is a no-op).
    factory: a gymnax `Environment` subclass, or a function returning an instance. Its
      keyword parameters are the static options `make` accepts; the fields of the
      instance's `default_params` are the params options.
  Raises:
    ValueError: a bad `name` or `factory`, or a name taken.
  """
  if not isinstance(name, str) or not name.strip():
    raise ValueError(f"name must be a non-empty string, got {name!r}")
  if not callable(factory):
    raise ValueError(f"factory for {name!r} must be a class or function, got {factory!r}")
  if name in gymnax.registered_envs:
    raise ValueError(f"{name!r} is a gymnax id; register yours under another name")
  if _REGISTRY.get(name, factory) is not factory and not replace:
    raise ValueError(f"{name!r} is registered already (to {_REGISTRY[name]!r}); pick "
                     f"another name or pass replace=True")
  _REGISTRY[name] = factory


def _import_factory(path: str) -> Callable[..., Any]:
  """The object `path` ("pkg.module:Name") names."""
  module_name, _, attr = path.partition(":")
  if not module_name or not attr:
    raise ValueError(f"environment path {path!r} must look like 'pkg.module:Class'")
  try:
    module = importlib.import_module(module_name)
  except ImportError as e:
    raise ValueError(f"environment {path!r}: cannot import {module_name!r} ({e}); is it "
                     f"on PYTHONPATH?") from None
  try:
    obj = module
    for part in attr.split("."):
      obj = getattr(obj, part)
  except AttributeError:
    raise ValueError(f"environment {path!r}: module {module_name!r} has no "
                     f"{attr!r}") from None
  return obj


def resolve(name: str) -> Optional[Callable[..., Any]]:
  """The factory `make(name)` calls: a registered id's, or that of a "pkg.module:Class"
  path (imported, then registered under `name`); None for a gymnax id.

  Raises ValueError for an unknown id or a path that does not import.
  """
  if name in _REGISTRY:
    return _REGISTRY[name]
  if name in gymnax.registered_envs:
    return None
  if isinstance(name, str) and ":" in name:
    register(name, _import_factory(name))
    return _REGISTRY[name]
  raise ValueError(
      f"unknown environment {name!r}{_did_you_mean(name)}; known: "
      f"{', '.join(describe_env(k) for k in registered_envs())} (bsuite's tasks as "
      f"bsuite defines them are the bsuite/ ids, credit_jax/envs/bsuite.py; or register your own: credit_jax.envs.register, or 'pkg.module:Class')")


def _did_you_mean(name: Any) -> str:
  """" (did you mean 'X'?)" for the known ids closest to `name` (case ignored), or ""."""
  if not isinstance(name, str):
    return ""
  known = {k.lower(): k for k in registered_envs()}
  close = difflib.get_close_matches(name.lower(), list(known), n=2, cutoff=0.75)
  return f" (did you mean {' or '.join(repr(known[c]) for c in close)}?)" if close else ""


def registered_envs() -> Tuple[str, ...]:
  """The ids `make` accepts: credit_jax's own and those registered, then gymnax's."""
  return tuple(_REGISTRY) + tuple(
      name for name in gymnax.registered_envs if name not in _REGISTRY)


def overrides_of(name: str) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
  """(static constructor options, params fields) that `make(name, ...)` accepts."""
  factory = resolve(name) if isinstance(name, str) else None
  if factory is not None:
    params = factory().default_params
  else:
    env, params = gymnax.make(name)
    factory = type(env)
  static = tuple(p for p in inspect.signature(factory).parameters
                 if p not in ("self", "args", "kwargs"))
  return static, tuple(f.name for f in dataclasses.fields(params))


def make(name: str, **overrides: Any) -> Tuple[Any, Any]:
  """Builds environment `name` with `overrides`; returns `(env, env_params)`.

  Args:
    name: a credit_jax id (`KeyChain-v0`, `BitFlip-v0`, `GoalGrid-v0`, `TextEdit-v0`,
      `KeyToDoor-v0`, `LinearKeyToDoor-v0`, `bsuite/UmbrellaChain-v0`,
      `bsuite/MemoryChain-v0`, `bsuite/DiscountingChain-v0`, the token tool-use envs
      `ToolArith-v0` and `ToolLookup-v0`) or any gymnax id (`CartPole-v1`, ...).
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
  factory = resolve(name)
  if factory is not None:
    env = factory(**static)
    params = env.default_params.replace(**param_overrides)
    if hasattr(env, "validate_params"):
      env.validate_params(params)
  else:
    env, params = gymnax.make(name, **static)
    params = params.replace(**param_overrides)
    if "max_steps_in_episode" in param_overrides:
      check_step_limit(params.max_steps_in_episode)
  return env, params


__all__ = [
    "BitFlip", "CreditEnv", "DesiredGoalWrapper", "GYMNAX_VARIANTS", "GoalEnvMixin",
    "GoalGrid", "describe_env",
    "HistoryState", "HistoryWrapper", "KeyChain", "KeyToDoor", "LinearKeyToDoor",
    "RunningSum", "TextEdit", "ToolArith", "ToolLookup", "make", "overrides_of", "register",
    "registered_envs", "resolve", "success",
]
