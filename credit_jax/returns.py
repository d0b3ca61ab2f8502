"""Returns, TD errors, lambda-returns and GAE, time-major, with episode boundaries as data.

Every estimator here is one reverse linear recurrence over time,

    A_t = x_t + c_t * A_{t+1},        A_T = init,

on arrays `[T, ...]` whose trailing dims are any batch, so callers never vmap. What
changes between estimators is only `x` (the per-step term) and `c` (how much of the
future flows back into step t). Auto-reset rollouts put several episodes in one window;
for every step t (docs/ARCHITECTURE.md, "Shapes and episode boundaries as data"):

    done_t       = terminated_t | truncated_t
    next_value_t = final_values_t if truncated_t else values[t + 1]
    delta_t      = r_t + discount_t * (1 - terminated_t) * next_value_t - values[t]
    A_t          = delta_t + discount_t * lambda_t * (1 - done_t) * A_{t+1}
    G_t          = A_t + values[t]                       (the lambda-return)

so a terminated step does not bootstrap, a truncated step bootstraps from the value of
its final observation, and no credit crosses either boundary. Without boundary arrays
the results equal rlax's single-episode functions.

Bad input (tests/test_fuzz.py): wrong ranks, shapes or dtypes (integer or bool rewards,
values or discounts), T = 0, and concrete discounts or lambda_ outside [0, 1] (NaN
included) raise ValueError naming the argument before anything is traced. Values are
not checked for NaN/inf (that would cost a device sync): a non-finite reward, value or
final value at step t of one batch element reaches only that element's results, and only
at steps <= t (values[t] at steps t - 1 and t); a final value is read only where
`truncated` is set, so a NaN elsewhere has no effect. Float inputs are computed in at
least float32 (float64 only when jax's x64 mode is on); any trailing batch size,
0 included, works.

`method=` picks the solver of that recurrence: "scan" (a reverse `lax.scan`),
"associative" (`lax.associative_scan`, depth O(log T)) or "auto" (by backend);
`credit_jax/recurrence.py` describes them and how "auto" chooses.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import jax
from jax import Array
import jax.numpy as jnp
import numpy as np

from credit_jax.recurrence import (METHODS, compute_dtype, per_step, resolve_method,
                                   solve)

ArrayLike = Any

# ----------------------------------------------------------------------------------
# Input checks: plain Python on shapes and dtypes, so bad input fails before tracing.


def _shape(x: ArrayLike) -> Tuple[int, ...]:
  return tuple(np.shape(x))


def _is_float(x: ArrayLike) -> bool:
  if isinstance(x, (bool, np.bool_)):
    return False
  if isinstance(x, (int, float)):
    return True
  return jnp.issubdtype(jnp.result_type(x), jnp.floating)


def _check_float(name: str, x: ArrayLike, allow_python_number: bool = False) -> None:
  if allow_python_number and isinstance(x, (int, float)) and not isinstance(x, bool):
    return
  if not hasattr(x, "dtype") and not isinstance(x, (int, float)):
    raise ValueError(f"{name} must be an array, got {type(x).__name__}")
  if not _is_float(x):
    raise ValueError(f"{name} must have a floating dtype, got {jnp.result_type(x)} "
                     f"(shape {_shape(x)})")


def _check_rewards(rewards: ArrayLike) -> Tuple[int, ...]:
  _check_float("rewards", rewards)
  shape = _shape(rewards)
  if len(shape) < 1:
    raise ValueError(f"rewards must be [T, ...] with rank >= 1, got shape {shape}")
  if shape[0] < 1:
    raise ValueError(f"rewards must have at least one step, got shape {shape}")
  return shape


def _check_per_step(name: str, x: ArrayLike, shape: Tuple[int, ...]) -> None:
  """`x` is a float scalar, a per-step [T] array, or a full `shape` array."""
  _check_float(name, x, allow_python_number=True)
  xs = _shape(x)
  if xs not in ((), (shape[0],), shape):
    raise ValueError(f"{name} must be a scalar, [T] = ({shape[0]},) or [T, ...] = "
                     f"{shape} like rewards, got shape {xs}")


def _check_like(name: str, x: ArrayLike, ref_name: str, ref_shape: tuple) -> None:
  if _shape(x) != ref_shape:
    raise ValueError(f"{name} must have the shape of {ref_name} {ref_shape}, got "
                     f"{_shape(x)}")


def _check_values(values: ArrayLike, shape: Tuple[int, ...]) -> None:
  _check_float("values", values)
  want = (shape[0] + 1,) + shape[1:]
  if _shape(values) != want:
    raise ValueError(f"values must be [T + 1, ...] = {want} for rewards {shape} (one "
                     f"more step, to bootstrap the last), got {_shape(values)}")


def _check_unit_interval(name: str, x: ArrayLike) -> None:
  """Concrete `x` lies in [0, 1] (NaN does not); traced values are the caller's."""
  if isinstance(x, jax.core.Tracer):
    return
  values = np.asarray(x)
  inside = (values >= 0.0) & (values <= 1.0)
  if not np.all(inside):
    bad = values[~inside] if values.ndim else values
    raise ValueError(f"{name} must lie in [0, 1], got {np.ravel(bad)[:4]} "
                     f"(shape {values.shape})")


