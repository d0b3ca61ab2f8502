"""Bad input, fuzzed: estimators, group baselines and environment options.

Every case either raises ValueError/TypeError at entry naming the argument, or behaves
as the docstrings say (credit_jax/returns.py's module docstring, `group_advantages`,
`running_baseline_update`, `credit_jax.envs.make`). Shapes stay tiny and few so that the
jit caches are reused across examples (compiles dominate the time).
"""
import hypothesis
import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credit_jax as cj
from credit_jax import baselines

FUZZ = hypothesis.settings(max_examples=25, deadline=None, derandomize=True,
                           suppress_health_check=[hypothesis.HealthCheck.too_slow])
METHODS = ("scan", "associative")
BIG = float(np.float32(1e30))   # 1e30, exactly representable in float32
SHAPES = ((1, 2), (3, 2), (4, 1))     # [T, B]: few, so compiles are reused


def _floats(shape, low=-BIG, high=BIG):
  return hnp.arrays(np.float32, shape, elements=st.floats(
      low, high, width=32, allow_nan=False, allow_infinity=False))


@st.composite
def episodes(draw, shapes=SHAPES):
  """A window of auto-reset episodes with rewards and values up to 1e30 in size."""
  t, b = draw(st.sampled_from(shapes))
  term = draw(hnp.arrays(np.bool_, (t, b)))
  trunc = draw(hnp.arrays(np.bool_, (t, b))) & ~term
  return dict(r=draw(_floats((t, b))), v=draw(_floats((t + 1, b))),
              fv=draw(_floats((t, b))), d=draw(_floats((t, b), 0.0, 1.0)),
              lam=draw(st.floats(0.0, 1.0, width=32)), term=term, trunc=trunc)


# ----------------------------------------------------------------------------------
# Estimators: references are plain float64 loops over time (the boundary rules of
# credit_jax/returns.py's docstring and docs/ARCHITECTURE.md).


def np_advantages(r, d, v, lam, term, trunc, fv):
  adv, future = np.zeros(r.shape), np.zeros(r.shape[1:])
  for t in reversed(range(r.shape[0])):
    nxt = np.where(trunc[t], fv[t], v[t + 1]).astype(np.float64)
    delta = r[t] + d[t] * (1.0 - term[t]) * nxt - v[t]
    future = delta + d[t] * lam * (1.0 - (term[t] | trunc[t])) * future
    adv[t] = future
  return adv


def np_discounted(r, d, term, trunc, fv):
  out, future = np.zeros(r.shape), np.zeros(r.shape[1:])
  for t in reversed(range(r.shape[0])):
    boot = np.where(trunc[t], fv[t], future).astype(np.float64)
    future = r[t] + d[t] * np.where(term[t], 0.0, boot)
    out[t] = future
  return out


def _all(e, method):
  """{estimator: [T, B] result} for episodes `e`, every estimator, one method."""
  bounds = dict(terminated=e["term"], truncated=e["trunc"], final_values=e["fv"])
  return {
      "gae": cj.gae(e["r"], e["d"], e["v"], e["lam"], method=method, **bounds),
      "lambda_returns": cj.lambda_returns(e["r"], e["d"], e["v"], e["lam"],
                                          method=method, **bounds),
      "td_errors": cj.td_errors(e["r"], e["d"], e["v"], **bounds),
      "discounted_returns": cj.discounted_returns(e["r"], e["d"], method=method,
                                                  **bounds),
  }


def _references(e):
  adv = np_advantages(e["r"], e["d"], e["v"], e["lam"], e["term"], e["trunc"], e["fv"])
  td = np_advantages(e["r"], e["d"], e["v"], 0.0, e["term"], e["trunc"], e["fv"])
  return {"gae": adv, "lambda_returns": adv + e["v"][:-1], "td_errors": td,
          "discounted_returns": np_discounted(e["r"], e["d"], e["term"], e["trunc"],
                                              e["fv"])}


