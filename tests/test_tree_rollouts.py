"""Tests for tree-structured groups (credit_jax/addons/tree_groups.py): shared prefixes and their step count against the
formula, a sequence policy's carry across branches (log-probs replayed in NumPy), early
ends, the advantages of a hand-built tree, and GRPO as the one-level tree from the root."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import baselines, envs
from credit_jax.addons import tree_groups as tr

import step_credit_refs as refs

T, A = 8, 2
KEYCHAIN = envs.make("KeyChain-v0", horizon=T, num_pivotal=2, num_actions=A)
WEIGHTS = np.array([[1.0, -0.5, 0.3, 0.2], [-0.5, 1.0, -0.3, -0.4]])
trees = jax.jit(tr.collect_tree, static_argnums=(0, 2, 5, 6, 7, 8))


def test_leaves_share_their_prefixes_and_steps_match_the_formula():
  env, params = KEYCHAIN
  policy, _ = refs.linear_logits(WEIGHTS)
  n, branch, steps = 5, 2, (3, 6)
  out = trees(env, params, policy, None, jax.random.key(0), n, branch, steps, T)
  assert out.traj.obs.shape == (T, n, 4, A + 2) and out.owner.shape == (T, n, 4)
  actions = np.asarray(out.traj.actions)
  # Before tau_1 all 4 leaves are one path; in [tau_1, tau_2) leaves (0, 1) and (2, 3).
  assert np.all(actions[:3] == actions[:3, :, :1])
  np.testing.assert_array_equal(actions[3:6, :, 0], actions[3:6, :, 1])
  np.testing.assert_array_equal(actions[3:6, :, 2], actions[3:6, :, 3])
  # Copies go on independently: somewhere the two subtrees (and two siblings) differ.
  assert np.any(actions[3:6, :, 0] != actions[3:6, :, 2])
  assert np.any(actions[6:, :, 0] != actions[6:, :, 1])
  # Every leaf is a KeyChain episode: success iff every pivotal action was right.
  correct = np.asarray(out.traj.info["correct"])
  pivotal = np.asarray(out.traj.info["pivotal"])
  success = np.all(correct | ~pivotal, axis=0)
  np.testing.assert_array_equal(np.asarray(out.traj.rewards)[-1], success)
  # Counted once per shared prefix: the formula, per task, against K T independent.
  per_task = tr.tree_env_steps(branch, steps, T)
  assert per_task == 3 + 2 * 3 + 4 * 2 == 17 and 4 * T == 32
  assert int(out.env_steps) == n * per_task
  owned = np.asarray(out.owner)
  np.testing.assert_array_equal(owned.sum(axis=2)[:, 0], [1, 1, 1, 2, 2, 2, 4, 4])


def test_sequence_policy_carry_crosses_the_branches():
  env, params = KEYCHAIN
  policy, probs_fn, memory_fn = refs.memory_policy(WEIGHTS, [[1.0, -2.0], [-1.5, 1.0]])
  out = trees(env, params, policy, None, jax.random.key(1), 3, 2, (2, 5), T)
  obs, actions = np.asarray(out.traj.obs), np.asarray(out.traj.actions)
  logp = np.asarray(out.traj.log_probs)
  for n in range(3):
    for leaf in range(4):
      memory = (np.zeros(A), -1)
      for t in range(T):
        probs = probs_fn(obs[t, n, leaf].astype(np.float64), memory)
        np.testing.assert_allclose(logp[t, n, leaf], np.log(probs[actions[t, n, leaf]]),
                                   rtol=1e-4, atol=1e-5)
        memory = memory_fn(memory, obs[t, n, leaf], actions[t, n, leaf], 0.0)


def test_early_ends_are_not_counted():
  env = refs.SlipChain(length=2)
  params = env.default_params
  policy = lambda p, o, key: (jax.random.bernoulli(key, 0.8).astype(jnp.int32),
                              jnp.float32(0.0), {})
  horizon, steps = 5, (1, 3)
  out = trees(env, params, policy, None, jax.random.key(2), 16, 2, steps, horizon)
  valid, owner = np.asarray(out.traj.valid), np.asarray(out.owner)
  assert not valid.all()
  assert int(out.env_steps) == int(np.sum(valid & owner))
  assert int(out.env_steps) < 16 * tr.tree_env_steps(2, steps, horizon)
  # A leaf's steps stay valid up to its first end, and none after.
  dones = np.asarray(out.traj.dones) & valid
  assert np.all(dones.sum(axis=0) <= 1)
  after = np.cumsum(dones, axis=0) - dones > 0
  assert not np.any(valid & after)


def test_advantages_of_a_hand_built_tree():
  # b = 2, d = 2, leaves [1, 0, 1, 1]. Depth 1: values (0.5, 1.0), mean 0.75, sample std
  # 0.35355: -/+0.70711. Depth 2: siblings (1, 0): +/-0.70711; (1, 1): degenerate, 0.
  outcomes = jnp.array([1.0, 0.0, 1.0, 1.0])
  node, degenerate = tr.tree_advantages(outcomes, 2, 2)
  r = 0.5 ** 0.5
  np.testing.assert_allclose(node, [[0, 0, 0, 0], [-r, -r, r, r], [r, -r, 0, 0]],
                             atol=1e-5)
  np.testing.assert_array_equal(degenerate, [0, 0, 1])
  # The episode term: GRPO among the 4 leaves, mean 0.75, std 0.5: (1/2, -3/2, 1/2, 1/2),
  # averaged below each node; the root's average is 0.
  node, _ = tr.tree_advantages(outcomes, 2, 2, kind="grpo", episode_weight=0.5)
  ep = np.array([0.5, -1.5, 0.5, 0.5])
  np.testing.assert_allclose(node[0], 0.0, atol=1e-5)
  np.testing.assert_allclose(node[1], [-r - 0.25, -r - 0.25, r + 0.25, r + 0.25],
                             atol=1e-5)
  np.testing.assert_allclose(node[2], np.array([r, -r, 0, 0]) + 0.5 * ep, atol=1e-5)
  # Per step: rows picked by segment (tau = 2, 5 in T = 8).
  steps = tr.tree_step_advantages(node, (2, 5), 8)
  np.testing.assert_array_equal(tr.segment_index((2, 5), 8), [0, 0, 1, 1, 1, 2, 2, 2])
  np.testing.assert_allclose(steps[3], node[1])


def test_one_level_tree_from_the_root_is_grpo_vmapped():
  rng = np.random.default_rng(0)
  outcomes = jnp.asarray(rng.integers(0, 2, (3, 6, 8)).astype(np.float32))
  node, degenerate = jax.jit(jax.vmap(lambda o: tr.tree_advantages(o, 8, 1)))(outcomes)
  adv, flat = baselines.group_advantages(outcomes)
  np.testing.assert_allclose(node[:, 1], adv, rtol=1e-6)
  np.testing.assert_array_equal(degenerate[:, 1], flat.astype(np.int32))
  # And its rollout is a GRPO group: 8 independent leaves, K T steps per task.
  env, params = KEYCHAIN
  policy, _ = refs.linear_logits(WEIGHTS)
  out = trees(env, params, policy, None, jax.random.key(3), 2, 8, (0,), T)
  assert int(out.env_steps) == 2 * 8 * T and bool(jnp.all(out.owner))


def test_bad_shapes_raise():
  with pytest.raises(ValueError, match="branch_steps"):
    tr.check_tree(2, (3, 3), 8)
  with pytest.raises(ValueError, match="branch_steps"):
    tr.check_tree(2, (8,), 8)
  with pytest.raises(ValueError, match="branch"):
    tr.check_tree(1, (2,), 8)
  with pytest.raises(ValueError, match="outcomes"):
    tr.tree_advantages(jnp.zeros((5,)), 2, 2)
