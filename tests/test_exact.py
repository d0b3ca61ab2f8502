"""The exact DP objective and gradient (credit_jax/exact.py) against brute-force enumeration
of every reset and every action sequence on tiny KeyChain probes and a tiny corridor."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from credit_jax import envs, exact, nets
from credit_jax.envs import keychain

PROBE = dict(segment_cue_onehot=True, distinct_rules=True, distractor_cues=True,
             pivotal_flag=False)


def _policies(env, key):
  """(apply_fn, params) of a table with a floor and of a small MLP (which sees t / T),
  at random parameters."""
  obs = jnp.zeros(env.obs_shape, jnp.float32)
  table = nets.make_table_network("tabular", env, env.obs_shape, False, min_prob=0.02)
  tp = table.init(key, obs)
  tp = jax.tree.map(lambda x: jax.random.normal(key, x.shape), tp)
  mlp = nets.ActorCritic(num_actions=env.num_actions, hidden_sizes=(8,), value_head=False)
  mp = mlp.init(key, obs)
  mp = jax.tree.map(lambda x: 2.0 * jax.random.normal(jax.random.fold_in(key, 1), x.shape),
                    mp)
  return [(lambda p, o: table.apply(p, o)[0], tp), (lambda p, o: mlp.apply(p, o)[0], mp)]


def _enumerate(env, env_params, apply_fn, params, starts, weights, horizon):
  """Sum over start states (with weights) and all A^T action sequences of
  P(actions) x expected return, stepping the environment itself."""
  a = env.num_actions
  seqs = jnp.asarray(list(itertools.product(range(a), repeat=horizon)), jnp.int32)

  def episode(start, actions):
    def body(carry, act):
      s, logp, ret = carry
      obs = env.get_obs(s, env_params)
      lp = jax.nn.log_softmax(apply_fn(params, obs[None])[0])[act]
      _, s, r, _, info = env.step_env(jax.random.key(0), s, act, env_params)
      return (s, logp + lp, ret + r), None
    (_, logp, ret), _ = jax.lax.scan(body, (start, 0.0, 0.0), actions)
    return jnp.exp(logp) * ret
  per_start = jax.vmap(lambda s: jnp.sum(jax.vmap(lambda q: episode(s, q))(seqs)))(starts)
  return jnp.sum(weights * per_start)


def _keychain_starts(env, env_params):
  """Every reset (positions x cues) with its exact probability."""
  pos_p, cue_p = env.draw_probabilities()
  _, s0 = env.reset(jax.random.key(5), env_params)
  rows, weights = [], []
  per_seg = [np.flatnonzero(pos_p[i] > 0) for i in range(env.num_pivotal)]
  cues = np.flatnonzero(cue_p > 0)
  for positions in itertools.product(*per_seg):
    for cs in itertools.product(cues, repeat=env.num_pivotal):
      rows.append((positions, cs))
      weights.append(np.prod([pos_p[i, p] for i, p in enumerate(positions)]) *
                     np.prod(cue_p[list(cs)]))
  positions = jnp.asarray([r[0] for r in rows], jnp.int32)
  cue_arr = jnp.asarray([r[1] for r in rows], jnp.int32)
  starts = jax.vmap(lambda p, c: s0.replace(positions=p, cues=c))(positions, cue_arr)
  return starts, jnp.asarray(weights, jnp.float32)


@pytest.mark.parametrize("switches", [PROBE, {}], ids=["probe", "default"])
def test_keychain_matches_enumeration(switches):
  horizon = 4
  env, env_params = envs.make("KeyChain-v0", horizon=horizon, num_pivotal=2, num_actions=2,
                              **switches)
  starts, weights = _keychain_starts(env, env_params)
  assert abs(float(weights.sum()) - 1.0) < 1e-6
  for apply_fn, params in _policies(env, jax.random.key(3)):
    j = exact.objective(env, env_params, apply_fn, params)
    g = ravel_pytree(exact.gradient(env, env_params, apply_fn, params))[0]
    enum = lambda p: _enumerate(env, env_params, apply_fn, p, starts, weights, horizon)  # noqa: E731
    value, ge = jax.jit(jax.value_and_grad(enum))(params)
    np.testing.assert_allclose(float(j), float(value), rtol=1e-5)
    ge = ravel_pytree(ge)[0]
    np.testing.assert_allclose(np.asarray(g), np.asarray(ge), rtol=1e-4, atol=1e-6)
    assert float(jnp.linalg.norm(g)) > 1e-3


def test_corridor_matches_enumeration():
  length = 6                       # cells: key, left apple, empty, right apple, door, end
  env, env_params = envs.make("ConveyorTreasure-v0", length=length)
  # Apple values are drawn per step; with low = high = their mean the enumeration is
  # deterministic and its expectation is the exact objective's.
  mean = env_params.replace(apple_low=0.5, apple_high=0.5)
  _, s0 = env.reset(jax.random.key(0), env_params)
  starts = jax.tree.map(lambda x: x[None], s0)
  for apply_fn, params in _policies(env, jax.random.key(4)):
    j = exact.objective(env, env_params, apply_fn, params)
    g = ravel_pytree(exact.gradient(env, env_params, apply_fn, params))[0]
    enum = lambda p: _enumerate(env, mean, apply_fn, p, starts, jnp.ones(1), length)  # noqa: E731
    value, ge = jax.jit(jax.value_and_grad(enum))(params)
    np.testing.assert_allclose(float(j), float(value), rtol=1e-5)
    ge = ravel_pytree(ge)[0]
    np.testing.assert_allclose(np.asarray(g), np.asarray(ge), rtol=1e-4, atol=1e-6)


def test_uniform_policy_values_and_jit():
  uniform = lambda p, o: jnp.zeros(o.shape[:-1] + (4,)) * p  # noqa: E731
  env, ep = envs.make("KeyChain-v0", horizon=1000, num_pivotal=3, num_actions=4, **PROBE)
  j = jax.jit(lambda p: exact.objective(env, ep, uniform, p))(jnp.float32(1.0))
  assert float(j) == pytest.approx(env.random_success(), rel=1e-5)
  cor, cp = envs.make("ConveyorTreasure-v0", length=103)
  assert float(exact.objective(cor, cp, uniform, 1.0)) == pytest.approx(
      cor.expected_return("random"), rel=1e-5)
  with pytest.raises(ValueError, match="KeyChain"):
    exact.objective(keychain.KeyChain(horizon=5, cue_delay=1), None, uniform, 1.0)
