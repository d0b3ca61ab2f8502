"""The fused GRU (credit_jax/nets/gru.py) against flax's `nn.GRUCell` and against autodiff.

Both ways: plain JAX (the default) and with `credit_jax.fast_paths` on (written-out
tanh/sigmoid and the hand-written backward of `gru.scan`). Both are also checked against
the fused formulation written out here (one `[H, 3H]` matmul sliced per gate, jax's
activations, autodiff), gradients included.

The reference is the GRU actor-critic as it was before the fused cell: flax's
`nn.GRUCell`, stepped in a `lax.scan` with jax's own autodiff. Same parameters (names,
shapes, initial values), same outputs and gradients up to float rounding, under jit and
vmap, with a window that starts mid-episode and has a reset inside.
"""
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import fast_paths, nets
from credit_jax.nets import gru
from credit_jax.nets import sequence as sn


class OldGRUActorCritic(nn.Module):
  """The previous `GRUActorCritic`: flax `nn.GRUCell`s, autodiff through the loop."""
  num_actions: int
  hidden_size: int = 64
  encoder_sizes: Sequence[int] = (64,)
  activation: str = "tanh"
  shared_torso: bool = True
  obs_rank: int = 1

  def setup(self):
    self.pi_encoder = nets.MLP(tuple(self.encoder_sizes), self.activation)
    self.pi_cell = nn.GRUCell(features=self.hidden_size)
    if not self.shared_torso:
      self.v_encoder = nets.MLP(tuple(self.encoder_sizes), self.activation)
      self.v_cell = nn.GRUCell(features=self.hidden_size)
    self.pi_head = sn._dense(self.num_actions, 0.01)
    self.v_head = sn._dense(1, 1.0)

  def initial_carry(self):
    h = jnp.zeros((self.hidden_size,), jnp.float32)
    return h if self.shared_torso else (h, h)

  def encode(self, obs, prev_action, prev_reward):
    x = sn._token(obs, prev_action, prev_reward, self.num_actions, self.obs_rank)
    return self.pi_encoder(x) if self.shared_torso else (self.pi_encoder(x),
                                                         self.v_encoder(x))

  def cell(self, carry, x):
    if self.shared_torso:
      return self.pi_cell(carry, x)[0]
    return self.pi_cell(carry[0], x[0])[0], self.v_cell(carry[1], x[1])[0]

  def heads(self, carry):
    h_pi, h_v = (carry, carry) if self.shared_torso else carry
    return self.pi_head(h_pi), self.v_head(h_v)[..., 0]

  def step(self, carry, obs, prev_action, prev_reward):
    carry = self.cell(carry, self.encode(obs, prev_action, prev_reward))
    return (carry,) + self.heads(carry)


def old_unroll(net, params, carry, obs, prev_a, prev_r, starts, final):
  x = net.apply(params, obs, prev_a, prev_r, method="encode")
  initial = net.initial_carry()

  def body(c, inputs):
    x_t, start = inputs
    c = jax.tree.map(lambda i, h: jnp.where(start, i, h), initial, c)
    c = net.apply(params, c, x_t, method="cell")
    return c, c

  _, carries = jax.lax.scan(body, carry, (x, starts))
  logits, values = net.apply(params, carries, method="heads")
  after = net.apply(params, carries, net.apply(params, *final, method="encode"),
                    method="cell")
  return logits, values, net.apply(params, after, method="heads")[1]


OBS, A, T, B = 5, 3, 13, 3


def _pair(shared):
  kw = dict(num_actions=A, hidden_size=8, encoder_sizes=(6,), shared_torso=shared)
  return sn.GRUActorCritic(**kw), OldGRUActorCritic(**kw)


def _window(key):
  ks = jax.random.split(key, 6)
  obs = jax.random.normal(ks[0], (B, T, OBS))
  final_obs = jax.random.normal(ks[1], (B, T, OBS))
  actions = jax.random.randint(ks[2], (B, T), 0, A)
  rewards = jax.random.normal(ks[3], (B, T))
  prev_a = jax.random.randint(ks[4], (B, T), -1, A)
  prev_r = jax.random.normal(ks[5], (B, T))
  starts = jnp.zeros((B, T), bool).at[0, 5].set(True).at[2, 9].set(True).at[1, 0].set(True)
  return obs, prev_a, prev_r, starts, (final_obs, actions, rewards)


