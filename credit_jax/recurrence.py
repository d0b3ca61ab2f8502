"""The reverse linear recurrence every estimator of `credit_jax.returns` solves,

    A_t = x_t + c_t * A_{t+1},        A_T = init,

on arrays `[T, ...]` (time-major; trailing dims are any batch), with
c_t = prod(factors)_t, set to 0 at the steps where a cut flag (an episode boundary) is
set. `returns.py` builds `x` and the factors from rewards, values and discounts;
this module only solves the recurrence, on already-checked arrays, under the caller's
jit.

Two solvers compute the same recurrence (`method=`):
  "scan":        a reverse `lax.scan`, one step per time index. The output buffer is
                 filled with `x` first and overwritten in place, so no other [T, ...]
                 temporary is materialised: on CPU a step is bound by memory traffic
                 and per-iteration overhead, and this layout moves the fewest bytes.
  "associative": `lax.associative_scan` over affine maps `a -> x + c * a`; depth
                 O(log T), the fast choice on accelerators where a sequential step
                 costs a kernel launch.
  "auto":        chooses by backend, see `_AUTO_*` below.
"""
from __future__ import annotations

import functools
from typing import Any, Optional, Tuple

import jax
from jax import Array
import jax.numpy as jnp

ArrayLike = Any

__all__ = ["METHODS", "compute_dtype", "per_step", "resolve_method", "solve"]

METHODS = ("scan", "associative", "auto")

# Choice of method="auto" (measured with benchmarks/bench_gae.py; figures in BENCHMARKS.md).
# CPU (2-core Xeon dev machine, jax 0.10.2, 2026-11-30): the in-place reverse scan beat
#   the associative scan at every shape measured, by 2.6x at (T, B) = (128, 256), 6.8x
#   at (1000, 256) and 12x at (5000, 256), and rlax's vmapped scan by 1.24-1.27x;
#   ANCHORS.md has the same ordering at 1000 x 4096 (scan 11 ms, associative 48 ms).
#   The associative scan's extra passes over [T, ...] buffers cost more than the
#   sequential steps they save, and more so as T grows: the CPU threshold is "never".
# GPU/TPU: not measured by us (no accelerator was available when this was written).
#   ANCHORS.md's H200 figures have the associative scan 40-4000x faster than a plain
#   scan for T in [1000, 50000] and B in [64, 4096]; a sequential step costs 13-20 us of
#   launch latency, so even T = 128 spends ~2 ms sequentially, far more than the
#   O(log T) associative passes. Below `_AUTO_ACCEL_MIN_T` steps the two are equally
#   cheap and the scan avoids the extra buffers. Re-measure with bench_gae.py on a GPU.
_AUTO_CPU_MIN_T = None          # None: the associative scan is never chosen on CPU.
_AUTO_ACCEL_MIN_T = 2


def resolve_method(method: str, num_steps: int, backend: Optional[str] = None) -> str:
  """Returns "scan" or "associative" for `method` at `num_steps` on `backend`.

  `backend` defaults to `jax.default_backend()`, the platform a jitted call runs on.
  """
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")
  if method != "auto":
    return method
  backend = backend or jax.default_backend()
  min_t = _AUTO_CPU_MIN_T if backend == "cpu" else _AUTO_ACCEL_MIN_T
  return "associative" if min_t is not None and num_steps >= min_t else "scan"


# ----------------------------------------------------------------------------------
# The recurrence A_t = x_t + c_t * A_{t+1}.


def compute_dtype(*xs) -> Any:
  """At least float32: accumulating thousands of steps in bf16 loses the signal."""
  floats = [x for x in xs if x is not None]
  return jnp.promote_types(jnp.result_type(*floats), jnp.float32)