def _check_lambda(lambda_: ArrayLike, shape: Tuple[int, ...]) -> None:
  _check_per_step("lambda_", lambda_, shape)
  _check_unit_interval("lambda_", lambda_)


def _check_boundaries(shape, terminated, truncated, final_values) -> None:
  for name, x in (("terminated", terminated), ("truncated", truncated)):
    if x is None:
      continue
    if not hasattr(x, "dtype"):
      raise ValueError(f"{name} must be a [T, ...] array, got {type(x).__name__}")
    if not (jnp.issubdtype(x.dtype, jnp.bool_) or jnp.issubdtype(x.dtype, jnp.number)):
      raise ValueError(f"{name} must be bool (or 0/1 numbers), got dtype {x.dtype}")
    _check_like(name, x, "rewards", shape)
  if truncated is not None and final_values is None:
    raise ValueError("truncated needs final_values [T, ...]: a truncated step "
                     "bootstraps from the value of its final observation")
  if final_values is not None:
    if truncated is None:
      raise ValueError("final_values is only read at truncated steps; pass truncated "
                       "[T, ...] with it")
    _check_float("final_values", final_values)
    _check_like("final_values", final_values, "rewards", shape)


def _check_common(rewards, discounts, terminated, truncated, final_values, method):
  shape = _check_rewards(rewards)
  _check_per_step("discounts", discounts, shape)
  _check_unit_interval("discounts", discounts)
  _check_boundaries(shape, terminated, truncated, final_values)
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")
  return shape


def _check_stop(stop_target_gradients) -> None:
  if not isinstance(stop_target_gradients, (bool, np.bool_)):
    raise ValueError("stop_target_gradients must be a Python bool, got "
                     f"{type(stop_target_gradients).__name__}")


def _check_lambda_call(rewards, discounts, values, lambda_, terminated, truncated,
                       final_values, method, stop_target_gradients):
  shape = _check_common(rewards, discounts, terminated, truncated, final_values, method)
  _check_values(values, shape)
  _check_lambda(lambda_, shape)
  _check_stop(stop_target_gradients)
  return shape


# ----------------------------------------------------------------------------------
# The estimators: each builds `x` and the factors of the recurrence (credit_jax/
# recurrence.py solves it).


def _boundary_terms(values, discounts, terminated, truncated, final_values, dtype):
  """bootstrap_t = discount_t (1 - term_t) next_value_t, next_value_t as in the module
  docstring."""
  next_values = values[1:]
  if truncated is not None:
    next_values = jnp.where(truncated.astype(bool), final_values.astype(dtype),
                            next_values)
  bootstrap = discounts * next_values
  if terminated is not None:
    bootstrap = jnp.where(terminated.astype(bool), jnp.zeros((), dtype), bootstrap)
  return bootstrap


def _td_impl(rewards, discounts, values, terminated, truncated, final_values, stop):
  dtype = compute_dtype(rewards, values)
  discounts = per_step(discounts, rewards.shape, dtype)
  values = values.astype(dtype)
  bootstrap = _boundary_terms(values, discounts, terminated, truncated, final_values,
                             dtype)
  target = rewards.astype(dtype) + bootstrap
  if stop:
    target = jax.lax.stop_gradient(target)
  return target - values[:-1]