def _carry(net, key):
  c = net.initial_carry()
  ks = jax.random.split(key, 2)
  if isinstance(c, tuple):
    return tuple(jax.random.normal(k, (B,) + x.shape) * 0.5 for k, x in zip(ks, c))
  return jax.random.normal(ks[0], (B,) + c.shape) * 0.5


def _allclose(a, b, rtol=2e-5, atol=2e-6):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


@pytest.mark.parametrize("shared", [True, False])
def test_same_parameters_as_flax_gru_cell(shared):
  new, old = _pair(shared)
  p_new = sn.init_params(new, jax.random.key(0), (OBS,))
  p_old = old.init(jax.random.key(0), old.initial_carry(), jnp.zeros((OBS,)),
                   jnp.int32(-1), jnp.float32(0.0), method="step")
  assert jax.tree.structure(p_new) == jax.tree.structure(p_old)
  jax.tree.map(np.testing.assert_array_equal, p_new, p_old)


@pytest.mark.parametrize("shared,fast", [(True, False), (False, True)])
def test_step_equals_flax_gru_cell(shared, fast):
  with fast_paths.use(fast):
    _step_equals_flax_gru_cell(shared)


def _step_equals_flax_gru_cell(shared):
  new, old = _pair(shared)
  params = sn.init_params(new, jax.random.key(1), (OBS,))
  obs, prev_a, prev_r, _, _ = _window(jax.random.key(2))
  carry = _carry(new, jax.random.key(3))
  f_new = jax.jit(jax.vmap(lambda c, o, a, r: new.apply(params, c, o, a, r, method="step")))
  f_old = jax.jit(jax.vmap(lambda c, o, a, r: old.apply(params, c, o, a, r, method="step")))
  _allclose(f_new(carry, obs[:, 0], prev_a[:, 0], prev_r[:, 0]),
            f_old(carry, obs[:, 0], prev_a[:, 0], prev_r[:, 0]))
  # Unbatched, not jitted.
  c1 = jax.tree.map(lambda x: x[1], carry)
  _allclose(new.apply(params, c1, obs[1, 0], prev_a[1, 0], prev_r[1, 0], method="step"),
            old.apply(params, c1, obs[1, 0], prev_a[1, 0], prev_r[1, 0], method="step"))


@pytest.mark.parametrize("shared,fast", [(True, True), (False, True), (False, False)])
def test_unroll_outputs_and_gradients_equal_the_flax_cell_loop(shared, fast):
  with fast_paths.use(fast):
    _unroll_outputs_and_gradients_equal_the_flax_cell_loop(shared)


def _unroll_outputs_and_gradients_equal_the_flax_cell_loop(shared):
  new, old = _pair(shared)
  params = sn.init_params(new, jax.random.key(4), (OBS,))
  obs, prev_a, prev_r, starts, final = _window(jax.random.key(5))
  carry = _carry(new, jax.random.key(6))
  weights = jax.random.normal(jax.random.key(7), (3, B, T))

  def run(unroll_fn, p, c):
    return jax.vmap(lambda c, o, a, r, s, f: unroll_fn(p, c, o, a, r, s, f))(
        c, obs, prev_a, prev_r, starts, final)

  f_new = lambda p, c, o, a, r, s, f: sn.unroll(new, p, c, o, a, r, s, f)
  f_old = lambda p, c, o, a, r, s, f: old_unroll(old, p, c, o, a, r, s, f)

  def loss(unroll_fn, p, c):
    logits, values, final_values = run(unroll_fn, p, c)
    return (jnp.sum(weights[0] * jax.nn.log_softmax(logits)[..., 1])
            + jnp.sum(weights[1] * values) + jnp.sum(weights[2] * jnp.sin(final_values)))

  _allclose(jax.jit(run, static_argnums=0)(f_new, params, carry),
            jax.jit(run, static_argnums=0)(f_old, params, carry))
  _allclose(run(f_new, params, carry), run(f_old, params, carry))   # not jitted
  g_new = jax.jit(jax.grad(loss, argnums=(1, 2)), static_argnums=0)(f_new, params, carry)
  g_old = jax.jit(jax.grad(loss, argnums=(1, 2)), static_argnums=0)(f_old, params, carry)
  _allclose(g_new, g_old, rtol=1e-4, atol=1e-5)
  # The carry's gradient is zero where the window's first step resets it (env 1).
  assert float(jnp.abs(jax.tree.leaves(g_new[1])[0][1]).max()) == 0.0
  assert float(jnp.abs(jax.tree.leaves(g_new[1])[0][0]).max()) > 0.0