@FUZZ
@hypothesis.given(e=episodes(), method=st.sampled_from(METHODS))
def test_estimators_extreme_finite_values_stay_finite_and_match_loops(e, method):
  got, want = _all(e, method), _references(e)
  # float32 rounding of terms up to ~T * 1e30: the error scales with the inputs.
  scale = 1.0 + max(np.abs(e[k]).max() for k in ("r", "v", "fv"))
  for name, value in got.items():
    assert value.shape == e["r"].shape and value.dtype == jnp.float32, name
    assert np.all(np.isfinite(value)), name
    np.testing.assert_allclose(value, want[name], rtol=1e-4, atol=1e-5 * scale,
                               err_msg=name)


@FUZZ
@hypothesis.given(e=episodes(shapes=((4, 3),)), method=st.sampled_from(METHODS),
                  where=st.sampled_from(("r", "v", "fv")),
                  bad=st.sampled_from((np.nan, np.inf, -np.inf)),
                  t=st.integers(0, 3), b=st.integers(0, 2))
def test_non_finite_input_reaches_only_its_element_and_earlier_steps(
    e, method, where, bad, t, b):
  e = {k: np.asarray(x).copy() for k, x in e.items()}
  e = {k: (x.item() if x.ndim == 0 else x) for k, x in e.items()}
  clean = _all(e, method)
  e[where][t, b] = bad
  dirty = _all(e, method)
  for name in clean:
    c, d = np.asarray(clean[name]), np.asarray(dirty[name])
    others = np.arange(3) != b
    np.testing.assert_array_equal(d[:, others], c[:, others], err_msg=name)
    np.testing.assert_array_equal(d[t + 1:, b], c[t + 1:, b], err_msg=name)
    if where == "fv" and not e["trunc"][t, b]:
      np.testing.assert_array_equal(d, c, err_msg=f"{name}: final value not read")


@pytest.mark.parametrize("method", METHODS)
def test_empty_batch_and_dtypes(method):
  r, v = np.zeros((3, 0), np.float32), np.zeros((4, 0), np.float32)
  assert cj.gae(r, 0.9, v, 0.9, method=method).shape == (3, 0)
  assert cj.discounted_returns(r, 0.9, method=method).shape == (3, 0)
  # float64 and float16 inputs: computed in float32 (x64 is off), same numbers.
  rng = np.random.default_rng(0)
  r, v = rng.normal(size=(4, 2)), rng.normal(size=(5, 2))
  want = cj.gae(r.astype(np.float32), 0.9, v.astype(np.float32), 0.8, method=method)
  got = cj.gae(r, 0.9, v, 0.8, method=method)
  assert got.dtype == jnp.float32
  np.testing.assert_array_equal(got, want)
  half = cj.gae(r.astype(np.float16), 0.9, v.astype(np.float16), 0.8, method=method)
  assert half.dtype == jnp.float32
  # Python numbers as discounts: an int 1 is the discount 1.0.
  np.testing.assert_array_equal(cj.discounted_returns(r.astype(np.float32), 1),
                                cj.discounted_returns(r.astype(np.float32), 1.0))


def _good(t=3, b=2):
  return dict(rewards=np.zeros((t, b), np.float32), discounts=np.full((t, b), 0.9,
              np.float32), values=np.zeros((t + 1, b), np.float32), lambda_=0.9,
              terminated=np.zeros((t, b), bool), truncated=np.zeros((t, b), bool),
              final_values=np.zeros((t, b), np.float32))


# (argument, bad value) pairs; each must raise naming the argument.
BAD_ESTIMATOR_INPUTS = [
    ("rewards", np.zeros((3, 2), np.int32)), ("rewards", np.zeros((3, 2), bool)),
    ("rewards", np.zeros((0, 2), np.float32)), ("rewards", np.float32(1.0)),
    ("rewards", [[0.0, 0.0]] * 3), ("rewards", np.zeros((3, 2), np.complex64)),
    ("discounts", np.ones((3, 2), bool)), ("discounts", np.ones((3, 2), np.int32)),
    ("discounts", np.full((3, 2), 1.5, np.float32)), ("discounts", -0.1),
    ("discounts", np.nan), ("discounts", np.inf), ("discounts", BIG),
    ("discounts", np.ones((4, 2), np.float32)), ("discounts", True),
    ("values", np.zeros((3, 2), np.float32)), ("values", np.zeros((4, 2), np.int32)),
    ("values", np.zeros((4, 3), np.float32)),
    ("lambda_", 1.5), ("lambda_", np.nan), ("lambda_", -np.inf),
    ("lambda_", np.ones((2,), np.float32)),
    ("terminated", np.zeros((3, 3), bool)), ("terminated", np.zeros((2, 2), bool)),
    ("terminated", [[False] * 2] * 3),
    ("truncated", np.zeros((3,), bool)),
    ("final_values", np.zeros((3, 2), np.int32)),
    ("final_values", np.zeros((3,), np.float32)),
]
ESTIMATORS = ("gae", "lambda_returns", "td_errors", "discounted_returns")


