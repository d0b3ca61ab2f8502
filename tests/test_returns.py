"""Tests for credit_jax.returns: NumPy loops, rlax as an oracle, identities, properties."""
import functools

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

import credit_jax as cj
from credit_jax import returns

METHODS = ("scan", "associative")


# ----------------------------------------------------------------------------------
# References: plain loops over time that follow the boundary rules of credit_jax/returns.py's
# docstring (docs/ARCHITECTURE.md, "Shapes and episode boundaries as data") literally.


def np_gae(r, d, v, lam, term, trunc, fv):
  """[T, ...] float64 advantages, one step at a time."""
  num_steps = r.shape[0]
  d = np.broadcast_to(_steps(d, r.shape), r.shape)
  lam = np.broadcast_to(_steps(lam, r.shape), r.shape)
  adv = np.zeros(r.shape, np.float64)
  future = np.zeros(r.shape[1:], np.float64)
  for t in reversed(range(num_steps)):
    next_value = np.where(trunc[t], fv[t], v[t + 1])
    delta = r[t] + d[t] * (1.0 - term[t]) * next_value - v[t]
    done = term[t] | trunc[t]
    future = delta + d[t] * lam[t] * (1.0 - done) * future
    adv[t] = future
  return adv


def np_discounted_returns(r, d, bootstrap, term, trunc, fv):
  num_steps = r.shape[0]
  d = np.broadcast_to(_steps(d, r.shape), r.shape)
  ret = np.zeros(r.shape, np.float64)
  g = np.broadcast_to(np.asarray(bootstrap, np.float64), r.shape[1:])
  for t in reversed(range(num_steps)):
    g = np.where(term[t], r[t], np.where(trunc[t], r[t] + d[t] * fv[t], r[t] + d[t] * g))
    ret[t] = g
  return ret


def _steps(x, shape):
  """Broadcasts a scalar, [T] or [T, ...] per-step array against `shape`."""
  x = np.asarray(x, np.float64)
  if x.ndim == 1 and len(shape) > 1:
    x = x.reshape((shape[0],) + (1,) * (len(shape) - 1))
  return x


def make_episodes(seed, shape, p_term=0.15, p_trunc=0.15, lam_kind="scalar"):
  """Multi-episode float32 data with both kinds of boundary (some steps both)."""
  rng = np.random.default_rng(seed)
  r = rng.normal(size=shape).astype(np.float32)
  d = rng.uniform(0.8, 1.0, size=shape).astype(np.float32)
  v = rng.normal(size=(shape[0] + 1,) + shape[1:]).astype(np.float32)
  term = rng.random(shape) < p_term
  trunc = rng.random(shape) < p_trunc
  fv = rng.normal(size=shape).astype(np.float32)
  lam = {"scalar": np.float32(0.9),
         "steps": rng.uniform(0, 1, size=shape[:1]).astype(np.float32),
         "full": rng.uniform(0, 1, size=shape).astype(np.float32)}[lam_kind]
  return r, d, v, lam, term, trunc, fv


def boundaries(term, trunc, fv):
  return dict(terminated=term, truncated=trunc, final_values=fv)


# ----------------------------------------------------------------------------------
# Against the NumPy loops, on multi-episode data.


def test_golden_case_by_hand():
  # Step 1 terminates, step 2 is truncated with final value 4, v[4] = 8 bootstraps.
  r = np.ones(4, np.float32)
  v = np.array([2, 2, 2, 2, 8], np.float32)
  term = np.array([0, 1, 0, 0], bool)
  trunc = np.array([0, 0, 1, 0], bool)
  fv = np.array([0, 0, 4, 0], np.float32)
  kw = boundaries(term, trunc, fv)
  # deltas: 1 + .5 * 2 - 2 = 0, 1 - 2 = -1, 1 + .5 * 4 - 2 = 1, 1 + .5 * 8 - 2 = 3.
  np.testing.assert_allclose(cj.gae(r, 0.5, v, 1.0, **kw), [-0.5, -1, 1, 3])
  np.testing.assert_allclose(cj.lambda_returns(r, 0.5, v, 1.0, **kw), [1.5, 1, 3, 5])
  np.testing.assert_allclose(
      cj.discounted_returns(r, 0.5, bootstrap_value=8.0, **kw), [1.5, 1, 3, 5])
  np.testing.assert_allclose(cj.td_errors(r, 0.5, v, **kw), [0, -1, 1, 3])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape,lam_kind", [((17, 3), "scalar"), ((17, 3), "steps"),
                                            ((9, 2, 3), "full"), ((6,), "steps")])
