"""Tests for credit_jax.algos.dqn: config checks, the epsilon-greedy policy, and a seeded
learning test (BitFlip n=8: DQN+HER learns it, DQN alone does not, in one compiled call)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import algos
from credit_jax.algos import train as train_lib, dqn
from config_files import load_config_module


def _config(num_bits=6, her=True):
  return load_config_module("dqn_bitflip").config(num_bits, her)


@pytest.mark.parametrize("field,value,match", [
    ("her_strategy", "all", "config.her_strategy: must be one of"),
    ("batch_size", 10**6, "config.buffer_size: .* is smaller than batch_size"),
    ("epsilon", 1.5, "config.epsilon"),
    ("env_name", "KeyChain-v0", "config.env_name: KeyChain-v0 is not a goal environment"),
])
def test_bad_config_fields_are_named(field, value, match):
  c = _config()
  c[field] = value
  if field == "env_name":
    c.env_kwargs = {}
  with pytest.raises(algos.ConfigError, match=match):
    algos.validate_config(c)


def test_epsilon_greedy_log_probs_match_the_distribution():
  c = _config(num_bits=3)
  env, params = train_lib.make_env(c)
  network, obs_shape = train_lib.make_network(c, env, params, value_head=False)
  net_params = train_lib.init_params(network, jax.random.PRNGKey(0), obs_shape)
  policy = dqn.epsilon_greedy_policy(network)
  obs = jnp.ones(obs_shape)
  greedy = int(jnp.argmax(network.apply(net_params, obs)[0]))
  keys = jax.random.split(jax.random.PRNGKey(1), 4000)
  actions, log_probs, _ = jax.jit(jax.vmap(policy, in_axes=((None, None), None, 0)))(
      (net_params, 0.3), obs, keys)
  freq = np.bincount(np.asarray(actions), minlength=3) / len(keys)
  expected = np.full(3, 0.1) + 0.7 * (np.arange(3) == greedy)
  np.testing.assert_allclose(freq, expected, atol=0.03)
  np.testing.assert_allclose(np.exp(log_probs), expected[np.asarray(actions)], rtol=1e-5)


def test_dqn_with_her_learns_bitflip_and_without_does_not():
  c = _config(num_bits=8)
  c.num_updates, c.grad_steps, c.eval_envs = 30, 16, 32
  c.buffer_size = 20_000
  train = algos.make_train(c)
  # Arm 0 with HER, arm 1 without (relabel_weight 0), 2 seeds each, one compiled call.
  weights = jnp.array([1.0, 1.0, 0.0, 0.0])
  hp = {k: jnp.full((4,), v) for k, v in train.default_hparams.items()}
  hp["relabel_weight"] = weights
  keys = jnp.tile(jax.random.split(jax.random.PRNGKey(0), 2), (2, 1))
  state, m = jax.jit(jax.vmap(train))(keys, hp)
  success = np.asarray(m["greedy_success"])[:, -5:].mean(axis=1)
  assert np.all(success[:2] >= 0.5), success   # measured: 0.75-0.89 over 3 seeds
  assert np.all(success[2:] <= 0.1), success   # measured: 0.006-0.013
  # `success` is the epsilon-greedy behaviour policy's: below the greedy one once the
  # greedy policy solves the task (epsilon = 0.2 of its actions are random).
  sampled = np.asarray(m["success"])[:, -5:].mean(axis=1)
  assert np.all((sampled[:2] > 0.1) & (sampled[:2] < success[:2])), (sampled, success)
  assert np.all(np.isfinite(m["loss"]))
  # Without HER no relabeled example is ever written; with HER, k=4 of 5 are relabeled.
  np.testing.assert_array_equal(m["relabeled_frac"][2:], 0.0)
  assert np.all(np.asarray(m["relabeled_frac"])[:2, 1:] > 0.7)
  assert np.all(state.aux["buffer"].size[:2] > state.aux["buffer"].size[2:])
