"""A GRU cell with fused gates and a scan over a whole window with a hand-written backward.

`GRUCell` has the parameters of `flax.linen.GRUCell` (the same names, shapes and
initial values: children `ir`, `iz`, `in` with kernel and bias, `hr`, `hz` without bias,
`hn` with one) and computes the same function,

    r = sigmoid(x W_ir + b_ir + h W_hr)          z = sigmoid(x W_iz + b_iz + h W_hz)
    n = tanh(x W_in + b_in + r * (h W_hn + b_hn))  h' = (1 - z) * n + z * h,

arranged for speed (equal to flax's cell up to float rounding, tested): calling `GRUCell`
returns the three input kernels concatenated into one `[E, 3H]` matrix and the three
recurrent ones into one `[H, 3H]`, so a step is one input matmul (done for all steps at
once, outside the loop, by the caller of `scan`) and one recurrent matmul. That much is
plain JAX and always on: `jnp.tanh`, `jax.nn.sigmoid`, and `jax.lax.scan` differentiated
by JAX.

With `credit_jax.fast_paths` on (opt-in; the entry points turn it on for CPU runs) two
more rewrites are used, equal up to float rounding (tests/test_sequence_gru.py) and
benchmarked both ways (BENCHMARKS.md, `scripts/bench_sequence.py`):

  * `sigmoid(a) = (1 + tanh(a / 2)) / 2`, and `tanh` written out as the rational
    function XLA itself uses for float32 (XLA's CPU code for `jnp.tanh` and the
    logistic inside a loop is slower than for the same arithmetic written out);
  * `scan` (the training unroll) has a `jax.custom_vjp`: the forward loop keeps the
    gates, the backward loop propagates only the hidden-state gradient (no
    transcendentals, one `[., 3H] x [3H, H]` matmul per step), and the recurrent
    kernel's gradient is one matmul over all steps after the loop instead of an
    accumulation inside it.

Shapes: `K` stacked cells ("trunks": 1 for a shared GRU, 2 for separate policy and value
GRUs) run side by side in one loop: `h [..., K, H]`, projected inputs `[T, ..., K, 3H]`.
"""
from __future__ import annotations

from typing import Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from credit_jax import fast_paths

Array = jax.Array


class _Dense(nn.Module):
  """The parameters of one `nn.Dense` (kernel `[in_features, features]`, bias)."""
  features: int
  use_bias: bool
  kernel_init: nn.initializers.Initializer

  @nn.compact
  def __call__(self, in_features: int):
    kernel = self.param("kernel", self.kernel_init, (in_features, self.features),
                        jnp.float32)
    if not self.use_bias:
      return kernel, jnp.zeros((self.features,), jnp.float32)
    return kernel, self.param("bias", nn.initializers.zeros_init(), (self.features,),
                              jnp.float32)


class GRUCell(nn.Module):
  """`flax.linen.GRUCell`'s parameters and function; fused gates (see the module doc)."""
  features: int

  @nn.compact
  def __call__(self, in_features: int) -> Tuple[Array, Array, Array, Array]:
    """`(w_i [in_features, 3H], b_i [3H], w_h [H, 3H], b_h [3H])`, gates (r, z, n).

    `b_h` is `(0, 0, b_hn)`: the recurrent bias of the candidate, inside `r * (.)`.
    """
    h = self.features
    parts = {}
    for name, init, bias in (("ir", nn.initializers.lecun_normal(), True),
                             ("iz", nn.initializers.lecun_normal(), True),
                             ("in", nn.initializers.lecun_normal(), True),
                             ("hr", nn.initializers.orthogonal(), False),
                             ("hz", nn.initializers.orthogonal(), False),
                             ("hn", nn.initializers.orthogonal(), True)):
      parts[name] = _Dense(h, bias, init, name=name)(in_features if name[0] == "i" else h)
    w_i = jnp.concatenate([parts[n][0] for n in ("ir", "iz", "in")], axis=1)
    b_i = jnp.concatenate([parts[n][1] for n in ("ir", "iz", "in")])
    w_h = jnp.concatenate([parts[n][0] for n in ("hr", "hz", "hn")], axis=1)
    b_h = jnp.concatenate([parts[n][1] for n in ("hr", "hz", "hn")])
    return w_i, b_i, w_h, b_h


# tanh(x) ~ x P(x^2) / Q(x^2) on [-7.905, 7.905] (clamped outside, where float32 tanh
# is +-1): the [13/6] rational minimax approximation, the form XLA's own float32 tanh
# takes. Its error against `jnp.tanh` is <= 3e-7 (tests/test_sequence_gru.py).
_TANH_P = (4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05,
           5.12229709037114e-08, -8.60467152213735e-11, 2.00018790482477e-13,
           -2.76076847742355e-16)
_TANH_Q = (4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04,
           1.19825839466702e-06)
_TANH_CLAMP = 7.90531110763549805


def tanh(x: Array) -> Array:
  """`tanh` written out as a rational function (see `_TANH_P`): inside a loop XLA's CPU
  code for this arithmetic is about 2.5x faster than for `jnp.tanh` (BENCHMARKS.md)."""
  x = jnp.clip(x, -_TANH_CLAMP, _TANH_CLAMP)
  x2 = x * x
  p = _TANH_P[-1]
  for c in _TANH_P[-2::-1]:
    p = p * x2 + c
  q = _TANH_Q[-1]
  for c in _TANH_Q[-2::-1]:
    q = q * x2 + c
  return x * p / q


def _sigmoid(a: Array) -> Array:
  return 0.5 * tanh(0.5 * a) + 0.5