def test_gae_and_lambda_returns_match_numpy_loop(method, shape, lam_kind):
  r, d, v, lam, term, trunc, fv = make_episodes(0, shape, lam_kind=lam_kind)
  want = np_gae(r, d, v, lam, term, trunc, fv)
  kw = boundaries(term, trunc, fv)
  np.testing.assert_allclose(cj.gae(r, d, v, lam, method=method, **kw), want,
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(cj.lambda_returns(r, d, v, lam, method=method, **kw),
                             want + v[:-1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_discounted_returns_match_numpy_loop(method):
  r, d, v, _, term, trunc, fv = make_episodes(1, (23, 4))
  got = cj.discounted_returns(r, d, bootstrap_value=v[-1], method=method,
                              **boundaries(term, trunc, fv))
  np.testing.assert_allclose(got, np_discounted_returns(r, d, v[-1], term, trunc, fv),
                             rtol=1e-5, atol=1e-5)
  # Terminated only (Monte Carlo returns-to-go), scalar discount, no bootstrap.
  got = cj.discounted_returns(r, 0.9, terminated=term | trunc, method=method)
  none = np.zeros_like(term)
  np.testing.assert_allclose(
      got, np_discounted_returns(r, 0.9, 0.0, term | trunc, none, fv), rtol=1e-5,
      atol=1e-5)


def test_td_errors_match_numpy():
  r, d, v, _, term, trunc, fv = make_episodes(2, (11, 3))
  want = np_gae(r, d, v, 0.0, term, trunc, fv)  # lambda = 0: GAE is the TD error
  np.testing.assert_allclose(cj.td_errors(r, d, v, **boundaries(term, trunc, fv)), want,
                             rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------
# rlax as the oracle on single-episode data, T from 1 to 10^4.


@functools.lru_cache(maxsize=None)
def _rlax_fns():
  gae_fn = jax.jit(jax.vmap(rlax.truncated_generalized_advantage_estimation,
                            in_axes=(1, 1, None, 1), out_axes=1))
  ret_fn = jax.jit(jax.vmap(rlax.lambda_returns, in_axes=(1, 1, 1, None), out_axes=1))
  return gae_fn, ret_fn


@pytest.mark.parametrize("num_steps", [1, 2, 17, 1000, 10000])
def test_matches_rlax(num_steps):
  rng = np.random.default_rng(num_steps)
  shape = (num_steps, 3)
  r = rng.normal(size=shape).astype(np.float32)
  d = rng.uniform(0.9, 1.0, size=shape).astype(np.float32)
  v = rng.normal(size=(num_steps + 1, 3)).astype(np.float32)
  lam = np.float32(0.95)
  rlax_gae, rlax_ret = _rlax_fns()
  want_adv = rlax_gae(r, d, lam, v)
  want_ret = rlax_ret(r, d, v[1:], lam)
  for method in METHODS:
    np.testing.assert_allclose(cj.gae(r, d, v, lam, method=method), want_adv,
                               rtol=1e-4, atol=1e-4, err_msg=method)
    np.testing.assert_allclose(cj.lambda_returns(r, d, v, lam, method=method), want_ret,
                               rtol=1e-4, atol=1e-4, err_msg=method)


def test_matches_rlax_per_step_lambda_one_stream():
  rng = np.random.default_rng(3)
  r = rng.normal(size=50).astype(np.float32)
  d = rng.uniform(0.9, 1.0, size=50).astype(np.float32)
  v = rng.normal(size=51).astype(np.float32)
  lam = rng.uniform(0, 1, size=50).astype(np.float32)
  np.testing.assert_allclose(
      cj.gae(r, d, v, lam), rlax.truncated_generalized_advantage_estimation(r, d, lam, v),
      rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(cj.lambda_returns(r, d, v, lam),
                             rlax.lambda_returns(r, d, v[1:], lam), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------
# Cross-identities.


@pytest.mark.parametrize("method", METHODS)
def test_gae_lambda_one_plus_values_is_bootstrapped_return(method):
  r, d, v, _, term, trunc, fv = make_episodes(4, (30, 2, 2))
  kw = boundaries(term, trunc, fv)
  lhs = cj.gae(r, d, v, 1.0, method=method, **kw) + v[:-1]
  rhs = cj.discounted_returns(r, d, bootstrap_value=v[-1], method=method, **kw)
  np.testing.assert_allclose(lhs, rhs, rtol=1e-5, atol=1e-5)


def test_gae_lambda_zero_is_td_error_and_lambda_return_minus_values_is_gae():
  r, d, v, lam, term, trunc, fv = make_episodes(5, (20, 3), lam_kind="full")
  kw = boundaries(term, trunc, fv)
  np.testing.assert_allclose(cj.gae(r, d, v, 0.0, **kw), cj.td_errors(r, d, v, **kw),
                             rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(cj.lambda_returns(r, d, v, lam, **kw) - v[:-1],
                             cj.gae(r, d, v, lam, **kw), rtol=1e-5, atol=1e-5)


def test_associative_equals_scan_long_multi_episode():
  r, d, v, lam, term, trunc, fv = make_episodes(6, (1500, 4), 0.003, 0.003, "steps")
  kw = boundaries(term, trunc, fv)
  np.testing.assert_allclose(cj.gae(r, d, v, lam, method="associative", **kw),
                             cj.gae(r, d, v, lam, method="scan", **kw),
                             rtol=1e-4, atol=1e-4)


def test_no_boundaries_equals_all_false_boundaries():
  r, d, v, lam, _, _, fv = make_episodes(7, (12, 2))
  none = np.zeros(r.shape, bool)
  np.testing.assert_allclose(cj.gae(r, d, v, lam),
                             cj.gae(r, d, v, lam, **boundaries(none, none, fv)),
                             rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------------
# Properties over random shapes and boundaries. Shapes come from a few buckets so the
# whole run compiles a handful of programs, not one per example.

SHAPES = ((1,), (7,), (16, 3), (5, 2, 3))


@hypothesis.settings(max_examples=30, deadline=None, derandomize=True)
@hypothesis.given(
    shape=st.sampled_from(SHAPES), lam_kind=st.sampled_from(("scalar", "steps", "full")),
    p_term=st.sampled_from((0.0, 0.2, 1.0)), p_trunc=st.sampled_from((0.0, 0.3, 1.0)),
    seed=st.integers(0, 2**16))
def test_property_random_boundaries(shape, lam_kind, p_term, p_trunc, seed):
  r, d, v, lam, term, trunc, fv = make_episodes(seed, shape, p_term, p_trunc, lam_kind)
  kw = boundaries(term, trunc, fv)
  want = np_gae(r, d, v, lam, term, trunc, fv)
  for method in METHODS:
    got = np.asarray(cj.gae(r, d, v, lam, method=method, **kw))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=method)
  # Credit never crosses a boundary: changing every reward after the first boundary
  # of a stream leaves the advantages up to and including that boundary unchanged.
  done = (term | trunc).reshape(shape[0], -1)
  first = np.where(done.any(0), done.argmax(0), shape[0] - 1)
  later = np.arange(shape[0])[:, None] > first[None, :]
  r2 = np.where(later.reshape(shape), r + 5.0, r).astype(np.float32)
  got2 = np.asarray(cj.gae(r2, d, v, lam, **kw)).reshape(shape[0], -1)
  keep = ~later & done.any(0)[None, :]
  np.testing.assert_allclose(got2[keep], got.reshape(shape[0], -1)[keep], rtol=1e-6,
                             atol=1e-6)


# ----------------------------------------------------------------------------------
# jit, vmap, gradients.


@pytest.mark.parametrize("method", METHODS)
def test_jit_and_vmap(method):
  r, d, v, _, term, trunc, fv = make_episodes(8, (10, 3))
  kw = boundaries(term, trunc, fv)
  eager = cj.gae(r, d, v, 0.7, method=method, **kw)
  jitted = jax.jit(lambda *a: cj.gae(*a, method=method, **kw))(r, d, v, 0.7)
  np.testing.assert_allclose(jitted, eager, rtol=1e-6, atol=1e-6)
  # A sweep over lambda is a vmap over a traced leaf (no range check, no recompile).
  lams = jnp.array([0.0, 0.5, 1.0])
  swept = jax.vmap(lambda lam: cj.gae(r, d, v, lam, method=method, **kw))(lams)
  for i, lam in enumerate([0.0, 0.5, 1.0]):
    np.testing.assert_allclose(swept[i], cj.gae(r, d, v, lam, method=method, **kw),
                               rtol=1e-6, atol=1e-6)
  # Per-stream use: vmap over the batch axis of single-stream calls.
  per_stream = jax.vmap(
      lambda *a: cj.gae(a[0], a[1], a[2], 0.7, method=method, terminated=a[3],
                        truncated=a[4], final_values=a[5]),
      in_axes=1, out_axes=1)(r, d, v, term, trunc, fv)
  np.testing.assert_allclose(per_stream, eager, rtol=1e-6, atol=1e-6)


def test_gradients_match_rlax_without_stop():
  r, d, v, _, _, _, _ = make_episodes(9, (15,))
  ours = jax.grad(lambda v, r: jnp.sum(cj.gae(r, d, v, 0.8) ** 2), argnums=(0, 1))(v, r)
  theirs = jax.grad(lambda v, r: jnp.sum(
      rlax.truncated_generalized_advantage_estimation(r, d, 0.8, v) ** 2),
                    argnums=(0, 1))(v, r)
  for a, b in zip(ours, theirs):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", METHODS)
def test_stop_target_gradients(method):
  r, d, v, _, term, trunc, fv = make_episodes(10, (9, 2))
  kw = boundaries(term, trunc, fv)
  sum_of = lambda fn, **extra: (lambda v, r, fv: jnp.sum(fn(v, r, fv, **extra)))
  gae_fn = lambda v, r, fv, stop: cj.gae(r, d, v, 0.8, method=method, terminated=term,
                                         truncated=trunc, final_values=fv,
                                         stop_target_gradients=stop)
  # Same values either way.
  np.testing.assert_array_equal(gae_fn(v, r, fv, True), gae_fn(v, r, fv, False))
  gv, gr, gfv = jax.grad(sum_of(gae_fn, stop=True), argnums=(0, 1, 2))(v, r, fv)
  want_gv = np.concatenate([-np.ones((9, 2)), np.zeros((1, 2))])
  np.testing.assert_array_equal(gv, want_gv)  # only the baseline v_t gets gradient
  np.testing.assert_array_equal(gr, np.zeros_like(r))
  np.testing.assert_array_equal(gfv, np.zeros_like(fv))
  gv_live, gr_live, _ = jax.grad(sum_of(gae_fn, stop=False), argnums=(0, 1, 2))(v, r, fv)
  assert np.abs(np.asarray(gv_live) - want_gv).max() > 0.1
  assert np.all(np.asarray(gr_live) >= 1.0)  # dA_t/dr_t = 1 plus discounted later terms
  # gae(lambda=0) == td_errors in gradient as well as in value.
  gtd = jax.grad(lambda v: jnp.sum(cj.td_errors(r, d, v, stop_target_gradients=True,
                                                **kw)))(v)
  g0 = jax.grad(lambda v: jnp.sum(cj.gae(r, d, v, 0.0, method=method,
                                         stop_target_gradients=True, **kw)))(v)
  np.testing.assert_array_equal(gtd, g0)
  # Lambda-returns as targets: no gradient at all.
  gret = jax.grad(lambda v: jnp.sum(cj.lambda_returns(
      r, d, v, 0.8, method=method, stop_target_gradients=True, **kw)))(v)
  np.testing.assert_array_equal(gret, np.zeros_like(v))


# ----------------------------------------------------------------------------------
# Method choice and dtypes.


def test_resolve_method():
  assert returns.resolve_method("auto", 5000, "cpu") == "scan"
  assert returns.resolve_method("auto", 5000, "gpu") == "associative"
  assert returns.resolve_method("auto", 1, "gpu") == "scan"
  assert returns.resolve_method("associative", 3, "cpu") == "associative"
  with pytest.raises(ValueError, match="method"):
    returns.resolve_method("fast", 3)


def test_low_precision_inputs_accumulate_in_float32():
  r, d, v, _, _, _, _ = make_episodes(11, (40, 2))
  out = cj.gae(r.astype(jnp.bfloat16), d.astype(jnp.bfloat16), v.astype(jnp.bfloat16), 0.9)
  assert out.dtype == jnp.float32


# ----------------------------------------------------------------------------------
# Bad input: a ValueError naming the argument, raised before anything is traced.

T, B = 5, 3
GOOD = dict(rewards=np.zeros((T, B), np.float32), discounts=np.full((T, B), 0.9, np.float32),
            values=np.zeros((T + 1, B), np.float32), lambda_=0.9)


@pytest.mark.parametrize("change,match", [
    (dict(values=np.zeros((T, B), np.float32)), r"values must be \[T \+ 1, \.\.\.\] = \(6, 3\)"),
    (dict(values=np.zeros((T + 1, B + 1), np.float32)), r"values.*\(6, 4\)"),
    (dict(rewards=np.float32(1.0)), r"rewards must be \[T, \.\.\.\]"),
    (dict(rewards=np.zeros((T, B), np.int32)), r"rewards must have a floating dtype"),
    (dict(values=np.zeros((T + 1, B), np.int32)), r"values must have a floating dtype"),
    (dict(discounts=np.ones((T, B), np.int32)), r"discounts must have a floating dtype"),
    (dict(discounts=np.ones((T + 1, B), np.float32)), r"discounts must be a scalar.*\(6, 3\)"),
    (dict(lambda_=1.5), r"lambda_ must lie in \[0, 1\]"),
    (dict(lambda_=-0.1), r"lambda_ must lie in \[0, 1\]"),
    (dict(lambda_=np.array([0.5, 0.5, 2.0, 0.5, 0.5], np.float32)), r"lambda_ must lie"),
    (dict(lambda_=np.full((T - 1,), 0.5, np.float32)), r"lambda_ must be a scalar.*\(4,\)"),
    (dict(terminated=np.zeros((T, B + 1), bool)), r"terminated must have the shape"),
    (dict(truncated=np.zeros((T, B), bool)), r"truncated needs final_values"),
    (dict(final_values=np.zeros((T, B), np.float32)), r"final_values is only read"),
    (dict(method="fastest"), r"method must be one of"),
    (dict(stop_target_gradients=jnp.array(True)), r"stop_target_gradients must be"),
])
def test_bad_input_raises_before_compiling(monkeypatch, change, match):
  def must_not_run(*args, **kwargs):
    raise AssertionError("validation should have failed before the compiled call")
  monkeypatch.setattr(returns, "_gae_jit", must_not_run)
  kwargs = dict(GOOD, **change)
  with pytest.raises(ValueError, match=match):
    cj.gae(kwargs.pop("rewards"), kwargs.pop("discounts"), kwargs.pop("values"),
           kwargs.pop("lambda_"), **kwargs)


def test_bad_input_other_functions():
  r, d, v = GOOD["rewards"], GOOD["discounts"], GOOD["values"]
  with pytest.raises(ValueError, match=r"bootstrap_value must be a scalar or \[\.\.\.\]"):
    cj.discounted_returns(r, d, bootstrap_value=np.zeros((B + 1,), np.float32))
  with pytest.raises(ValueError, match=r"values must be \[T \+ 1"):
    cj.td_errors(r, d, v[:-1])
  with pytest.raises(ValueError, match=r"lambda_ must lie"):
    cj.lambda_returns(r, d, v, 2.0)
  with pytest.raises(ValueError, match=r"at least one step"):
    cj.gae(r[:0], d[:0], v[:1], 0.5)


def test_traced_lambda_is_not_range_checked():
  r, d, v = GOOD["rewards"], GOOD["discounts"], GOOD["values"]
  out = jax.jit(lambda lam: cj.gae(r, d, v, lam))(0.5)
  assert out.shape == (T, B)
