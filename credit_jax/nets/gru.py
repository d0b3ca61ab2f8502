"""A GRU cell with the input projection hoisted out of the loop, and a scan over a whole
window with a hand-written backward.

`GRUCell` has the parameters of `flax.linen.GRUCell` (the same names, shapes and
initial values: children `ir`, `iz`, `in` with kernel and bias, `hr`, `hz` without bias,
`hn` with one) and computes the same function,

    r = sigmoid(x W_ir + b_ir + h W_hr)          z = sigmoid(x W_iz + b_iz + h W_hz)
    n = tanh(x W_in + b_in + r * (h W_hn + b_hn))  h' = (1 - z) * n + z * h,

arranged for speed (equal to flax's cell up to float rounding, tested): calling `GRUCell`
returns the three input kernels concatenated into one `[E, 3H]` matrix (one input matmul,
done for all steps at once, outside the loop, by the caller of `scan`) and the three
recurrent `[H, H]` kernels (r, z, n). A step multiplies the hidden state by their
concatenation, one `[H, 3H]` product sliced per gate. With the fast paths off that is
plain JAX and the default: `jnp.tanh`, `jax.nn.sigmoid`, and `jax.lax.scan`
differentiated by JAX.

With `credit_jax.fast_paths` on (opt-in; the entry points turn it on for CPU runs) two
more rewrites are used, equal up to float rounding (tests/test_sequence_gru.py) and
benchmarked both ways (BENCHMARKS.md, `benchmarks/bench_sequence.py`):

  * `sigmoid(a) = (1 + tanh(a / 2)) / 2`, and `tanh` written out as the rational
    function XLA itself uses for float32 (XLA's CPU code for `jnp.tanh` and the
    logistic inside a loop is slower than for the same arithmetic written out);
  * `scan` (the training unroll) has a `jax.custom_vjp`: the recurrent kernels are
    concatenated once, outside the loops; the forward loop keeps each step's output and
    its gates r, z and `h W_hn + b_hn`, the derivatives of each step's output through
    the gates are computed for all steps at once after it, the backward loop propagates
    only the hidden-state gradient (no transcendentals: one `[., 3H] x [3H, H]` product
    and a few multiplies per step), and the kernel gradient is one matmul for all steps
    after it instead of an accumulation inside the loop.

On a 2-core CPU the per-step cost of these loops is mostly the number of XLA operations
in a step, each output kept included (BENCHMARKS.md, "Sequence networks"): one
`[H, 3H]` product beat three `[H, H]` ones once the concatenation was taken out of the
loop, and four kept outputs beat five.

Shapes: `K` stacked cells ("trunks": 1 for a shared GRU, 2 for separate policy and value
GRUs) run side by side in one loop: `h [..., K, H]`, projected inputs `[T, ..., K, 3H]`.
"""
from __future__ import annotations

from typing import Tuple

import flax.linen as nn
import jax
from jax import Array
import jax.numpy as jnp

from credit_jax import fast_paths
from credit_jax.nets import initializers

_Kernels = Tuple[Array, Array, Array]


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
  """`flax.linen.GRUCell`'s parameters and function, arranged as the module doc says."""
  features: int

  @nn.compact
  def __call__(self, in_features: int) -> Tuple[Array, Array, _Kernels, Array]:
    """`(w_i [in_features, 3H], b_i [3H], (w_hr, w_hz, w_hn) [H, H] each, b_h [3H])`,
    gates (r, z, n). The recurrent kernels stay three arrays (the parameters
    themselves: a step multiplies each on its own, so none is sliced out of a
    concatenation inside a loop).

    `b_h` is `(0, 0, b_hn)`: the recurrent bias of the candidate, inside `r * (.)`.
    """
    h = self.features
    parts = {}
    for name, init, bias in (("ir", nn.initializers.lecun_normal(), True),
                             ("iz", nn.initializers.lecun_normal(), True),
                             ("in", nn.initializers.lecun_normal(), True),
                             ("hr", initializers.orthogonal(), False),
                             ("hz", initializers.orthogonal(), False),
                             ("hn", initializers.orthogonal(), True)):
      parts[name] = _Dense(h, bias, init, name=name)(in_features if name[0] == "i" else h)
    w_i = jnp.concatenate([parts[n][0] for n in ("ir", "iz", "in")], axis=1)
    b_i = jnp.concatenate([parts[n][1] for n in ("ir", "iz", "in")])
    w_h = tuple(parts[n][0] for n in ("hr", "hz", "hn"))
    b_h = jnp.concatenate([parts[n][1] for n in ("hr", "hz", "hn")])
    return w_i, b_i, w_h, b_h


# tanh(x) ~ x P(x^2) / Q(x^2) on [-7.905, 7.905] (clamped outside, where float32 tanh
# is +-1): the [13/6] rational minimax approximation, the form XLA's own float32 tanh
# takes. Its largest error against float64 tanh is 2.6e-7 (as `jnp.tanh`'s) at XLA's
# default CPU optimisation level, 3.2e-7 at level 0 (tests/test_sequence_gru.py).
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