def _activations():
  """`(tanh, sigmoid)`: the written-out pair with the fast paths on, else jax's own."""
  if fast_paths.enabled():
    return tanh, _sigmoid
  return jnp.tanh, jax.nn.sigmoid


def _gates(w_h: Array, b_h: Array, h: Array, xp: Array):
  """One step: `h [..., K, H]`, `xp [..., K, 3H]` (projected input) -> `(h', r, z, n, hn)`
  with `hn = h W_hn + b_hn` (the candidate's recurrent term, kept for the backward)."""
  size = h.shape[-1]
  tanh_fn, sigmoid_fn = _activations()
  hh = jnp.einsum("...kh,khg->...kg", h, w_h) + b_h
  rz = sigmoid_fn(xp[..., :2 * size] + hh[..., :2 * size])
  r, z = rz[..., :size], rz[..., size:]
  hn = hh[..., 2 * size:]
  n = tanh_fn(xp[..., 2 * size:] + r * hn)
  return (1.0 - z) * n + z * h, r, z, n, hn


def step(w_h: Array, b_h: Array, h: Array, xp: Array) -> Array:
  """One GRU step of `K` stacked cells: `h [..., K, H]`, `xp [..., K, 3H]` (the input
  already projected: `x @ w_i + b_i`) -> `h' [..., K, H]`. `w_h [K, H, 3H]`, `b_h [K, 3H]`."""
  return _gates(w_h, b_h, h, xp)[0]


def _check(w_h, b_h, h0, xp, starts):
  k, size = jnp.shape(h0)[-2:] if jnp.ndim(h0) >= 2 else (None, None)
  if (jnp.ndim(h0) != 2 or jnp.shape(w_h) != (k, size, 3 * size) or
      jnp.shape(b_h) != (k, 3 * size) or jnp.ndim(starts) != 1 or
      jnp.shape(xp) != (jnp.shape(starts)[0], k, 3 * size)):
    raise ValueError(f"gru.scan needs h0 [K, H], w_h [K, H, 3H], b_h [K, 3H], "
                     f"xp [T, K, 3H], starts [T]; got h0 {jnp.shape(h0)}, w_h "
                     f"{jnp.shape(w_h)}, b_h {jnp.shape(b_h)}, xp {jnp.shape(xp)}, "
                     f"starts {jnp.shape(starts)}")


def scan(w_h: Array, b_h: Array, h0: Array, xp: Array, starts: Array) -> Array:
  """The hidden states of a window of ONE sequence (vmap it over sequences).

  Args:
    w_h: [K, H, 3H] recurrent kernels; b_h: [K, 3H] recurrent biases (see `GRUCell`).
    h0: [K, H] the hidden state before step 0.
    xp: [T, K, 3H] the projected inputs `x_t @ w_i + b_i` of every step.
    starts: [T] bool; the hidden state is reset to zeros before step t where True.
  Returns:
    hs: [T, K, H], the hidden state after each step (its outputs). Differentiable in
    `w_h`, `b_h`, `h0` and `xp`: by JAX's autodiff of the loop, or, with the fast paths
    on, by a hand-written backward (equal up to float rounding).
  """
  _check(w_h, b_h, h0, xp, starts)
  if fast_paths.enabled():
    return _scan(w_h, b_h, h0, xp, starts)
  return _plain_scan(w_h, b_h, h0, xp, starts)


def _plain_scan(w_h, b_h, h0, xp, starts):
  def body(h, inputs):
    xp_t, start = inputs
    h = step(w_h, b_h, jnp.where(start, 0.0, h), xp_t)
    return h, h
  return jax.lax.scan(body, h0, (xp, starts))[1]


_scan = jax.custom_vjp(_plain_scan)   # the fast path: _scan_fwd / _scan_bwd below


def _scan_fwd(w_h, b_h, h0, xp, starts):
  def body(h, inputs):
    xp_t, start = inputs
    h_in = jnp.where(start, 0.0, h)
    h, r, z, n, hn = _gates(w_h, b_h, h_in, xp_t)
    return h, (h, jnp.concatenate([h_in, r, z, n, hn], axis=-1))
  _, (hs, saved) = jax.lax.scan(body, h0, (xp, starts))
  return hs, (w_h, saved, starts)


def _scan_bwd(res, d_hs):
  w_h, saved, starts = res
  size = w_h.shape[1]
  w_t = jnp.swapaxes(w_h, 1, 2)                                          # [K, 3H, H]

  def body(d_next, inputs):
    d_out, saved_t, start = inputs
    h_in, r, z, n, hn = (saved_t[..., i * size:(i + 1) * size] for i in range(5))
    d_h = d_out + d_next
    d_n = d_h * (1.0 - z) * (1.0 - n * n)                 # through tanh
    d_z = d_h * (h_in - n) * z * (1.0 - z)                # through the sigmoid
    d_r = d_n * hn * r * (1.0 - r)
    d_hh = jnp.concatenate([d_r, d_z, d_n * r], axis=-1)                # [K, 3H]
    d_in = d_h * z + jnp.einsum("...kg,kgh->...kh", d_hh, w_t)
    return jnp.where(start, 0.0, d_in), jnp.concatenate([d_hh, d_n], axis=-1)

  d_h0, d = jax.lax.scan(body, jnp.zeros_like(d_hs[0]), (d_hs, saved, starts),
                         reverse=True)
  d_hh = d[..., :3 * size]                                               # [T, K, 3H]
  d_xp = jnp.concatenate([d[..., :2 * size], d[..., 3 * size:]], axis=-1)
  d_w_h = jnp.einsum("tkh,tkg->khg", saved[..., :size], d_hh)
  return d_w_h, d_hh.sum(axis=0), d_h0, d_xp, None


_scan.defvjp(_scan_fwd, _scan_bwd)