def _call(name, kw):
  kw = dict(kw)
  r, d = kw.pop("rewards"), kw.pop("discounts")
  if name == "discounted_returns":
    kw.pop("values"), kw.pop("lambda_")
    return cj.discounted_returns(r, d, **kw)
  v = kw.pop("values")
  if name == "td_errors":
    kw.pop("lambda_")
    return cj.td_errors(r, d, v, **kw)
  return getattr(cj, name)(r, d, v, kw.pop("lambda_"), **kw)


@FUZZ
@hypothesis.given(name=st.sampled_from(ESTIMATORS),
                  case=st.sampled_from(BAD_ESTIMATOR_INPUTS))
def test_bad_estimator_input_raises_naming_the_argument(name, case):
  arg, bad = case
  if arg in ("values", "lambda_") and name == "discounted_returns":
    arg, bad = "rewards", np.zeros((3, 2), np.int32)   # it takes neither
  if arg == "lambda_" and name == "td_errors":
    arg, bad = "discounts", np.nan
  kw = _good()
  kw[arg] = bad
  with pytest.raises((ValueError, TypeError), match=arg):
    _call(name, kw)


def test_boundary_pairs_and_method_are_checked():
  kw = _good()
  del kw["final_values"]
  with pytest.raises(ValueError, match="final_values"):
    _call("gae", kw)
  kw = _good()
  del kw["truncated"]
  with pytest.raises(ValueError, match="truncated"):
    _call("discounted_returns", kw)
  with pytest.raises(ValueError, match="method"):
    cj.gae(np.zeros((2, 1), np.float32), 0.9, np.zeros((3, 1), np.float32), 0.9,
           method="fast")


# ----------------------------------------------------------------------------------
# Group baselines.


def np_group(r, kind):
  r = r.astype(np.float64)
  k, mean = r.shape[-1], r.mean(-1, keepdims=True)
  if kind == "grpo":
    out = (r - mean) / (r.std(-1, ddof=1, keepdims=True) + 1e-6)
  elif kind == "rloo":
    out = r - (r.sum(-1, keepdims=True) - r) / (k - 1)
  else:
    out = r - mean
  degenerate = np.all(r == r[..., :1], axis=-1)
  return np.where(degenerate[..., None], 0.0, out), degenerate


@FUZZ
@hypothesis.given(kind=st.sampled_from(baselines.KINDS),
                  r=st.sampled_from(((3, 2), (2, 4))).flatmap(_floats),
                  tie=st.booleans())
def test_group_advantages_extreme_finite_rewards(kind, r, tie):
  if tie:
    r[0] = r[0, 0]                     # one degenerate group
  adv, degenerate = baselines.group_advantages(r, kind)
  want, want_degenerate = np_group(r, kind)
  np.testing.assert_array_equal(degenerate, want_degenerate)
  assert np.all(np.isfinite(adv))
  scale = 1.0 if kind == "grpo" else 1.0 + np.abs(r).max()
  np.testing.assert_allclose(adv, want, rtol=1e-3, atol=1e-5 * scale)
  assert np.all(np.asarray(adv)[np.asarray(degenerate)] == 0.0)


@FUZZ
@hypothesis.given(kind=st.sampled_from(baselines.KINDS), r=_floats((3, 4), -10, 10),
                  bad=st.sampled_from((np.nan, np.inf, -np.inf)),
                  g=st.integers(0, 2), i=st.integers(0, 3))