def kernels(w_h) -> _Kernels:
  """The recurrent kernels per gate, `(w_hr, w_hz, w_hn)` `[K, H, H]` each, from `w_h`:
  either that tuple already or the concatenation `[K, H, 3H]` (gates r, z, n)."""
  if isinstance(w_h, (tuple, list)):
    return tuple(w_h)
  size = jnp.shape(w_h)[-2]
  return tuple(w_h[..., i * size:(i + 1) * size] for i in range(3))


def _matmul(h: Array, w: Array) -> Array:
  """`[..., K, H] x [K, H, G] -> [..., K, G]`: each of the K trunks by its own kernel."""
  return jnp.einsum("...kh,khg->...kg", h, w)


def _fused_step(w_h: Array, b_h: Array, h: Array, xp: Array) -> Array:
  """The plain step (fast paths off): one `[H, 3H]` recurrent matmul of the concatenated
  kernels `w_h [K, H, 3H]`, its product sliced per gate."""
  size = h.shape[-1]
  tanh_fn, sigmoid_fn = _activations()
  hh = _matmul(h, w_h) + b_h
  rz = sigmoid_fn(xp[..., :2 * size] + hh[..., :2 * size])
  n = tanh_fn(xp[..., 2 * size:] + rz[..., :size] * hh[..., 2 * size:])
  z = rz[..., size:]
  return (1.0 - z) * n + z * h


def step(w_h, b_h: Array, h: Array, xp: Array) -> Array:
  """One GRU step of `K` stacked cells: `h [..., K, H]`, `xp [..., K, 3H]` (the input
  already projected: `x @ w_i + b_i`) -> `h' [..., K, H]`. `w_h`: `(w_hr, w_hz, w_hn)`
  `[K, H, H]` each, or their concatenation `[K, H, 3H]` (see `kernels`); `b_h [K, 3H]`
  (gates r, z, n along the last axis). One matmul of the concatenated kernels; with the
  fast paths on the written-out activations (the module doc)."""
  if fast_paths.enabled():
    return _fused_cell(_concatenated(w_h), b_h, h, xp)[0]
  return _fused_step(_concatenated(w_h), b_h, h, xp)


def _concatenated(w_h) -> Array:
  """`[K, H, 3H]`: the recurrent kernels concatenated (gates r, z, n)."""
  return jnp.concatenate(w_h, axis=-1) if isinstance(w_h, (tuple, list)) else w_h


def _check(ws, b_h, h0, xp, starts):
  k, size = jnp.shape(h0)[-2:] if jnp.ndim(h0) >= 2 else (None, None)
  if (jnp.ndim(h0) != 2 or any(jnp.shape(w) != (k, size, size) for w in ws) or
      jnp.shape(b_h) != (k, 3 * size) or jnp.ndim(starts) != 1 or
      jnp.shape(xp) != (jnp.shape(starts)[0], k, 3 * size)):
    raise ValueError(f"gru.scan needs h0 [K, H], w_h [K, H, 3H] (or three [K, H, H]), "
                     f"b_h [K, 3H], xp [T, K, 3H], starts [T]; got h0 {jnp.shape(h0)}, "
                     f"w_h {[jnp.shape(w) for w in ws]}, b_h {jnp.shape(b_h)}, "
                     f"xp {jnp.shape(xp)}, starts {jnp.shape(starts)}")


def scan(w_h: Array, b_h: Array, h0: Array, xp: Array, starts: Array) -> Array:
  """The hidden states of a window of ONE sequence (vmap it over sequences).

  Args:
    w_h: the recurrent kernels, `(w_hr, w_hz, w_hn)` `[K, H, H]` each, or their
      concatenation `[K, H, 3H]` (see `kernels`); b_h: [K, 3H] recurrent biases (see
      `GRUCell`).
    h0: [K, H] the hidden state before step 0.
    xp: [T, K, 3H] the projected inputs `x_t @ w_i + b_i` of every step.
    starts: [T] bool; the hidden state is reset to zeros before step t where True.
  Returns:
    hs: [T, K, H], the hidden state after each step (its outputs). Differentiable in
    `w_h`, `b_h`, `h0` and `xp`: by JAX's autodiff of the loop, or, with the fast paths
    on, by a hand-written backward (equal up to float rounding).
  """
  ws = kernels(w_h)
  _check(ws, b_h, h0, xp, starts)
  if fast_paths.enabled():
    return _scan(ws, b_h, h0, xp, starts)
  return _plain_scan(_concatenated(w_h), b_h, h0, xp, starts)


def _plain_scan(w_h, b_h, h0, xp, starts):
  """Fast paths off: `_fused_step` in a scan, differentiated by JAX."""
  def body(h, inputs):
    xp_t, start = inputs
    h = _fused_step(w_h, b_h, jnp.where(start, 0.0, h), xp_t)
    return h, h
  return jax.lax.scan(body, h0, (xp, starts))[1]


