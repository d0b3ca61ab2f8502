"""Tests for the GAE-gradient measurement against KeyChain's exact gradient
(credit_jax.addons.gae_probe), by exhaustive NumPy enumeration of a tiny case."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import diagnostics, envs, nets
from credit_jax.addons import gae_probe
from credit_jax.algos.ppo_agent import OracleFeatureWrapper
from credit_jax.envs.keychain import KeyChain

T, K, A = 3, 2, 2


def softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def tabular_logits(theta, obs):
  """A per-step tabular actor: logits theta[t, context], theta [T, A + 1, A]."""
  t = jnp.round(obs[..., A + 1] * T).astype(jnp.int32)
  return theta[t, diagnostics.keychain_context(obs, A)]


def exact_value(env, theta, gamma):
  """V(state) of the tabular actor, from the full state (positions and cues included)."""
  probs = jax.nn.softmax(theta, axis=-1)

  def value(state):
    right = probs[state.positions, 1 + state.cues, state.cues]          # [k]
    ahead = state.positions >= state.time
    success = state.all_correct * jnp.prod(jnp.where(ahead, right, 1.0))
    return (gamma ** jnp.maximum(T - 1 - state.time, 0) * success)[None]
  return value


class ValueKeyChain(KeyChain):
  """KeyChain whose oracle feature is the exact state value of a fixed actor."""

  def __init__(self, value_fn, **kwargs):
    super().__init__(**kwargs)
    self._value = value_fn

  def oracle_feature(self, state):
    return self._value(state)


def numpy_reference(env, theta, gamma, lam):
  """(J, grad J, E[g]) by enumerating positions, cues and every action sequence."""
  probs = softmax(np.asarray(theta, np.float64))
  position_probs, cue_probs = env.draw_probabilities()
  q = [sum(position_probs[i, t] * cue_probs[c] * probs[t, 1 + c, c]
           for t in range(T) for c in range(A)) for i in range(K)]
  dq = np.zeros((K,) + probs.shape)
  for i, t, c in itertools.product(range(K), range(T), range(A)):
    dq[i, t, 1 + c] += position_probs[i, t] * cue_probs[c] * probs[t, 1 + c, c] * (
        np.eye(A)[c] - probs[t, 1 + c])
  grad_j = sum(np.prod([q[j] for j in range(K) if j != i]) * dq[i] for i in range(K))
  expected = np.zeros_like(probs)
  for pos in itertools.product(range(T), repeat=K):
    p_pos = np.prod([position_probs[i, pos[i]] for i in range(K)])
    if p_pos == 0:
      continue
    for cues in itertools.product(range(A), repeat=K):
      p_cue = np.prod([cue_probs[c] for c in cues])
      ctx = [1 + cues[pos.index(t)] if t in pos else 0 for t in range(T)]
      for acts in itertools.product(range(A), repeat=T):
        prob = p_pos * p_cue * np.prod([probs[t, ctx[t], acts[t]] for t in range(T)])
        right = [acts[pos[i]] == cues[i] for i in range(K)]
        reward = np.zeros(T)
        reward[-1] = float(all(right))
        values = np.zeros(T + 1)
        for t in range(T):
          ok = all(right[i] for i in range(K) if pos[i] < t)
          ahead = np.prod([probs[pos[i], 1 + cues[i], cues[i]] for i in range(K)
                           if pos[i] >= t])
          values[t] = gamma ** (T - 1 - t) * ok * ahead
        deltas = reward + gamma * values[1:] - values[:-1]
        adv, running = np.zeros(T), 0.0
        for t in reversed(range(T)):
          running = deltas[t] + gamma * lam * running
          adv[t] = running
        for t in range(T):
          expected[t, ctx[t]] += prob * adv[t] * (np.eye(A)[acts[t]] - probs[t, ctx[t]])
  return float(np.prod(q)), grad_j, expected


THETA = jax.random.normal(jax.random.PRNGKey(7), (T, A + 1, A)) * 1.5


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (1.0, 0.5), (0.5, 0.5)])
def test_gae_gradient_against_enumeration(gamma, lam):
  env, params = envs.make("KeyChain-v0", horizon=T, num_pivotal=K, num_actions=A)
  j, grad_j, expected = numpy_reference(env, THETA, gamma, lam)
  # The exact objective and gradient by autodiff equal the NumPy ones.
  np.testing.assert_allclose(gae_probe.keychain_success_probability(
      env, tabular_logits, THETA), j, rtol=1e-5)
  np.testing.assert_allclose(jax.grad(lambda th: gae_probe.keychain_success_probability(
      env, tabular_logits, th))(THETA), grad_j, rtol=1e-4, atol=1e-7)
  # The reference itself: unbiased with gamma = 1 and the exact value, for any lambda.
  bias_ref = np.linalg.norm(expected - grad_j) / np.linalg.norm(grad_j)
  cos_ref = np.sum(expected * grad_j) / np.linalg.norm(expected) / np.linalg.norm(grad_j)
  if gamma == 1.0:
    assert bias_ref < 1e-12
  else:
    assert bias_ref > 0.3 and cos_ref < 0.99
  # The measurement, with the exact state value as the critic (an oracle feature).
  value_env = OracleFeatureWrapper(ValueKeyChain(
      exact_value(env, THETA, gamma), horizon=T, num_pivotal=K, num_actions=A))
  n = 4096
  episode_gradients = jax.jit(gae_probe.make_episode_gradients(
      value_env, params, tabular_logits, lambda cp, traj: traj.obs[..., -1], n))
  grads, true_grad, objective, success = episode_gradients(
      THETA, None, jax.random.PRNGKey(0), gamma, lam)
  np.testing.assert_allclose(true_grad, grad_j.ravel(), rtol=1e-4, atol=1e-7)
  np.testing.assert_allclose(objective, j, rtol=1e-5)
  assert abs(float(success) - j) < 5 * np.sqrt(j * (1 - j) / n)
  # The batch mean is E[g] up to its standard error, coordinate by coordinate.
  se = np.asarray(jnp.std(grads, axis=0)) / np.sqrt(n)
  np.testing.assert_array_less(np.abs(np.asarray(grads.mean(0)) - expected.ravel()),
                               5 * se + 1e-7)
  stats = gae_probe.gradient_stats(grads, true_grad)   # what make_measure reports
  if gamma == 1.0:
    assert float(stats["bias"]) < 0.1 and float(stats["cosine"]) > 0.99
  else:
    np.testing.assert_allclose(stats["bias"], bias_ref, atol=0.1)
    np.testing.assert_allclose(stats["cosine"], cos_ref, atol=0.05)
    np.testing.assert_allclose(stats["cosine_debiased"], cos_ref, atol=0.05)
  se_mean = np.sqrt(np.sum(np.var(np.asarray(grads), axis=0, ddof=1)) / n)
  np.testing.assert_allclose(stats["noise"], se_mean / np.linalg.norm(grad_j), rtol=1e-4)
  u = grad_j.ravel() / np.linalg.norm(grad_j)
  np.testing.assert_allclose(stats["variance_along"], np.var(np.asarray(grads) @ u, ddof=1),
                             rtol=1e-4)
  assert float(stats["variance_along"]) <= float(stats["variance"])


def test_a_zero_critic_at_gamma_one_is_unbiased_and_a_state_blind_one_too():
  # Any baseline of the observation leaves the gradient unbiased at gamma = lambda = 1;
  # an observation-only critic with lambda < 1 bootstraps from values that are not the
  # state's and is biased.
  env, params = envs.make("KeyChain-v0", horizon=T, num_pivotal=K, num_actions=A)
  _, grad_j, _ = numpy_reference(env, THETA, 1.0, 1.0)
  measure = jax.jit(gae_probe.make_measure(
      env, params, tabular_logits, lambda cp, traj: cp * jnp.ones(traj.rewards.shape), 8192))
  zero = measure(THETA, 0.0, jax.random.PRNGKey(1), 1.0, 1.0)
  const = measure(THETA, 0.3, jax.random.PRNGKey(1), 1.0, 1.0)
  boot = measure(THETA, 0.3, jax.random.PRNGKey(1), 1.0, 0.0)
  assert float(zero["bias"]) < 0.1 and float(const["bias"]) < 0.1
  assert float(boot["bias"]) > 0.3
  np.testing.assert_allclose(zero["true_norm"], np.linalg.norm(grad_j), rtol=1e-4)


def test_exact_objective_of_an_mlp_matches_sampled_success():
  # The pivotal observations the enumeration builds are the ones a rollout sees (time
  # feature included): J of a sharp random MLP equals its sampled success rate.
  env, params = envs.make("KeyChain-v0", horizon=6, num_pivotal=2, num_actions=2)
  net = nets.ActorCritic(num_actions=2, hidden_sizes=(8,), value_head=False)
  net_params = net.init(jax.random.PRNGKey(3), jnp.zeros((4,)))
  logits_fn = lambda p, o: 30.0 * net.apply(p, o)[0]
  j = float(gae_probe.keychain_success_probability(env, logits_fn, net_params))
  measure = jax.jit(gae_probe.make_measure(
      env, params, logits_fn, lambda cp, traj: jnp.zeros(traj.rewards.shape), 8192))
  stats = measure(net_params, None, jax.random.PRNGKey(2), 1.0, 0.95)
  assert set(stats) == set(gae_probe.STAT_NAMES)
  assert 0.05 < j < 0.95 and abs(float(stats["success"]) - j) < 5 * np.sqrt(j / 8192)
  np.testing.assert_allclose(stats["objective"], j, rtol=1e-6)


def test_measure_errors():
  env, params = envs.make("KeyChain-v0", horizon=6, num_pivotal=2, num_actions=2,
                          cue_delay=1)
  value = lambda cp, traj: jnp.zeros(traj.rewards.shape)
  with pytest.raises(ValueError, match="cue_delay = 0"):
    gae_probe.make_measure(env, params, tabular_logits, value, 8)
  env, params = envs.make("KeyChain-v0", horizon=6, num_pivotal=2, num_actions=2,
                          max_steps_in_episode=4)
  with pytest.raises(ValueError, match="max_steps_in_episode >= horizon"):
    gae_probe.make_measure(env, params, tabular_logits, value, 8)
  env, params = envs.make("BitFlip-v0")
  with pytest.raises(ValueError, match="needs KeyChain-v0"):
    gae_probe.make_measure(env, params, tabular_logits, value, 8)
  env, params = envs.make("KeyChain-v0", horizon=T, num_pivotal=K, num_actions=A)
  with pytest.raises(ValueError, match="num_episodes must be >= 2"):
    gae_probe.make_measure(env, params, tabular_logits, value, 1)
  bad = gae_probe.make_measure(env, params, tabular_logits,
                                  lambda cp, traj: jnp.zeros((T + 1, 4)), 4)
  with pytest.raises(ValueError, match="value_fn must return"):
    bad(THETA, None, jax.random.PRNGKey(0), 1.0, 1.0)