def _gae_impl(rewards, discounts, values, lambda_, terminated, truncated, final_values,
              method, stop):
  if stop:
    # The lambda-return target is built from constants; the baseline keeps its gradient
    # through `v - stop_gradient(v)`, which is exactly 0 in value, so the advantages are
    # bit-identical to the unstopped ones.
    live_v = values[:-1] - jax.lax.stop_gradient(values[:-1])
    rewards, discounts, values, lambda_, final_values = jax.tree.map(
        jax.lax.stop_gradient, (rewards, discounts, values, lambda_, final_values))
  dtype = compute_dtype(rewards, values)
  shape = rewards.shape
  discounts = per_step(discounts, shape, dtype)
  lambda_ = per_step(lambda_, shape, dtype)
  values = values.astype(dtype)
  bootstrap = _boundary_terms(values, discounts, terminated, truncated, final_values,
                             dtype)
  x = rewards.astype(dtype) + bootstrap - values[:-1]
  adv = solve(x, (discounts, lambda_), (terminated, truncated), None, method)
  return adv - live_v.astype(dtype) if stop else adv


def _lambda_returns_impl(rewards, discounts, values, lambda_, terminated, truncated,
                         final_values, method, stop):
  adv = _gae_impl(rewards, discounts, values, lambda_, terminated, truncated,
                  final_values, method, False)
  returns = adv + values[:-1].astype(adv.dtype)
  return jax.lax.stop_gradient(returns) if stop else returns


_td_jit = jax.jit(_td_impl, static_argnames="stop")
_gae_jit = jax.jit(_gae_impl, static_argnames=("method", "stop"))
_lambda_returns_jit = jax.jit(_lambda_returns_impl, static_argnames=("method", "stop"))


def _discounted_impl(rewards, discounts, bootstrap_value, terminated, truncated,
                     final_values, method):
  dtype = compute_dtype(rewards)
  shape = rewards.shape
  discounts = per_step(discounts, shape, dtype)
  x = rewards.astype(dtype)
  if truncated is not None:
    live = truncated.astype(bool)
    if terminated is not None:
      live = live & ~terminated.astype(bool)
    x = x + jnp.where(live, discounts * final_values.astype(dtype), jnp.zeros((), dtype))
  init = None if bootstrap_value is None else jnp.asarray(bootstrap_value, dtype)
  return solve(x, (discounts,), (terminated, truncated), init, method)


_discounted_jit = jax.jit(_discounted_impl, static_argnames="method")


# ----------------------------------------------------------------------------------
# Public API.


def discounted_returns(rewards: ArrayLike, discounts: ArrayLike, *,
                       bootstrap_value: Optional[ArrayLike] = None,
                       terminated: Optional[ArrayLike] = None,
                       truncated: Optional[ArrayLike] = None,
                       final_values: Optional[ArrayLike] = None,
                       method: str = "auto") -> Array:
  """Returns-to-go `G_t = r_t + discount_t * G_{t+1}`, restarted at episode boundaries.

  Args:
    rewards: [T, ...] float, reward of step t; trailing dims are any batch.
    discounts: [], [T] or [T, ...] float, discount applied after step t.
    bootstrap_value: optional [] or [...] float, `G_T`, the value after the window's
      last step (default 0: the window ends the episode).
    terminated: optional [T, ...] bool, the episode ended in a terminal state at t:
      `G_t = r_t`.
    truncated: optional [T, ...] bool, the episode was cut at t:
      `G_t = r_t + discount_t * final_values_t`. Requires `final_values`.
    final_values: optional [T, ...] float, value of the observation that ended the
      episode at t (read only where truncated and not terminated).
    method: "scan" | "associative" | "auto" (see the module docstring).

  Returns:
    [T, ...] float32 (float64 for float64 inputs) returns-to-go.
  """
  shape = _check_common(rewards, discounts, terminated, truncated, final_values, method)
  if bootstrap_value is not None:
    _check_float("bootstrap_value", bootstrap_value, allow_python_number=True)
    if _shape(bootstrap_value) not in ((), shape[1:]):
      raise ValueError(f"bootstrap_value must be a scalar or [...] = {shape[1:]} (the "
                       f"batch dims of rewards {shape}), got {_shape(bootstrap_value)}")
  return _discounted_jit(rewards, discounts, bootstrap_value, terminated, truncated,
                         final_values, method=resolve_method(method, shape[0]))


