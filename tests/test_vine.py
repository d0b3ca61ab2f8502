"""Tests for VinePPO's estimator (credit_jax/addons/vine_ppo.py): Monte-Carlo values from restored states against exact
values by enumeration (KeyChain, a sequence policy's restored carry, a chain with random
transitions and early ends), the step count, jit/vmap, and the advantages against a loop."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import envs, rollout
from credit_jax.addons import vine_ppo as vine

import step_credit_refs as refs

T, A = 5, 2
KEYCHAIN = envs.make("KeyChain-v0", horizon=T, num_pivotal=2, num_actions=A)
WEIGHTS = np.array([[1.5, -0.5, 0.3, 0.2], [-0.5, 1.0, -0.3, -0.4]])
POLICY, PROBS = refs.linear_logits(WEIGHTS)

episodes = jax.jit(rollout.collect_episodes, static_argnums=(0, 2, 5, 6),
                   static_argnames=("keep_states",))
vines = jax.jit(vine.collect_vines, static_argnums=(0, 2),
                static_argnames=("num_vines", "every"))


def _z_scores(estimate, truth, variance, k):
  """z of each estimate whose exact variance is > 0; the others must be exact."""
  estimate, truth, variance = (np.asarray(x, np.float64).ravel()
                               for x in (estimate, truth, variance))
  sure = variance < 1e-12
  np.testing.assert_allclose(estimate[sure], truth[sure], atol=1e-6)
  return (estimate[~sure] - truth[~sure]) / np.sqrt(variance[~sure] / k)


def _check_unbiased(z):
  # Independent vines: each z ~ N(0, 1) (CLT at K >= 256), so max |z| < 4.5 and the mean
  # of z^2 is 1 within ~3 s.e. (sqrt(2 / n)).
  assert z.size >= 30
  assert np.max(np.abs(z)) < 4.5, np.max(np.abs(z))
  assert abs(np.mean(z ** 2) - 1.0) < 3.5 * np.sqrt(2.0 / z.size), np.mean(z ** 2)


def _keychain_truth(states, t, b, probs_fn, memory=None, memory_fn=None):
  s = jax.tree.map(lambda x: np.asarray(x[t, b]), states.env_state)
  return refs.keychain_value(s.positions, s.cues, bool(s.all_correct), int(s.time), T, A,
                             probs_fn, memory, memory_fn)


def test_vine_values_equal_enumerated_values_within_sampling_error():
  env, params = KEYCHAIN
  batch, k = 16, 256
  traj, states = episodes(env, params, POLICY, None, jax.random.key(0), batch, T,
                          keep_states=True)
  out = vines(env, params, POLICY, None, jax.random.key(1), traj, states, num_vines=k)
  assert out.values.shape == (T, batch) and out.returns.shape == (T, batch, k)
  truth = np.array([[_keychain_truth(states, t, b, PROBS) for b in range(batch)]
                    for t in range(T)])
  _check_unbiased(_z_scores(out.values, truth, truth * (1 - truth), k))
  # Every vine runs to the episode's end, T - t steps, and all of them count.
  np.testing.assert_array_equal(out.lengths, np.broadcast_to(
      (T - np.arange(T))[:, None, None], out.lengths.shape))
  assert int(out.env_steps) == batch * k * T * (T + 1) // 2


def test_every_m_th_step_and_counted_steps():
  env, params = KEYCHAIN
  batch, k, every = 8, 256, 2
  traj, states = episodes(env, params, POLICY, None, jax.random.key(2), batch, T,
                          keep_states=True)
  out = vines(env, params, POLICY, None, jax.random.key(3), traj, states, num_vines=k,
              every=every)
  points = vine.vine_points(T, every)
  np.testing.assert_array_equal(points, [0, 2, 4])
  truth = np.array([[_keychain_truth(states, t, b, PROBS) for b in range(batch)]
                    for t in points])
  z = _z_scores(out.values, truth, truth * (1 - truth), k)
  assert np.max(np.abs(z)) < 4.5
  assert int(out.env_steps) == batch * k * int(np.sum(T - points))


def test_sequence_policy_vines_restart_from_the_kept_carry():
  env, params = KEYCHAIN
  policy, probs_fn, memory_fn = refs.memory_policy(WEIGHTS, [[1.0, -2.0], [-1.5, 1.0]])
  batch, k = 16, 256
  traj, states = episodes(env, params, policy, None, jax.random.key(4), batch, T,
                          keep_states=True)
  assert states.policy_state.carry.shape == (T, batch, A)
  out = vines(env, params, policy, None, jax.random.key(5), traj, states, num_vines=k)
  truth = np.zeros((T, batch))
  for t in range(T):
    for b in range(batch):
      memory = (np.asarray(states.policy_state.carry[t, b], np.float64),
                int(states.policy_state.prev_action[t, b]))
      truth[t, b] = _keychain_truth(states, t, b, probs_fn, memory, memory_fn)
  _check_unbiased(_z_scores(out.values, truth, truth * (1 - truth), k))
  # The carry matters: values from the initial carry instead differ somewhere.
  fresh = np.array([[_keychain_truth(states, t, b, probs_fn,
                                     (np.zeros(A), -1), memory_fn)
                     for b in range(batch)] for t in range(T)])
  assert np.max(np.abs(fresh - truth)) > 0.05


def test_random_transitions_early_ends_truncation_and_discount():
  env = refs.SlipChain(length=3)
  params = env.default_params            # time limit 5, slip 0.25
  p_right, gamma, batch, k = 0.7, 0.9, 24, 400

  def policy(params_, obs, key):
    action = (jax.random.uniform(key) < p_right).astype(jnp.int32)
    return action, jnp.log(jnp.where(action == 1, p_right, 1 - p_right)), {}

  horizon = 5
  traj, states = episodes(env, params, policy, None, jax.random.key(6), batch, horizon,
                          keep_states=True)
  valid = np.asarray(traj.valid)
  assert not valid.all()                 # some episodes end before the window
  out = vines(env, params, policy, None, jax.random.key(7), traj, states, num_vines=k,
              gamma=gamma)
  pos, time = np.asarray(states.env_state.pos), np.asarray(states.env_state.time)
  truth = np.vectorize(lambda p, t: refs.slip_value(p, t, 3, 5, 0.25, p_right, gamma))(
      pos, time)
  sample_var = np.asarray(jnp.var(out.returns, axis=-1))
  z = _z_scores(np.asarray(out.values)[valid], truth[valid],
                np.maximum(sample_var[valid], 0.0), k)
  assert np.max(np.abs(z)) < 4.5 and abs(np.mean(z ** 2) - 1) < 0.5
  # Counted: the steps of the vines from valid points only.
  assert int(out.env_steps) == int(np.sum(np.asarray(out.lengths)[valid]))
  assert int(out.env_steps) < int(np.sum(np.asarray(out.lengths)))


def test_jit_vmap_and_fixed_keys():
  env, params = KEYCHAIN
  traj, states = episodes(env, params, POLICY, None, jax.random.key(8), 4, T,
                          keep_states=True)
  keys = jax.random.split(jax.random.key(9), 3)
  run = functools.partial(vine.collect_vines, env, params, POLICY, None, num_vines=16,
                          every=2)
  batched = jax.jit(jax.vmap(lambda key: run(key, traj, states)))(keys)
  for i in range(3):
    one = vines(env, params, POLICY, None, keys[i], traj, states, num_vines=16, every=2)
    np.testing.assert_array_equal(batched.returns[i], one.returns)
  again = vines(env, params, POLICY, None, keys[0], traj, states, num_vines=16, every=2)
  np.testing.assert_array_equal(again.returns, batched.returns[0])
  # Batch dims beyond one: a [T, N, K] group trajectory.
  gtraj, gstates = jax.jit(rollout.collect_groups, static_argnums=(0, 2, 5, 6, 7),
                           static_argnames=("keep_states",))(
      env, params, POLICY, None, jax.random.key(10), 2, 3, T, keep_states=True)
  out = vines(env, params, POLICY, None, keys[1], gtraj, gstates, num_vines=8)
  assert out.values.shape == (T, 2, 3) and out.returns.shape == (T, 2, 3, 8)


def _advantages_loop(rewards, values, every, gamma, terminated, truncated, valid):
  """The segment advantages, one trajectory column at a time."""
  horizon, batch = rewards.shape
  points = list(range(0, horizon, every))
  out = np.zeros((horizon, batch))
  for b in range(batch):
    for j, t0 in enumerate(points):
      t1 = points[j + 1] if j + 1 < len(points) else horizon
      total, end, alive = 0.0, t1, True
      for u in range(t0, t1):
        if not valid[u, b]:
          end, alive = u, False
          break
        total += gamma ** (u - t0) * rewards[u, b]
        if terminated[u, b] or truncated[u, b]:
          end, alive = u + 1, False
          break
      nxt = values[j + 1, b] if (alive and j + 1 < len(points)) else 0.0
      adv = total + gamma ** (t1 - t0) * nxt - values[j, b]
      for u in range(t0, end):     # steps after a boundary in the segment get 0
        out[u, b] = adv if valid[u, b] else 0.0
  return out


@pytest.mark.parametrize("every", [1, 3])
def test_advantages_equal_a_loop(every):
  rng = np.random.default_rng(0)
  horizon, batch, gamma = 7, 6, 0.9
  rewards = rng.normal(size=(horizon, batch)).astype(np.float32)
  terminated = rng.random((horizon, batch)) < 0.15
  truncated = (rng.random((horizon, batch)) < 0.1) & ~terminated
  valid = np.array(rollout.first_episode_mask(jnp.asarray(terminated),
                                               jnp.asarray(truncated)))
  valid[:, :2] = True          # two continuing columns: several episodes in the window
  values = rng.normal(size=(len(range(0, horizon, every)), batch)).astype(np.float32)
  got = jax.jit(vine.vine_advantages, static_argnames=("every",))(
      jnp.asarray(rewards), jnp.asarray(values), every=every, gamma=gamma,
      terminated=jnp.asarray(terminated), truncated=jnp.asarray(truncated),
      valid=jnp.asarray(valid))
  want = _advantages_loop(rewards, values, every, gamma, terminated, truncated, valid)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bad_inputs_raise():
  env, params = KEYCHAIN
  traj, states = episodes(env, params, POLICY, None, jax.random.key(0), 2, T,
                          keep_states=True)
  with pytest.raises(ValueError, match="num_vines"):
    vine.collect_vines(env, params, POLICY, None, jax.random.key(1), traj, states,
                       num_vines=0)
  with pytest.raises(ValueError, match="policy_state"):
    policy, _, _ = refs.memory_policy(WEIGHTS, np.zeros((A, A)))
    vine.collect_vines(env, params, policy, None, jax.random.key(1), traj, states,
                       num_vines=2)
  with pytest.raises(ValueError, match="values must be"):
    vine.vine_advantages(traj.rewards, jnp.zeros((T + 1, 2)), terminated=traj.terminated,
                         truncated=traj.truncated, valid=traj.valid)