def _fused_cell(w_cat: Array, b_h: Array, h: Array, xp: Array):
  """One fast-path step (acting and the training scan): one `[H, 3H]` product of the
  concatenated kernels `w_cat [K, H, 3H]` (the training loops concatenate them once,
  outside the loop), sliced per gate, with the written-out activations. Returns `(h', r,
  z, n, hn)` with `hn = h W_hn + b_hn` (the backward keeps r, z and hn). The same
  function as `_fused_step`, which the plain path keeps as it was (its arithmetic and so
  its rounding unchanged for runs without the fast paths)."""
  size = h.shape[-1]
  tanh_fn, sigmoid_fn = _activations()
  hh = _matmul(h, w_cat) + b_h
  r = sigmoid_fn(xp[..., :size] + hh[..., :size])
  z = sigmoid_fn(xp[..., size:2 * size] + hh[..., size:2 * size])
  hn = hh[..., 2 * size:]
  n = tanh_fn(xp[..., 2 * size:] + r * hn)
  return n + z * (h - n), r, z, n, hn


def _fast_scan(ws, b_h, h0, xp, starts):
  """Fast paths on, not differentiated: `_fused_cell` in a scan."""
  w_cat = _concatenated(ws)                 # once, outside the loop

  def body(h, inputs):
    xp_t, start = inputs
    h = _fused_cell(w_cat, b_h, jnp.where(start, 0.0, h), xp_t)[0]
    return h, h
  return jax.lax.scan(body, h0, (xp, starts))[1]


_scan = jax.custom_vjp(_fast_scan)   # the fast path: _scan_fwd / _scan_bwd below


def _scan_fwd(ws, b_h, h0, xp, starts):
  """The forward loop keeps each step's output and gates r, z and `hn` (four per-step
  outputs: on CPU each costs about what a gate's arithmetic does); n and the backward's
  per-step factors (the derivatives of h' through n, z and r) are then computed for all
  steps at once."""
  w_cat = _concatenated(ws)

  def body(h, inputs):
    xp_t, start = inputs
    h, r, z, _, hn = _fused_cell(w_cat, b_h, jnp.where(start, 0.0, h), xp_t)
    return h, (h, r, z, hn)
  _, (hs, r, z, hn) = jax.lax.scan(body, h0, (xp, starts))
  tanh_fn, _ = _activations()
  n = tanh_fn(xp[..., 2 * hs.shape[-1]:] + r * hn)                     # as in the loop
  h_in = jnp.where(starts[:, None, None], 0.0,
                   jnp.concatenate([h0[None], hs[:-1]]))                 # [T, K, H]
  a = (1.0 - z) * (1.0 - n * n)          # dL/dn = dL/dh' * a   (through tanh)
  b = (h_in - n) * z * (1.0 - z)         # dL/dz = dL/dh' * b   (through the sigmoid)
  c = hn * (1.0 - r)                     # dL/dr = dL/d(hn) * c, dL/d(hn) = dL/dn * r
  return hs, (ws, h_in, a, a * r, b, c, z, starts)


def _gate_grads(d_h, ar, b, c):
  """`[..., K, 3H]`: dL/d of the gates' recurrent terms (r, z, hn) from dL/dh' `d_h`
  `[..., K, H]` and the forward's factors (`ar = a * r`, `b`, `c`; see `_scan_fwd`)."""
  d_hn = d_h * ar
  return jnp.concatenate([d_hn * c, d_h * b, d_hn], axis=-1)


def _scan_bwd(res, d_hs):
  ws, h_in, a, ar, b, c, z, starts = res
  w_t = jnp.swapaxes(_concatenated(ws), 1, 2)           # [K, 3H, H]: W_hr^T; W_hz^T; W_hn^T

  def body(d_next, inputs):   # propagates only dL/dh' (no transcendentals), one product
    d_out, ar_t, b_t, c_t, z_t, start = inputs
    d_h = d_out + d_next
    d_in = d_h * z_t + _matmul(_gate_grads(d_h, ar_t, b_t, c_t), w_t)
    return jnp.where(start, 0.0, d_in), d_h

  d_h0, d_h = jax.lax.scan(body, jnp.zeros_like(d_hs[0]),
                           (d_hs, ar, b, c, z, starts), reverse=True)    # d_h [T, K, H]
  d_gates = _gate_grads(d_h, ar, b, c)                                   # [T, K, 3H]
  d_w = jnp.einsum("tkh,tkg->khg", h_in, d_gates)                       # [K, H, 3H]
  size = h_in.shape[-1]
  d_ws = tuple(d_w[..., i * size:(i + 1) * size] for i in range(3))
  d_b_h = d_gates.sum(axis=0)
  d_xp = jnp.concatenate([d_gates[..., :2 * size], d_h * a], axis=-1)   # r, z, n (input)
  return d_ws, d_b_h, d_h0, d_xp, None


_scan.defvjp(_scan_fwd, _scan_bwd)