def test_group_advantages_non_finite_reward_stays_in_its_group(kind, r, bad, g, i):
  clean, _ = baselines.group_advantages(r, kind)
  r = r.copy()
  r[g, i] = bad
  adv, degenerate = baselines.group_advantages(r, kind)
  assert not np.any(np.isfinite(np.asarray(adv)[g])) and not degenerate[g]
  others = np.arange(3) != g
  np.testing.assert_array_equal(np.asarray(adv)[others], np.asarray(clean)[others])


@pytest.mark.parametrize("rewards, kind, eps, match", [
    (np.zeros((3, 1), np.float32), "grpo", 1e-6, "K >= 2"),
    (np.zeros((3, 0), np.float32), "rloo", 1e-6, "K >= 2"),
    (np.zeros((), np.float32), "grpo", 1e-6, "rewards"),
    (np.zeros((3, 4), np.int32), "grpo", 1e-6, "rewards"),
    (np.zeros((3, 4), bool), "grpo", 1e-6, "rewards"),
    ([[0.0, 1.0]], "grpo", 1e-6, "rewards"),
    (np.zeros((3, 4), np.float32), "ppo", 1e-6, "kind"),
    (np.zeros((3, 4), np.float32), "grpo", -1e-6, "eps"),
    (np.zeros((3, 4), np.float32), "grpo", np.nan, "eps"),
    (np.zeros((3, 4), np.float32), "grpo", np.ones(2), "eps"),
])
def test_group_advantages_bad_input(rewards, kind, eps, match):
  with pytest.raises(ValueError, match=match):
    baselines.group_advantages(rewards, kind, eps)


def test_group_advantages_empty_and_float64():
  adv, degenerate = baselines.group_advantages(np.zeros((0, 3), np.float32))
  assert adv.shape == (0, 3) and degenerate.shape == (0,)
  r = np.random.default_rng(0).normal(size=(2, 3))
  np.testing.assert_allclose(baselines.group_advantages(r)[0],
                             baselines.group_advantages(r.astype(np.float32))[0],
                             rtol=1e-6)


@FUZZ
@hypothesis.given(ids=hnp.arrays(np.int32, (5,), elements=st.integers(0, 2)),
                  r=_floats((5,), -BIG, BIG), bad=st.sampled_from((np.nan, np.inf)),
                  at=st.integers(0, 4), decay=st.floats(0.0, 1.0))
def test_running_baseline_extremes_and_non_finite_rewards(ids, r, bad, at, decay):
  state = baselines.running_baseline_init(3)
  clean = baselines.running_baseline_update(state, ids, r, decay)
  assert np.all(np.isfinite(clean.mean))
  assert np.all(np.isfinite(baselines.running_baseline_advantages(state, ids, r)))
  r = r.copy()
  r[at] = bad
  dirty = baselines.running_baseline_update(state, ids, r, decay)
  hit = np.arange(3) == ids[at]
  assert not np.isfinite(dirty.mean[hit][0])
  np.testing.assert_array_equal(dirty.mean[~hit], clean.mean[~hit])
  np.testing.assert_array_equal(dirty.count, clean.count)
  # An empty batch changes nothing.
  empty = baselines.running_baseline_update(clean, np.zeros((0,), np.int32),
                                            np.zeros((0,), np.float32), decay)
  np.testing.assert_array_equal(empty.mean, clean.mean)


@pytest.mark.parametrize("ids, rewards, decay, match", [
    (np.array([0, 3]), np.zeros(2, np.float32), 0.9, "task_ids"),
    (np.array([-1, 0]), np.zeros(2, np.float32), 0.9, "task_ids"),
    (np.array([0.0, 1.0]), np.zeros(2, np.float32), 0.9, "task_ids"),
    (np.array([0, 1]), np.zeros(3, np.float32), 0.9, "same shape"),
    (np.array([0, 1]), np.zeros(2, np.int32), 0.9, "rewards"),
    (np.array([0, 1]), np.zeros(2, np.float32), 1.5, "decay"),
    (np.array([0, 1]), np.zeros(2, np.float32), np.nan, "decay"),
    (np.array([0, 1]), np.zeros(2, np.float32), -0.1, "decay"),
])
def test_running_baseline_bad_input(ids, rewards, decay, match):
  state = baselines.running_baseline_init(3)
  with pytest.raises(ValueError, match=match):
    baselines.running_baseline_update(state, ids, rewards, decay)
  for n in (0, -1, 2.0, True):
    with pytest.raises(ValueError, match="num_tasks"):
      baselines.running_baseline_init(n)