def per_step(x: ArrayLike, shape: Tuple[int, ...], dtype) -> Array:
  """A scalar stays a scalar; a [T] array gets trailing unit dims to broadcast."""
  x = jnp.asarray(x, dtype)
  if x.ndim == 1 and len(shape) > 1:
    x = x.reshape((shape[0],) + (1,) * (len(shape) - 1))
  return x


def _solve_scan(x: Array, factors: Tuple[Array, ...], cuts: Tuple[Array, ...],
                init: Optional[Array]) -> Array:
  """Reverse scan; `x`'s buffer is overwritten in place by the output.

  c_t is formed inside the loop from its factors (often scalars or [T]) and the bool
  cut flags, instead of being materialised as a [T, ...] float array, and the output
  reuses x's buffer: the loop then reads and writes the fewest rows per step, which is
  what a step costs on CPU.
  """
  num_steps = x.shape[0]
  stepped = tuple(f for f in factors if f.ndim > 0)
  fixed = tuple(f for f in factors if f.ndim == 0)

  def body(carry, step):
    a, buf, t = carry
    step_factors, step_cuts = step
    c = jnp.ones((), x.dtype)
    for f in step_factors + fixed:
      c = c * f
    future = c * a
    for cut in step_cuts:
      future = jnp.where(cut, jnp.zeros((), x.dtype), future)
    a = jax.lax.dynamic_index_in_dim(buf, t, keepdims=False) + future
    return (a, jax.lax.dynamic_update_index_in_dim(buf, a, t, 0), t - 1), None

  init = jnp.zeros(x.shape[1:], x.dtype) if init is None else jnp.broadcast_to(
      init, x.shape[1:]).astype(x.dtype)
  (_, out, _), _ = jax.lax.scan(
      body, (init, x, jnp.int32(num_steps - 1)), (stepped, cuts), length=num_steps,
      reverse=True)
  return out


def _compose(later, earlier):
  """(earlier o later): a -> x_e + c_e * (x_l + c_l * a)."""
  c_l, x_l = later
  c_e, x_e = earlier
  return c_e * c_l, x_e + c_e * x_l


def _solve_associative(x: Array, factors: Tuple[Array, ...], cuts: Tuple[Array, ...],
                       init: Optional[Array]) -> Array:
  c = jnp.ones((), x.dtype)
  for f in factors:
    c = c * f
  for cut in cuts:
    c = jnp.where(cut, jnp.zeros((), x.dtype), c)
  # Keep c at its own (often [T, 1, ...]) shape: the compositions broadcast it.
  c = jnp.reshape(c, c.shape + (1,) * (x.ndim - c.ndim))
  c = jnp.broadcast_to(c, x.shape[:1] + c.shape[1:])
  if init is not None:
    x = x.at[-1].add(c[-1] * init)  # fold A_T into the last map: the scan starts at 0
  _, out = jax.lax.associative_scan(_compose, (c, x), reverse=True, axis=0)
  return out


def solve(x, factors, cuts, init, method):
  """A_t = x_t + c_t A_{t+1}, A_T = init (None: 0); c_t = prod(factors)_t, 0 where cut_t.

  Args:
    x: [T, ...] float, the per-step term (its dtype is the result's).
    factors: tuple of [] or [T, ...] (broadcastable, e.g. [T, 1, ...]) arrays whose
      product is c_t: discounts, lambdas.
    cuts: tuple of [T, ...] bool-like arrays or None; c_t = 0 where any is set.
    init: None or [] / [...] float, A_T.
    method: "scan" or "associative" (`resolve_method` turns "auto" into one).

  Returns:
    [T, ...] the solution A.
  """
  factors = tuple(jnp.asarray(f).astype(x.dtype) for f in factors)
  cuts = [c.astype(bool) for c in cuts if c is not None]
  # One flag row per step is cheaper for the scan to read than two.
  cuts = (functools.reduce(jnp.logical_or, cuts),) if cuts else ()
  solver = _solve_associative if method == "associative" else _solve_scan
  return solver(x, factors, cuts, init)