def test_scan_backward_equals_autodiff_of_the_loop():
  """`gru.scan`'s hand-written backward (fast paths on) against jax's autodiff of a plain
  scan of `gru.step`, for K = 2 stacked cells, vmapped over 3 sequences and not."""
  with fast_paths.use(True):
    _scan_backward_equals_autodiff_of_the_loop()


def _scan_backward_equals_autodiff_of_the_loop():
  k, h, t = 2, 4, 9
  ks = jax.random.split(jax.random.key(8), 5)
  w_h = jax.random.normal(ks[0], (k, h, 3 * h)) * 0.7
  b_h = jax.random.normal(ks[1], (k, 3 * h)) * 0.3
  h0 = jax.random.normal(ks[2], (3, k, h))
  xp = jax.random.normal(ks[3], (3, t, k, 3 * h))
  starts = jnp.zeros((3, t), bool).at[0, 4].set(True).at[2, 0].set(True)
  cot = jax.random.normal(ks[4], (3, t, k, h))

  def plain(w_h, b_h, h0, xp, starts):
    def body(c, inputs):
      c = gru.step(w_h, b_h, jnp.where(inputs[1], 0.0, c), inputs[0])
      return c, c
    return jax.lax.scan(body, h0, (xp, starts))[1]

  def loss(fn, w_h, b_h, h0, xp):
    return jnp.sum(cot * jnp.tanh(jax.vmap(fn, in_axes=(None, None, 0, 0, 0))(
        w_h, b_h, h0, xp, starts)))

  grad = jax.jit(jax.grad(loss, argnums=(1, 2, 3, 4)), static_argnums=0)
  _allclose(jax.vmap(gru.scan, in_axes=(None, None, 0, 0, 0))(w_h, b_h, h0, xp, starts),
            jax.vmap(plain, in_axes=(None, None, 0, 0, 0))(w_h, b_h, h0, xp, starts))
  _allclose(grad(gru.scan, w_h, b_h, h0, xp), grad(plain, w_h, b_h, h0, xp),
            rtol=1e-5, atol=1e-6)
  # One sequence, no vmap.
  g1 = jax.grad(lambda x: jnp.sum(cot[0] * gru.scan(w_h, b_h, h0[0], x, starts[0])))(xp[0])
  g2 = jax.grad(lambda x: jnp.sum(cot[0] * plain(w_h, b_h, h0[0], x, starts[0])))(xp[0])
  _allclose(g1, g2, rtol=1e-5, atol=1e-6)


def _fused_step(w_h, b_h, h, xp):
  """The reference formulation: one `[H, 3H]` recurrent matmul whose product is sliced
  per gate; jax's tanh and sigmoid."""
  size = h.shape[-1]
  hh = jnp.einsum("...kh,khg->...kg", h, w_h) + b_h
  rz = jax.nn.sigmoid(xp[..., :2 * size] + hh[..., :2 * size])
  r, z = rz[..., :size], rz[..., size:]
  n = jnp.tanh(xp[..., 2 * size:] + r * hh[..., 2 * size:])
  return (1.0 - z) * n + z * h


def _fused_scan(w_h, b_h, h0, xp, starts):
  def body(c, inputs):
    c = _fused_step(w_h, b_h, jnp.where(inputs[1], 0.0, c), inputs[0])
    return c, c
  return jax.lax.scan(body, h0, (xp, starts))[1]


@pytest.mark.parametrize("fast,k,t", [(False, 2, 9), (True, 2, 9), (True, 1, 1)])
def test_step_and_scan_equal_the_fused_formulation(fast, k, t):
  """`gru.step` and `gru.scan` against the fused-matmul cell differentiated by JAX (the
  arithmetic the fast-paths-off path has): with the fast paths on (written-out
  activations, hand-written backward) and off, values and gradients in all four inputs,
  nonzero recurrent biases on every gate, resets inside the window, jit and vmap, the
  kernels given concatenated `[K, H, 3H]`."""
  with fast_paths.use(fast):
    _step_and_scan_equal_the_fused_formulation(k, t)


