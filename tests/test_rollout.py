"""Tests for credit_jax.rollout: auto-reset collection, episode masks, groups, passthrough."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import envs, nets, rollout

# Compiles are shared across tests: jit keys on the env and policy objects.
collect = jax.jit(rollout.collect, static_argnums=(0, 2, 7))
episodes = jax.jit(rollout.collect_episodes, static_argnums=(0, 2, 5, 6))
groups = jax.jit(rollout.collect_groups, static_argnums=(0, 2, 5, 6, 7))
reset = jax.jit(rollout.reset, static_argnums=(0, 3))

KEYCHAIN = envs.make("KeyChain-v0", horizon=4, num_pivotal=2, num_actions=3)
GRID = envs.make("GoalGrid-v0", size=3)
CARTPOLE = envs.make("CartPole-v1", max_steps_in_episode=8)


@functools.lru_cache
def uniform(num_actions):
  return rollout.uniform_random_policy(num_actions)


def test_collect_autoresets_and_continues_from_its_carry():
  env, params = KEYCHAIN
  obs, state = reset(env, params, jax.random.key(0), 3)
  traj, (state2, obs2) = collect(env, params, uniform(3), None, jax.random.key(1),
                                 state, obs, 10)
  assert traj.obs.shape == (10, 3, 5) and traj.final_obs.shape == (10, 3, 5)
  for field in (traj.actions, traj.rewards, traj.terminated, traj.truncated,
                traj.log_probs, traj.valid, traj.info["pivotal"]):
    assert field.shape == (10, 3)
  assert traj.rewards.dtype == jnp.float32 and traj.log_probs.dtype == jnp.float32
  assert bool(jnp.all(traj.valid))
  assert set(traj.info) == {"pivotal", "correct_action", "correct"}
  np.testing.assert_allclose(traj.log_probs, -np.log(3) * np.ones((10, 3)), rtol=1e-6)
  done = np.asarray(traj.dones)
  np.testing.assert_array_equal(np.flatnonzero(done[:, 0]), [3, 7])
  assert np.all(done == done[:, :1]) and not np.any(traj.truncated)
  obs, final = np.asarray(traj.obs), np.asarray(traj.final_obs)
  # Within an episode the next observation is the final one; after a boundary it is a
  # fresh reset (KeyChain's time feature restarts at 0), the final one ends at t = T.
  np.testing.assert_array_equal(obs[1:][~done[:-1]], final[:-1][~done[:-1]])
  assert np.all(obs[1:][done[:-1]][:, -1] == 0) and np.all(final[done][:, -1] == 1)
  # The carry continues the stream: two chunks of 10 steps.
  traj2, _ = collect(env, params, uniform(3), None, jax.random.key(2), state2, obs2, 10)
  np.testing.assert_array_equal(traj2.obs[0], obs2)
  np.testing.assert_array_equal(np.flatnonzero(np.asarray(traj2.dones)[:, 0]), [1, 5, 9])


def test_trajectory_replays_in_the_environment():
  env, params = KEYCHAIN
  obs, state = reset(env, params, jax.random.key(0), 3)
  traj, _ = collect(env, params, uniform(3), None, jax.random.key(4), state, obs, 10)
  step_env = jax.jit(env.step_env)
  for b in range(3):
    s = jax.tree.map(lambda x: x[b], state)
    for t in range(4):  # the first episode; KeyChain transitions are deterministic
      o, s, r, term, info = step_env(None, s, traj.actions[t, b], params)
      np.testing.assert_array_equal(o, traj.final_obs[t, b])
      assert float(r) == float(traj.rewards[t, b]) and bool(term) == bool(
          traj.terminated[t, b])
      assert bool(info["correct"]) == bool(traj.info["correct"][t, b])


def _plain_scan(env, params, policy, key, state, obs, num_steps, policy_params=None):
  """The reference: `env.step` itself in a scan, with the keys `collect` hands out, the
  policy called with its key at every step."""
  batch = obs.shape[0]
  act = jax.vmap(policy, in_axes=(None, 0, 0))
  step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

  def body(carry, keys):
    s, o = carry
    a, logp, _ = act(policy_params, o, keys[0])
    next_o, s, r, term, trunc, info = step(keys[1], s, a, params)
    return (s, next_o), (o, a, r, term, trunc, info["final_observation"], logp)
  return jax.lax.scan(body, (state, obs), jax.random.split(key, (num_steps, 2, batch)))


@pytest.mark.parametrize("env_and_params", [CARTPOLE, KEYCHAIN, GRID],
                         ids=["gymnax", "credit_deterministic", "credit_stochastic"])
def test_collect_draws_resets_like_env_step(env_and_params):
  # collect runs gymnax's auto-reset itself with every reset drawn before its loop;
  # it must match env.step's own auto-reset, key for key.
  env, params = env_and_params
  assert rollout._auto_reset_keys(env) is not None
  policy = uniform(env.num_actions)
  obs, state = reset(env, params, jax.random.key(0), 3)
  traj, carry = collect(env, params, policy, None, jax.random.key(5), state, obs, 24)
  carry_ref, ref = jax.jit(_plain_scan, static_argnums=(0, 2, 6))(
      env, params, policy, jax.random.key(5), state, obs, 24)
  assert int(np.sum(np.asarray(traj.dones))) >= 3   # the resets were exercised
  mine = (traj.obs, traj.actions, traj.rewards, traj.terminated, traj.truncated,
          traj.final_obs, traj.log_probs)
  for a, b in zip(jax.tree.leaves((mine, carry)), jax.tree.leaves((ref, carry_ref))):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                               atol=1e-6)


def test_max_truncations_bounds_the_truncations_of_a_rollout():
  env, params = CARTPOLE                                   # time limit 8
  assert rollout.max_truncations(env, params, 8) == 1
  assert rollout.max_truncations(env, params, 9) == 2
  assert rollout.max_truncations(*envs.make("CartPole-v1"), 128) == 1
  assert rollout.max_truncations(*KEYCHAIN, 10) == 3     # CreditEnv: limit = horizon 4
  # 16 envs that rarely fail within 8 steps, 7 steps into their episodes: the next 50
  # steps truncate at steps 0, 8, ..., 48, which reaches the bound (7).
  obs, state = reset(env, params, jax.random.key(0), 16)
  _, (state, obs) = collect(env, params, uniform(2), None, jax.random.key(2), state, obs, 7)
  traj, _ = collect(env, params, uniform(2), None, jax.random.key(1), state, obs, 50)
  counts = np.asarray(traj.truncated).sum(axis=0)
  assert counts.max() == rollout.max_truncations(env, params, 50) == 7


def test_max_truncations_is_none_when_unknowable():
  env, params = CARTPOLE

  class OwnTimeLimit(type(env)):
    def is_truncated(self, state, params):
      return state.time >= 3

  assert rollout.max_truncations(OwnTimeLimit(), params, 10) is None
  traced = jax.jit(lambda p: rollout.max_truncations(env, p, 10))(params)
  assert traced is None


def test_presampled_policy_noise_is_drawn_from_the_step_keys():
  # A network policy (a PresampledPolicy): collect draws every step's noise before its
  # loop; the actions must be those of the policy called with each step's key.
  env, params = CARTPOLE
  net = nets.ActorCritic(num_actions=env.num_actions, hidden_sizes=(8,))
  net_params = net.init(jax.random.key(3), jnp.zeros((4,)))
  policy = nets.make_policy_fn(net, value=False)
  obs, state = reset(env, params, jax.random.key(0), 3)
  traj, _ = collect(env, params, policy, net_params, jax.random.key(6), state, obs, 24)
  _, ref = jax.jit(_plain_scan, static_argnums=(0, 2, 6))(
      env, params, policy, jax.random.key(6), state, obs, 24, net_params)
  np.testing.assert_array_equal(traj.actions, ref[1])
  np.testing.assert_allclose(traj.log_probs, ref[6], rtol=1e-6)
  assert 0.2 < float(np.mean(np.asarray(traj.actions))) < 0.8   # both actions taken


@functools.lru_cache
def grid_episodes_over_seeds():
  """collect_episodes vmapped over 4 seeds (16 GoalGrid envs, horizon 12), one compile."""
  env, params = GRID
  run = jax.jit(jax.vmap(lambda k: rollout.collect_episodes(
      env, params, uniform(4), None, k, 16, 12)))
  return run(jax.random.split(jax.random.key(0), 4))


def test_collect_episodes_valid_through_the_first_boundary_only():
  traj = grid_episodes_over_seeds()
  done = np.asarray(traj.dones).transpose(1, 0, 2).reshape(12, 64)
  valid = np.asarray(traj.valid).transpose(1, 0, 2).reshape(12, 64)
  for b in range(64):
    end = np.flatnonzero(done[:, b])
    last = end[0] if end.size else 11
    np.testing.assert_array_equal(valid[:, b], np.arange(12) <= last)
  assert valid.all(0).sum() < 64 < valid.sum()  # some ended early, the batch mixed
  np.testing.assert_array_equal(
      rollout.first_episode_mask(jnp.array([0, 0, 1, 0, 1], bool)[:, None],
                                 jnp.array([0, 1, 0, 0, 0], bool)[:, None])[:, 0],
      [True, True, False, False, False])


def test_collect_groups_share_start_state_with_independent_keys():
  env, params = KEYCHAIN
  traj = groups(env, params, uniform(3), None, jax.random.key(0), 5, 4, 4)
  assert traj.obs.shape == (4, 5, 4, 5) and traj.valid.shape == (4, 5, 4)
  assert bool(jnp.all(traj.valid))  # KeyChain episodes last exactly T = 4 steps
  obs0 = np.asarray(traj.obs[0])
  assert np.all(obs0 == obs0[:, :1])                       # same start within a task
  answers = np.asarray(traj.info["correct_action"])        # the hidden task: shared
  assert np.all(answers == answers[:, :, :1])
  assert len({tuple(answers[:, n, 0]) for n in range(5)}) > 1  # tasks differ
  actions = np.asarray(traj.actions)
  assert all(len({tuple(actions[:, n, m]) for m in range(4)}) > 1 for n in range(5))


def test_collect_groups_members_get_independent_env_keys():
  env, params = GRID
  params = params.replace(slip_prob=1.0)  # every move comes from the env's own key
  pinned = lambda p, obs, key: (jnp.int32(0), jnp.float32(0.0), ())
  traj = groups(env, params, pinned, None, jax.random.key(0), 4, 8, 3)
  obs0 = np.asarray(traj.obs[0])
  assert np.all(obs0 == obs0[:, :1])
  after = np.asarray(traj.final_obs[0])                    # [tasks, members, obs]
  assert all(len({tuple(row) for row in after[n]}) > 1 for n in range(4))


def test_policy_extras_and_log_probs_land_in_the_trajectory():
  env, params = KEYCHAIN

  def policy(p, obs, key):
    logits = p * obs[:3]
    action = jax.random.categorical(key, logits).astype(jnp.int32)
    log_prob = jax.nn.log_softmax(logits)[action]
    return action, log_prob, {"value": obs.sum(), "logits": logits}

  traj = episodes(env, params, policy, jnp.float32(2.0), jax.random.key(0), 6, 4)
  assert traj.extras["value"].shape == (4, 6)
  assert traj.extras["logits"].shape == (4, 6, 3)
  np.testing.assert_allclose(traj.extras["value"], np.asarray(traj.obs).sum(-1),
                             rtol=1e-6)
  expected = jax.nn.log_softmax(traj.extras["logits"])
  expected = jnp.take_along_axis(expected, traj.actions[..., None], -1)[..., 0]
  np.testing.assert_allclose(traj.log_probs, expected, rtol=1e-6)


def test_gymnax_passthrough_with_the_same_rollout_code():
  env, params = CARTPOLE
  traj = episodes(env, params, uniform(2), None, jax.random.key(0), 32, 10)
  assert traj.obs.shape == (10, 32, 4) and set(traj.info) == {"discount"}
  done = np.asarray(traj.dones)
  ends = np.where(done.any(0), done.argmax(0), 10)
  assert np.all(ends <= 7)
  cut = ends == 7
  # The time limit shows up as truncation (gymnax may also flag a fall at that step).
  assert np.all(np.asarray(traj.truncated)[7][cut])
  assert not np.any(np.asarray(traj.truncated)[:7])


def test_rollouts_vmap_over_seeds():
  traj = grid_episodes_over_seeds()
  assert traj.rewards.shape == (4, 12, 16) and traj.obs.shape == (4, 12, 16, 18)
  assert not np.array_equal(traj.actions[0], traj.actions[1])
  assert not np.array_equal(traj.obs[0, 0], traj.obs[1, 0])


def test_uniform_random_policy_is_uniform():
  policy = rollout.uniform_random_policy(5)
  keys = jax.random.split(jax.random.key(0), 20000)
  actions, log_probs, _ = jax.jit(jax.vmap(policy, in_axes=(None, None, 0)))(
      None, None, keys)
  counts = np.bincount(np.asarray(actions), minlength=5)
  assert counts.size == 5 and np.all(np.abs(counts / 20000 - 0.2) < 0.015)
  np.testing.assert_allclose(log_probs, -np.log(5.0), rtol=1e-6)


def test_bad_inputs_raise_clear_errors():
  env, params = KEYCHAIN
  obs, state = rollout.reset(env, params, jax.random.key(0), 2)
  bad_policy = lambda p, o, k: (jnp.zeros(2, jnp.int32), jnp.float32(0.0), ())
  with pytest.raises(ValueError, match="scalar action"):
    rollout.collect(env, params, bad_policy, None, jax.random.key(0), state, obs, 2)
  with pytest.raises(ValueError, match="num_steps"):
    rollout.collect(env, params, uniform(3), None, jax.random.key(0), state, obs, 0)
  with pytest.raises(ValueError, match="batch size"):
    rollout.collect(env, params, uniform(3), None, jax.random.key(0), state, obs[:1], 2)
  with pytest.raises(ValueError, match="num_envs"):
    rollout.reset(env, params, jax.random.key(0), 0)
  with pytest.raises(ValueError, match="horizon"):
    rollout.collect_episodes(env, params, uniform(3), None, jax.random.key(0), 2, 2.0)
  with pytest.raises(ValueError, match="group_size"):
    rollout.collect_groups(env, params, uniform(3), None, jax.random.key(0), 2, 0, 3)
  with pytest.raises(ValueError, match="num_tasks"):
    rollout.collect_groups(env, params, uniform(3), None, jax.random.key(0), -1, 2, 3)