def td_errors(rewards: ArrayLike, discounts: ArrayLike, values: ArrayLike, *,
              terminated: Optional[ArrayLike] = None,
              truncated: Optional[ArrayLike] = None,
              final_values: Optional[ArrayLike] = None,
              stop_target_gradients: bool = False) -> Array:
  """One-step TD errors `delta_t = r_t + discount_t (1 - term_t) next_value_t - v_t`.

  Args:
    rewards: [T, ...] float.
    discounts: [], [T] or [T, ...] float.
    values: [T + 1, ...] float, values at steps 0..T (the last bootstraps step T - 1).
    terminated, truncated, final_values: optional [T, ...] boundaries, as in `gae`.
    stop_target_gradients: if True the target `r_t + discount_t next_value_t` is a
      constant, so gradients reach only `values[t]` (semi-gradient TD).

  Returns:
    [T, ...] float TD errors.
  """
  shape = _check_common(rewards, discounts, terminated, truncated, final_values, "scan")
  _check_values(values, shape)
  _check_stop(stop_target_gradients)
  return _td_jit(rewards, discounts, values, terminated, truncated, final_values,
                 stop=bool(stop_target_gradients))


def gae(rewards: ArrayLike, discounts: ArrayLike, values: ArrayLike,
        lambda_: ArrayLike, *,
        terminated: Optional[ArrayLike] = None,
        truncated: Optional[ArrayLike] = None,
        final_values: Optional[ArrayLike] = None,
        method: str = "auto",
        stop_target_gradients: bool = False) -> Array:
  """Generalized advantage estimates `A_t = delta_t + discount_t lambda_t (1 - done_t) A_{t+1}`.

  Equals `rlax.truncated_generalized_advantage_estimation(r, d, lambda_, v)` when no
  boundary arrays are given.

  Args:
    rewards: [T, ...] float, reward of step t; trailing dims are any batch.
    discounts: [], [T] or [T, ...] float, discount applied after step t (gamma; the
      boundary arrays, not the discount, say where episodes end).
    values: [T + 1, ...] float, values of the observations at steps 0..T; values[T]
      bootstraps the window's last step.
    lambda_: [], [T] or [T, ...] float in [0, 1]; checked when concrete.
    terminated: optional [T, ...] bool, step t ended its episode in a terminal state:
      no bootstrap, no credit from later steps.
    truncated: optional [T, ...] bool, step t ended its episode by a time limit:
      bootstrap from `final_values[t]`, no credit from later steps.
    final_values: optional [T, ...] float, value of the observation that ended the
      episode at t (required with `truncated`, read only where it is True).
    method: "scan" | "associative" | "auto" (see the module docstring).
    stop_target_gradients: if True the result is `stop_gradient(G_t) - values[t]`:
      the lambda-return target is a constant and gradients reach only the baseline
      `values[t]` (so `0.5 * gae**2` is the TD(lambda) value loss). Unlike rlax, which
      stops the whole advantage, this keeps gae(lambda=0) == td_errors in value and in
      gradient. A policy-gradient weight still needs `jax.lax.stop_gradient(gae(...))`.

  Returns:
    [T, ...] float32 (float64 for float64 inputs) advantages.
  """
  shape = _check_lambda_call(rewards, discounts, values, lambda_, terminated, truncated,
                             final_values, method, stop_target_gradients)
  return _gae_jit(rewards, discounts, values, lambda_, terminated, truncated,
                  final_values, method=resolve_method(method, shape[0]),
                  stop=bool(stop_target_gradients))


def lambda_returns(rewards: ArrayLike, discounts: ArrayLike, values: ArrayLike,
                   lambda_: ArrayLike, *,
                   terminated: Optional[ArrayLike] = None,
                   truncated: Optional[ArrayLike] = None,
                   final_values: Optional[ArrayLike] = None,
                   method: str = "auto",
                   stop_target_gradients: bool = False) -> Array:
  """Lambda-returns `G_t = A_t + values[t]` (TD(lambda) targets), boundaries as in `gae`.

  Equals `rlax.lambda_returns(r, d, values[1:], lambda_)` when no boundary arrays are
  given (rlax takes the values at steps 1..T; here `values` is [T + 1, ...] like `gae`).

  Args:
    rewards: [T, ...] float.
    discounts: [], [T] or [T, ...] float.
    values: [T + 1, ...] float, values at steps 0..T.
    lambda_: [], [T] or [T, ...] float in [0, 1].
    terminated, truncated, final_values: optional [T, ...] boundaries, as in `gae`.
    method: "scan" | "associative" | "auto".
    stop_target_gradients: if True the returns are constants (no gradient at all).

  Returns:
    [T, ...] float lambda-returns.
  """
  shape = _check_lambda_call(rewards, discounts, values, lambda_, terminated, truncated,
                             final_values, method, stop_target_gradients)
  return _lambda_returns_jit(rewards, discounts, values, lambda_, terminated,
                             truncated, final_values,
                             method=resolve_method(method, shape[0]),
                             stop=bool(stop_target_gradients))
