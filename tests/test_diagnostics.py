"""Tests for credit_jax.diagnostics against hand-worked cases.

The 2-step problem used throughout: KeyChain with T = 2, k = 1, A = 2 and fixed
positions, so step 0 is a distractor and step 1 is pivotal with a uniform cue c. Under
the uniform tabular policy (logits 0, shape [3, 2]) the reward is R = [a_1 = c]:

  score at step 0: row 0 gets e_{a0} - (1/2, 1/2), squared norm 1/2;
  score at step 1: row 1 + c gets e_{a1} - (1/2, 1/2), squared norm 1/2;
  terminal-reward estimate g = R (s_0 + s_1), the two scores in different rows.
  E[g] = E[R s_1] = 1/2 * 1/2 * (e_c - 1/2) in row 1 + c: rows 1, 2 = +-(1/8, -1/8),
  which is also d/dlogits of J = q = (1/2) sum_c softmax(logits[1 + c])[c]; ||grad J||^2 = 1/16.
  E||g||^2 = P(R = 1) * (1/2 + 1/2) = 1/2, so trace Cov(g) = 1/2 - 1/16 = 7/16.
  Discounted returns-to-go, psi = (gamma R, R): E||g||^2 = (1 + gamma^2)/4, Cov trace
  (1 + gamma^2)/4 - 1/16 (= 1/4 at gamma = 1/2), same mean.
  A constant baseline b (GAE lambda = 1, V = b): E||g||^2 = E[(R - b)^2] * 1 =
  (1 - b)^2/2 + b^2/2, Cov trace 3/16 at b = 1/2, same mean.
"""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import diagnostics as dg
from credit_jax.experiments.grpo_degradation import degenerate_groups as dgg
from credit_jax.experiments.variance_scaling import exact
from credit_jax import envs, rollout

TRUE_GRAD_2STEP = np.array([[0.0, 0.0], [0.125, -0.125], [-0.125, 0.125]])
LOGITS_2STEP = jnp.zeros((3, 2), jnp.float32)


def _two_step_outcomes():
  """All 8 equally likely (c, a0, a1) of the 2-step problem as a [2, 8] batch."""
  obs, actions, rewards = [], [], []
  for c, a0, a1 in itertools.product(range(2), repeat=3):
    cue = np.eye(2)[c]
    obs.append([np.zeros(4), np.concatenate([cue, [1.0, 0.5]])])
    actions.append([a0, a1])
    rewards.append([0.0, float(a1 == c)])
  swap = lambda x, dtype: jnp.asarray(np.swapaxes(np.array(x), 0, 1), dtype)
  return swap(obs, jnp.float32), swap(actions, jnp.int32), swap(rewards, jnp.float32)


def _grads(weights, obs, actions, logits=LOGITS_2STEP):
  return dg.flatten_gradients(dg.per_trajectory_gradients(
      exact.tabular_log_prob, logits, obs, actions, weights))


def _population_variance(grads):
  return float(jnp.sum(jnp.var(grads, axis=0)))


def test_keychain_context_maps_distractor_and_cues():
  obs = jnp.array([[0, 0, 0, 0, 0, 0.3],      # distractor
                   [0, 0, 1, 0, 1, 0.5],      # pivotal, cue 2
                   [1, 0, 0, 0, 1, 0.9]], jnp.float32)
  np.testing.assert_array_equal(dg.keychain_context(obs, 4), [0, 3, 1])
  with pytest.raises(ValueError, match="obs must be"):
    dg.keychain_context(obs, 3)


def test_true_gradient_hand_case_and_finite_differences():
  np.testing.assert_allclose(exact.keychain_true_gradient(LOGITS_2STEP, 1), TRUE_GRAD_2STEP,
                             atol=1e-7)
  # k = 2 at the uniform policy: d(q^2) = 2 q dq = dq at q = 1/2.
  np.testing.assert_allclose(exact.keychain_true_gradient(LOGITS_2STEP, 2), TRUE_GRAD_2STEP,
                             atol=1e-7)
  logits = jax.random.normal(jax.random.key(0), (5, 4), jnp.float32)
  for reward in exact.REWARDS:
    grad = np.asarray(exact.keychain_true_gradient(logits, 3, reward), np.float64)
    eps = 1e-2
    for i, j in [(0, 1), (2, 2), (3, 0), (4, 3)]:
      bump = jnp.zeros_like(logits).at[i, j].set(eps)
      fd = (exact.keychain_objective(logits + bump, 3, reward)
            - exact.keychain_objective(logits - bump, 3, reward)) / (2 * eps)
      np.testing.assert_allclose(grad[i, j], fd, rtol=2e-2, atol=1e-5)
    assert np.all(grad[0] == 0.0)   # distractor logits do not move J