def _step_and_scan_equal_the_fused_formulation(k, t):
  h = 5
  ks = jax.random.split(jax.random.key(9), 6)
  w_h = jax.random.normal(ks[0], (k, h, 3 * h)) * 0.6
  b_h = jax.random.normal(ks[1], (k, 3 * h)) * 0.4
  h0 = jax.random.normal(ks[2], (3, k, h))
  xp = jax.random.normal(ks[3], (3, t, k, 3 * h)) * 1.5
  starts = jnp.zeros((3, t), bool).at[0, t // 2].set(True).at[2, 0].set(True)
  cot = jax.random.normal(ks[4], (3, t, k, h))
  batched = lambda fn: jax.vmap(fn, in_axes=(None, None, 0, 0, 0))
  # One step, batched dims in front, jitted and not.
  _allclose(jax.jit(gru.step)(w_h, b_h, h0, xp[:, 0]),
            _fused_step(w_h, b_h, h0, xp[:, 0]))
  _allclose(gru.step(w_h, b_h, h0[0], xp[0, 0]), _fused_step(w_h, b_h, h0[0], xp[0, 0]))

  def loss(fn, w_h, b_h, h0, xp):
    return jnp.sum(cot * jnp.sin(batched(fn)(w_h, b_h, h0, xp, starts)))

  _allclose(jax.jit(batched(gru.scan))(w_h, b_h, h0, xp, starts),
            batched(_fused_scan)(w_h, b_h, h0, xp, starts))
  grad = jax.grad(loss, argnums=(1, 2, 3, 4))
  _allclose(jax.jit(grad, static_argnums=0)(gru.scan, w_h, b_h, h0, xp),
            grad(_fused_scan, w_h, b_h, h0, xp), rtol=1e-5, atol=1e-6)
  # One sequence, no vmap, no jit: the gradients.
  g1 = jax.grad(lambda *a: jnp.sum(cot[1] * gru.scan(*a, starts[1])),
                argnums=(0, 1, 2, 3))(w_h, b_h, h0[1], xp[1])
  g2 = jax.grad(lambda *a: jnp.sum(cot[1] * _fused_scan(*a, starts[1])),
                argnums=(0, 1, 2, 3))(w_h, b_h, h0[1], xp[1])
  _allclose(g1, g2, rtol=1e-5, atol=1e-6)


def test_scan_checks_its_shapes():
  w_h, b_h = jnp.zeros((1, 4, 12)), jnp.zeros((1, 12))
  with pytest.raises(ValueError, match="xp \\[T, K, 3H\\]"):
    gru.scan(w_h, b_h, jnp.zeros((1, 4)), jnp.zeros((5, 1, 11)), jnp.zeros((5,), bool))
  with pytest.raises(ValueError, match="h0 \\[K, H\\]"):
    gru.scan(w_h, b_h, jnp.zeros((4,)), jnp.zeros((5, 1, 12)), jnp.zeros((5,), bool))


def test_rational_tanh_matches_jnp_tanh():
  x = jnp.concatenate([jnp.linspace(-12.0, 12.0, 200_001), jnp.array([0.0, 1e-30, -1e-8]),
                       jnp.array([jnp.inf, -jnp.inf])])
  got = jax.jit(gru.tanh)(x)
  np.testing.assert_allclose(got, jnp.tanh(x), rtol=3e-7, atol=3e-7)
  assert float(jnp.max(jnp.abs(got))) <= 1.0
  # Against float64 tanh. Largest errors measured on these points (jax 0.10.2, CPU): at
  # XLA's default optimisation level (3), 2.60e-7, as jnp.tanh's own (the polynomials
  # are evaluated with fused multiply-adds); at --xla_backend_optimization_level=0 (the
  # test suite's setting, tests/conftest.py; no fused multiply-adds), 3.19e-7, while
  # jnp.tanh stays 2.60e-7. 4e-7 holds at both levels.
  ref = np.tanh(np.asarray(x, np.float64))
  assert np.max(np.abs(np.asarray(got, np.float64) - ref)) <= 4e-7
