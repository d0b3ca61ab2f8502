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


# --- DQN without relabeling, on a non-goal environment (bsuite's chains) -----------------

def _umbrella_config(chain_length=3, n_distractor=0):
  from credit_jax.experiments.bsuite import specs
  c = dqn.default_config()
  c.env_name = specs.ENV_IDS["umbrella_length"]
  c.env_kwargs = {"chain_length": chain_length, "n_distractor": n_distractor}
  c.relabel_weight, c.reward_offset, c.clip_target = 0.0, 0.0, False
  c.num_envs, c.horizon, c.eval_envs = 16, chain_length, 32
  c.num_updates, c.grad_steps, c.batch_size, c.buffer_size = 100, 16, 32, 2_000
  c.epsilon, c.gamma, c.target_tau, c.lr = 0.1, 0.99, 0.5, 3e-3
  c.network.hidden_sizes = (32,)
  return c


@pytest.mark.parametrize("field,value,match", [
    ("relabel_weight", 1.0, "config.env_name: .* is not a goal environment .* "
                            "set relabel_weight=0"),
    ("clip_target", True, "config.clip_target: its bounds assume a goal environment"),
])
def test_non_goal_env_fields_are_named(field, value, match):
  c = _umbrella_config()
  c[field] = value
  with pytest.raises(algos.ConfigError, match=match):
    algos.validate_config(c)


def test_double_q_targets_match_a_numpy_loop():
  rng = np.random.default_rng(0)
  n, a, gamma = 50, 3, 0.9
  reward = rng.normal(size=n).astype(np.float32)
  discount = (rng.uniform(size=n) < 0.7).astype(np.float32)
  q_on = rng.normal(size=(n, a)).astype(np.float32)
  q_tg = rng.normal(size=(n, a)).astype(np.float32)
  want = np.empty(n, np.float32)
  for i in range(n):
    best = max(range(a), key=lambda j: q_on[i, j])
    want[i] = reward[i] + gamma * discount[i] * q_tg[i, best]
  got = dqn.double_q_targets(jnp.asarray(reward), jnp.asarray(discount),
                             jnp.asarray(q_on), jnp.asarray(q_tg), gamma)
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
  clipped = dqn.double_q_targets(jnp.asarray(reward), jnp.asarray(discount),
                                 jnp.asarray(q_on), jnp.asarray(q_tg), gamma, (-0.5, 0.5))
  np.testing.assert_allclose(clipped, np.clip(want, -0.5, 0.5), rtol=1e-6, atol=1e-6)
  with pytest.raises(ValueError, match="need reward, discount"):
    dqn.double_q_targets(jnp.asarray(reward), jnp.asarray(discount),
                         jnp.asarray(q_on), jnp.asarray(q_tg[:, :2]), gamma)


def test_plain_dqn_learns_a_3_step_umbrella_scored_by_info_success():
  c = _umbrella_config()
  train = algos.make_train(c)
  hp = {k: jnp.full((2,), v) for k, v in train.default_hparams.items()}
  keys = jax.random.split(jax.random.PRNGKey(0), 4)[:2]
  state, m = jax.jit(jax.vmap(train))(keys, hp)
  greedy = np.asarray(m["greedy_success"])
  # measured (4 seeds): 0.58-0.86 after 20 cycles, 1.0 in all from 90 to 100
  assert np.all(greedy[:, -5:].mean(axis=1) >= 0.9), greedy[:, -5:]
  assert np.all(greedy[:, :3].mean(axis=1) < 0.9), greedy[:, :3]
  # Early, near-random play picks the right umbrella about half the time; `success`
  # is info["success"] (the right umbrella), not "a positive reward".
  assert 0.2 < float(np.asarray(m["success"])[:, :3].mean()) < 0.8
  np.testing.assert_array_equal(m["relabeled_frac"], 0.0)
  # bsuite's umbrella pays a random +-1 at every step before the last, so the return
  # is not the umbrella's +-1 (a positive reward is no success signal here); its
  # distractor rewards average 0, so over many episodes the mean return is the
  # umbrella's 2 success - 1 (last 20 cycles: 640 episodes, std of the mean ~0.06).
  ret, succ = np.asarray(m["return"])[:, -20:], np.asarray(m["success"])[:, -20:]
  assert abs(ret.mean() - (2 * succ.mean() - 1)) < 0.3, (ret.mean(), succ.mean())
  assert succ.mean() > 0.8, succ.mean()
  # Every valid step is written, 16 episodes x 3 steps per cycle, up to the capacity.
  np.testing.assert_array_equal(state.aux["buffer"].size, 2_000)