def test_biased_logits_set_the_success_rate():
  logits = dgg.biased_logits(4, 0.9)
  probs = jax.nn.softmax(logits, axis=-1)
  np.testing.assert_allclose(jnp.diagonal(probs[1:]), 0.9, rtol=1e-6)
  np.testing.assert_allclose(probs[0], 0.25, rtol=1e-6)
  np.testing.assert_allclose(exact.keychain_objective(logits, 3), 0.9 ** 3, rtol=1e-5)
  np.testing.assert_array_equal(dgg.biased_logits(4, 0.25), jnp.zeros((5, 4)))
  with pytest.raises(ValueError, match="q must lie"):
    dgg.biased_logits(4, 1.0)


def test_two_step_exact_moments_by_enumeration():
  obs, actions, rewards = _two_step_outcomes()
  terminated = jnp.zeros((2, 8), bool).at[1].set(True)
  terminal = _grads(dg.credit_weights("terminal", rewards), obs, actions)
  np.testing.assert_allclose(jnp.mean(terminal, 0), TRUE_GRAD_2STEP.ravel(), atol=1e-7)
  np.testing.assert_allclose(_population_variance(terminal), 7 / 16, rtol=1e-6)

  rtg1 = _grads(dg.credit_weights("rtg", rewards, discount=1.0, terminated=terminated),
                obs, actions)
  np.testing.assert_array_equal(rtg1, terminal)

  rtg_half = _grads(dg.credit_weights("rtg", rewards, discount=0.5, terminated=terminated),
                    obs, actions)
  np.testing.assert_allclose(jnp.mean(rtg_half, 0), TRUE_GRAD_2STEP.ravel(), atol=1e-7)
  np.testing.assert_allclose(_population_variance(rtg_half), 1 / 4, rtol=1e-6)

  values = jnp.full((3, 8), 0.5).at[2].set(0.0)
  baseline = _grads(dg.credit_weights("gae", rewards, lambda_=1.0, values=values,
                                      terminated=terminated), obs, actions)
  np.testing.assert_allclose(jnp.mean(baseline, 0), TRUE_GRAD_2STEP.ravel(), atol=1e-7)
  np.testing.assert_allclose(_population_variance(baseline), 3 / 16, rtol=1e-6)


def test_gradient_stats_on_the_two_step_population():
  obs, actions, rewards = _two_step_outcomes()
  grads = _grads(dg.credit_weights("terminal", rewards), obs, actions)
  stats = jax.jit(dg.gradient_stats)(grads, jnp.asarray(TRUE_GRAD_2STEP.ravel(),
                                                         jnp.float32))
  n = grads.shape[0]
  np.testing.assert_allclose(stats["variance"], 7 / 16 * n / (n - 1), rtol=1e-6)
  np.testing.assert_allclose(stats["mse"], 7 / 16, rtol=1e-6)      # unbiased: mse = Cov
  np.testing.assert_allclose(stats["snr"], 1 / 7, rtol=1e-6)
  np.testing.assert_allclose(stats["cosine"], 1.0, rtol=1e-6)
  np.testing.assert_allclose(stats["true_norm_sq"], 1 / 16, rtol=1e-6)
  # A scheme that credits only the distractor step: mean 0, bias = -grad J.
  blind = _grads(jnp.stack([rewards[1], jnp.zeros(8)]), obs, actions)
  stats = dg.gradient_stats(blind, jnp.asarray(TRUE_GRAD_2STEP.ravel(), jnp.float32))
  np.testing.assert_allclose(stats["mse"], 1 / 4 + 1 / 16, rtol=1e-6)
  assert float(stats["cosine"]) == 0.0


def test_two_step_monte_carlo_on_the_real_environment():
  env, env_params = envs.make("KeyChain-v0", horizon=2, num_pivotal=1, num_actions=2,
                              positions="fixed")
  traj = jax.jit(lambda k: rollout.collect_episodes(
      env, env_params, dg.tabular_policy, LOGITS_2STEP, k, 8000, 2))(jax.random.key(3))
  np.testing.assert_array_equal(traj.info["pivotal"][:, 0], [False, True])
  grads = _grads(dg.credit_weights("terminal", traj.rewards, valid=traj.valid),
                 traj.obs, traj.actions)
  stats = dg.gradient_stats(grads, jnp.asarray(TRUE_GRAD_2STEP.ravel(), jnp.float32))
  # ||g||^2 is 0 or 1 (variance 1/4), so E||g||^2 has SE sqrt(1/4 / 8000) < 0.006.
  np.testing.assert_allclose(stats["variance"], 7 / 16, atol=0.03)
  np.testing.assert_allclose(stats["snr"], 1 / 7, rtol=0.1)
  assert float(stats["bias"]) < 0.05
  assert float(stats["cosine"]) > 0.9


