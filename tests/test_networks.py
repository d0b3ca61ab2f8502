"""Tests for credit_jax.nets: shapes, heads, and the hand-written categorical."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import fast_paths, nets
from credit_jax.types import PresampledPolicy


def _init(net, obs):
  return net.init(jax.random.PRNGKey(0), obs)


@pytest.mark.parametrize("shared", [False, True])
def test_actor_critic_shapes_single_and_batched(shared):
  net = nets.ActorCritic(num_actions=3, hidden_sizes=(8, 8), shared_torso=shared)
  params = _init(net, jnp.zeros((5,)))
  logits, value = net.apply(params, jnp.ones((5,)))
  assert logits.shape == (3,) and value.shape == ()
  logits, value = net.apply(params, jnp.ones((4, 7, 5)))
  assert logits.shape == (4, 7, 3) and value.shape == (4, 7)
  torsos = set(params["params"])
  assert ("v_torso" in torsos) == (not shared)


def test_policy_only_network_has_no_value_parameters():
  net = nets.ActorCritic(num_actions=2, hidden_sizes=(8,), value_head=False)
  params = _init(net, jnp.zeros((3,)))
  assert set(params["params"]) == {"pi_torso", "Dense_0"}
  _, value = net.apply(params, jnp.ones((6, 3)))
  np.testing.assert_array_equal(value, np.zeros(6))


def test_column_dense_is_dense_computed_by_columns():
  x = jax.random.normal(jax.random.PRNGKey(1), (5, 7, 6))
  dense, column = nn.Dense(3), nets.ColumnDense(3)
  params = dense.init(jax.random.PRNGKey(0), x)
  assert jax.tree.structure(column.init(jax.random.PRNGKey(0), x)) == \
      jax.tree.structure(params)
  np.testing.assert_allclose(column.apply(params, x), dense.apply(params, x), atol=1e-5)

  def grads(module):
    return jax.grad(lambda p: jnp.sum(jnp.sin(module.apply(p, x))))(params)
  for g_col, g_dense in zip(jax.tree.leaves(grads(column)),
                            jax.tree.leaves(grads(dense))):
    np.testing.assert_allclose(g_col, g_dense, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fast", [False, True])
def test_small_and_large_action_heads_share_parameter_names(fast):
  # With the fast paths on, ColumnDense serves heads of <= 8 actions and RowDense layers
  # of <= 8 inputs; checkpoints see the same tree either way.
  for num_actions in (2, 9):
    with fast_paths.use(fast):
      params = nets.ActorCritic(num_actions=num_actions).init(
          jax.random.PRNGKey(0), jnp.zeros(4))["params"]
    assert set(params) == {"pi_torso", "v_torso", "Dense_0", "Dense_1"}
    assert set(params["pi_torso"]) == {"Dense_0", "Dense_1"}
    assert params["Dense_0"]["kernel"].shape == (64, num_actions)


def test_initial_policy_is_near_uniform():
  net = nets.ActorCritic(num_actions=4)
  params = _init(net, jnp.zeros((6,)))
  logits, _ = net.apply(params, jax.random.normal(jax.random.PRNGKey(1), (32, 6)))
  probs = jax.nn.softmax(logits)
  np.testing.assert_allclose(probs, 0.25, atol=0.02)


def test_history_window_flattens_every_position():
  net = nets.ActorCritic(num_actions=4, hidden_sizes=(8,), obs_rank=2)
  params = _init(net, jnp.zeros((3, 6)))
  kernel = params["params"]["pi_torso"]["Dense_0"]["kernel"]
  assert kernel.shape == (18, 8)
  logits, value = net.apply(params, jnp.ones((2, 5, 3, 6)))
  assert logits.shape == (2, 5, 4) and value.shape == (2, 5)
  # The oldest frame matters: changing it changes the output.
  obs = jnp.zeros((3, 6))
  a, _ = net.apply(params, obs)
  b, _ = net.apply(params, obs.at[0, 0].set(1.0))
  assert not np.allclose(a, b)


def test_obs_of_too_low_rank_is_rejected():
  net = nets.ActorCritic(num_actions=2, hidden_sizes=(4,), obs_rank=2)
  params = _init(net, jnp.zeros((3, 2)))
  with pytest.raises(ValueError, match="obs_rank=2"):
    net.apply(params, jnp.zeros((2,)))


def test_unknown_activation_is_rejected():
  with pytest.raises(ValueError, match="activation"):
    nets.activation_fn("swishy")


def test_categorical_log_prob_entropy_kl_against_numpy():
  logits = jnp.array([[0.3, -1.0, 2.0], [0.0, 0.0, 0.0]])
  actions = jnp.array([2, 1])
  p = np.exp(np.asarray(logits)) / np.exp(np.asarray(logits)).sum(-1, keepdims=True)
  np.testing.assert_allclose(nets.categorical_log_prob(logits, actions),
                             np.log(p[[0, 1], [2, 1]]), rtol=1e-6)
  np.testing.assert_allclose(nets.categorical_entropy(logits),
                             -(p * np.log(p)).sum(-1), rtol=1e-6)
  q = p[::-1]
  np.testing.assert_allclose(nets.categorical_kl(logits, logits[::-1]),
                             (p * (np.log(p) - np.log(q))).sum(-1), rtol=1e-5)
  np.testing.assert_allclose(nets.categorical_kl(logits, logits), 0.0, atol=1e-7)


def test_categorical_log_prob_checks_shapes():
  with pytest.raises(ValueError, match="logits"):
    nets.categorical_log_prob(jnp.zeros((4, 3)), jnp.zeros((5,), jnp.int32))
  with pytest.raises(ValueError, match="logits_p"):
    nets.categorical_kl(jnp.zeros((4, 3)), jnp.zeros((4, 2)))


def test_categorical_sample_matches_probabilities():
  logits = jnp.log(jnp.array([0.1, 0.6, 0.3]))
  samples = nets.categorical_sample(jax.random.PRNGKey(0),
                                        jnp.broadcast_to(logits, (20000, 3)))
  assert samples.dtype == jnp.int32
  freq = np.bincount(np.asarray(samples), minlength=3) / samples.size
  np.testing.assert_allclose(freq, [0.1, 0.6, 0.3], atol=0.015)


def test_policy_fn_returns_action_log_prob_and_value():
  net = nets.ActorCritic(num_actions=3, hidden_sizes=(8,))
  params = _init(net, jnp.zeros((4,)))
  policy_fn = nets.make_policy_fn(net)
  obs = jnp.arange(4.0)
  action, log_prob, extras = policy_fn(params, obs, jax.random.PRNGKey(3))
  logits, value = net.apply(params, obs)
  assert action.shape == () and log_prob.shape == ()
  np.testing.assert_allclose(log_prob, jax.nn.log_softmax(logits)[action], rtol=1e-6)
  np.testing.assert_allclose(extras["value"], value)


def test_presampled_noise_gives_categorical_samples():
  # The policy's pre-drawable noise is jax.random.categorical's own Gumbel draw, so the
  # rollout engine's pre-drawn actions equal categorical_sample's under the same keys.
  logits = jax.random.normal(jax.random.PRNGKey(1), (64, 5))
  keys = jax.random.split(jax.random.PRNGKey(2), 64)
  noise = jax.vmap(lambda k: nets.categorical_noise(k, 5))(keys)
  assert noise.shape == (64, 5) and noise.dtype == jnp.float32
  mine = nets.categorical_sample_with_noise(logits, noise)
  ref = jax.vmap(nets.categorical_sample)(keys, logits)
  np.testing.assert_array_equal(mine, ref)
  assert mine.dtype == jnp.int32 and len(set(np.asarray(mine).tolist())) > 1
  with pytest.raises(ValueError, match="noise"):
    nets.categorical_sample_with_noise(logits, noise[:, :4])


def test_policy_fn_is_presampled_and_calls_alike():
  net = nets.ActorCritic(num_actions=3, hidden_sizes=(8,))
  params = _init(net, jnp.zeros((4,)))
  policy_fn = nets.make_policy_fn(net, value=False)
  assert isinstance(policy_fn, PresampledPolicy)
  obs, key = jnp.arange(4.0), jax.random.PRNGKey(7)
  action, log_prob, extras = policy_fn(params, obs, key)
  action2, log_prob2, _ = policy_fn.act(params, obs, policy_fn.draw(key))
  assert extras == {} and int(action) == int(action2)
  np.testing.assert_allclose(log_prob, log_prob2)
  logits, _ = net.apply(params, obs)
  assert int(action) == int(nets.categorical_sample(key, logits))