# ----------------------------------------------------------------------------------
# Environment options through `cj.envs.make`.

# Small valid settings per option (so that builds which succeed compile quickly).
ENV_OPTIONS = {
    "KeyChain-v0": dict(horizon=(1, 6), num_pivotal=(1, 3), num_actions=(2, 4),
                        cue_delay=(0, 3), positions=("random", "fixed")),
    "BitFlip-v0": dict(num_bits=(1, 5)),
    "GoalGrid-v0": dict(size=(2, 4), targets=(None, "all", ((0, 0), (1, 1)))),
    "TextEdit-v0": dict(buffer_len=(1, 4), vocab_size=(2, 3), start_len=(0, 3),
                        num_edits=(0, 2), goal_edits=("substitute", "any", "all")),
}
HUGE = (2 ** 31, 10 ** 30)
UNBOUNDED = {("KeyChain-v0", "num_actions"), ("TextEdit-v0", "vocab_size")}
BAD_VALUES = (-1, 0, 2 ** 31, 10 ** 30, 2.5, float("nan"), float("inf"), True, "3", None,
              (1, 2), ())


def _valid(name):
  """One value per option: a small in-range one (an int range is (low, high))."""
  return st.fixed_dictionaries({k: (st.integers(*v) if isinstance(v[0], int) and
                                    not isinstance(v[0], bool) else st.sampled_from(v))
                                for k, v in ENV_OPTIONS[name].items()})


@st.composite
def env_overrides(draw):
  name = draw(st.sampled_from(sorted(ENV_OPTIONS)))
  kw = {k: v for k, v in draw(_valid(name)).items() if draw(st.booleans())}
  params = cj.envs.overrides_of(name)[1]
  corrupt = draw(st.sampled_from(sorted(ENV_OPTIONS[name]) + list(params) + [None]))
  if corrupt is not None:
    kw[corrupt] = draw(st.sampled_from(BAD_VALUES + (0.5, 1.0, 7)))
    # Options without an upper bound build (huge) environments: not run here.
    hypothesis.assume((name, corrupt) not in UNBOUNDED or kw[corrupt] not in HUGE)
  return name, kw, corrupt


_reset_step = {}


def _run_one_step(env, params):
  fns = _reset_step.setdefault(id(env), (jax.jit(env.reset), jax.jit(env.step)))
  obs, state = fns[0](jax.random.PRNGKey(0), params)
  obs2, _, reward, term, trunc, _ = fns[1](jax.random.PRNGKey(1), state, 0, params)
  return obs, obs2, reward, term, trunc


@hypothesis.settings(max_examples=40, deadline=None, derandomize=True,
                     suppress_health_check=[hypothesis.HealthCheck.too_slow])
@hypothesis.given(case=env_overrides())
def test_make_with_extreme_or_invalid_options(case):
  """make either refuses with a ValueError naming an option, or builds an environment
  whose reset and step give finite observations of its declared shape."""
  name, kw, corrupt = case
  names = sum(cj.envs.overrides_of(name), ())
  try:
    env, params = cj.envs.make(name, **kw)
  except ValueError as error:
    assert any(n in str(error) for n in names), str(error)
    return
  if corrupt in ("max_steps_in_episode",):
    limit = np.asarray(params.max_steps_in_episode)
    assert limit == np.round(limit) and 1 <= limit < 2 ** 31
  if corrupt == "slip_prob":
    assert 0.0 <= params.slip_prob <= 1.0
  obs, obs2, reward, term, trunc = _run_one_step(env, params)
  for o in (obs, obs2):
    assert o.shape == env.obs_shape and np.all(np.isfinite(o))
  assert np.isfinite(reward) and not (term and trunc)


def test_make_refuses_unknown_ids_and_options():
  with pytest.raises(ValueError, match="unknown environment"):
    cj.envs.make("NoSuchEnv-v0")
  with pytest.raises(ValueError, match="no option chain_length.*num_bits"):
    cj.envs.make("BitFlip-v0", chain_length=3)
  with pytest.raises(ValueError, match="name"):
    cj.envs.make(None)