def test_terminal_and_undiscounted_returns_to_go_coincide_on_keychain():
  env, env_params = envs.make("KeyChain-v0", horizon=12, num_pivotal=2, num_actions=2)
  logits = jnp.zeros((3, 2), jnp.float32)
  traj = rollout.collect_episodes(env, env_params, dg.tabular_policy, logits,
                                  jax.random.key(0), 64, 12)
  assert float(jnp.sum(traj.rewards)) > 0   # some episodes succeed: a real comparison
  terminal = dg.credit_weights("terminal", traj.rewards, valid=traj.valid)
  rtg = dg.credit_weights("rtg", traj.rewards, discount=1.0, terminated=traj.terminated,
                          valid=traj.valid)
  np.testing.assert_array_equal(terminal, rtg)
  np.testing.assert_array_equal(
      _grads(terminal, traj.obs, traj.actions, logits),
      _grads(rtg, traj.obs, traj.actions, logits))
  # Spread evenly, credit lands on pivotal steps k/T of the time.
  np.testing.assert_allclose(dg.credit_accuracy(terminal, traj.info["pivotal"]), 2 / 12,
                             rtol=1e-6)


def test_credit_accuracy_hand_case():
  weights = jnp.array([[1.0, 3.0], [1.0, -1.0]])
  pivotal = jnp.array([[True, False], [False, True]])
  np.testing.assert_allclose(dg.credit_accuracy(weights, pivotal), 2 / 6, rtol=1e-6)
  np.testing.assert_allclose(
      dg.credit_accuracy(weights, pivotal, valid=jnp.array([[True, True], [False, True]])),
      2 / 5, rtol=1e-6)
  assert np.isnan(float(dg.credit_accuracy(jnp.zeros((2, 2)), pivotal)))
  with pytest.raises(ValueError, match="pivotal"):
    dg.credit_accuracy(weights, pivotal[0])


def test_fit_time_value_is_the_per_step_mean():
  targets = jnp.array([[1.0, 3.0, 100.0], [2.0, 2.0, 100.0]])
  valid = jnp.array([[True, True, False], [True, True, False]])
  np.testing.assert_allclose(exact.fit_time_value(targets, valid), [2.0, 2.0, 0.0])


def test_degenerate_fraction_hand_case_and_analytic_values():
  rewards = jnp.array([[0.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
  assert float(dgg.degenerate_fraction(rewards)) == 0.5
  np.testing.assert_allclose(dgg.analytic_degenerate_fraction(0.5, 2), 0.5)
  np.testing.assert_allclose(dgg.analytic_degenerate_fraction(jnp.array([0.0, 1.0]), 8), 1.0)
  np.testing.assert_allclose(dgg.analytic_degenerate_fraction(0.1, 8), 0.1 ** 8 + 0.9 ** 8,
                             rtol=1e-6)
  # K = 3 by enumeration: only 000 and 111 of the 8 patterns are degenerate.
  p = 0.3
  patterns = list(itertools.product((0, 1), repeat=3))
  prob = sum(p ** sum(x) * (1 - p) ** (3 - sum(x)) for x in patterns if len(set(x)) == 1)
  np.testing.assert_allclose(dgg.analytic_degenerate_fraction(p, 3), prob, rtol=1e-6)


@pytest.mark.parametrize("p", [0.02, 0.2, 0.9])
def test_measured_degenerate_fraction_matches_analytic_within_3se(p):
  groups, size = 20000, 8
  rewards = jax.random.bernoulli(jax.random.key(7), p, (groups, size)).astype(jnp.float32)
  analytic = float(dgg.analytic_degenerate_fraction(p, size))
  se = np.sqrt(analytic * (1 - analytic) / groups)
  assert abs(float(dgg.degenerate_fraction(rewards)) - analytic) <= 3 * se


def test_informative_success_range():
  low, high = dgg.informative_success_range(8, 0.5)
  np.testing.assert_allclose(dgg.analytic_degenerate_fraction(low, 8), 0.5, atol=1e-6)
  np.testing.assert_allclose(low + high, 1.0, atol=1e-12)
  assert 0.08 < low < 0.09
  with pytest.raises(ValueError, match="max_degenerate"):
    dgg.informative_success_range(4, 0.1)   # below the floor 2^(1-K) = 0.125


def test_loglog_slope():
  x = np.array([10.0, 100.0, 1000.0])
  assert abs(exact.loglog_slope(x, 3.0 * x ** 1.5) - 1.5) < 1e-9
  with pytest.raises(ValueError, match="positive"):
    exact.loglog_slope(x, np.array([1.0, 0.0, 2.0]))


def test_shape_checks_name_the_argument():
  obs, actions, rewards = _two_step_outcomes()
  with pytest.raises(ValueError, match="weights"):
    dg.per_trajectory_gradients(exact.tabular_log_prob, LOGITS_2STEP, obs, actions,
                                rewards[:, :4])
  with pytest.raises(ValueError, match="true_grad"):
    dg.gradient_stats(jnp.zeros((4, 6)), jnp.zeros(5))
  with pytest.raises(ValueError, match="scheme"):
    dg.credit_weights("mc", rewards)
  with pytest.raises(ValueError, match="logits"):
    exact.tabular_log_prob(jnp.zeros((2, 2)), obs[0, 0], 0)
