"""KeyChain's credit probe (issue 47): the (segment, cue) one-hot observation and the reward
noise scaled sigma / sqrt(T), on hand-built episodes and against NumPy references."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import envs, rollout
from credit_jax.envs import keychain

PROBE = dict(segment_cue_onehot=True, distinct_rules=True, distractor_cues=True,
             pivotal_flag=False)


def _state(positions, cues, seeds=(11, 22)):
  return keychain.KeyChainProbeState(
      positions=jnp.asarray(positions, jnp.int32), cues=jnp.asarray(cues, jnp.int32),
      all_correct=jnp.array(True), time=jnp.zeros((), jnp.int32),
      seeds=jnp.asarray(seeds, jnp.uint32))


def _play(env, state, actions):
  params = env.default_params
  step = jax.jit(lambda s, a: env.step_env(jax.random.key(0), s, a, params))
  obs, rewards, infos = [np.asarray(env.get_obs(state))], [], []
  for a in actions:
    o, state, r, _, info = step(state, jnp.int32(a))
    obs.append(np.asarray(o)), rewards.append(float(r)), infos.append(info)
  return obs, rewards, infos


def test_context_is_the_one_hot_of_segment_and_shown_cue():
  # T = 9, k = 3: segments [0, 3), [3, 6), [6, 9).
  env = keychain.KeyChain(horizon=9, num_pivotal=3, num_actions=4, **PROBE)
  assert env.observation_layout == {"context": (0, 12), "time": (12, 13)}
  assert env.onehot_groups == ((0, 12),)
  state = _state([1, 4, 8], [2, 0, 3])
  rules = env.rules
  acts = [0, rules[0, 2], 0, 0, rules[1, 0], 0, 0, 0, rules[2, 3]]
  obs, rewards, infos = _play(env, state, acts)
  seg_of = [0, 0, 0, 1, 1, 1, 2, 2, 2]
  for t in range(9):
    ctx = obs[t][:12].reshape(3, 4)
    assert ctx.sum() == 1.0 and ctx[seg_of[t]].sum() == 1.0, t     # one pair, right row
    assert obs[t][12] == np.float32(t / 9)
  # At the pivotal steps the shown cue is the real one.
  for t, (i, c) in {1: (0, 2), 4: (1, 0), 8: (2, 3)}.items():
    assert obs[t][:12].reshape(3, 4)[i, c] == 1.0
    assert int(infos[t]["correct_action"]) == rules[i, c]
  assert np.all(obs[9][:12] == 0)                                      # t = T: outside
  assert rewards == [0.0] * 8 + [1.0] and bool(infos[-1]["success"])


def test_right_action_is_a_function_of_the_context_alone():
  # What makes a table (or one linear layer) enough: over random episodes every pivotal
  # step's answer is determined by the context index, and it equals rules[segment, cue].
  env, params = envs.make("KeyChain-v0", horizon=12, num_pivotal=3, num_actions=4, **PROBE)
  traj = jax.jit(lambda k: rollout.collect_episodes(
      env, params, rollout.uniform_random_policy(4), None, k, 512, 12))(jax.random.key(3))
  ctx = np.asarray(traj.obs)[..., :12]
  piv = np.asarray(traj.info["pivotal"])
  answers = np.asarray(traj.info["correct_action"])
  index = ctx.argmax(-1)
  seen = {}
  for i, a in zip(index[piv], answers[piv]):
    assert seen.setdefault(int(i), int(a)) == int(a)
  assert len(seen) == 12                                                # every pair seen
  rules = env.rules
  for i, a in seen.items():
    assert a == rules[i // 4, i % 4]


def test_episode_noise_std_keeps_the_summed_noise_at_sigma():
  sigma = 0.7
  for horizon in (10, 40):
    env, params = envs.make("KeyChain-v0", horizon=horizon, num_pivotal=2, num_actions=4,
                            episode_noise_std=sigma, **PROBE)
    traj = jax.jit(lambda k: rollout.collect_episodes(
        env, params, rollout.uniform_random_policy(4), None, k, 4096, horizon))(
            jax.random.key(horizon))
    noise = np.asarray(traj.rewards) - np.asarray(traj.info["success"], np.float32)
    per_step = noise.std()
    assert abs(per_step / (sigma / np.sqrt(horizon)) - 1.0) < 0.02, horizon
    summed = noise.sum(0)
    assert abs(summed.std() / sigma - 1.0) < 0.05, horizon


def test_old_noise_switch_is_bit_identical_and_both_are_refused():
  # distractor_reward_std keeps its per-step meaning: same rewards as before this option.
  a, pa = envs.make("KeyChain-v0", horizon=16, distractor_reward_std=0.25)
  b, pb = envs.make("KeyChain-v0", horizon=16, episode_noise_std=0.25 * 4.0)
  run = lambda env, p: jax.jit(lambda k: rollout.collect_episodes(   # noqa: E731
      env, p, rollout.uniform_random_policy(4), None, k, 64, 16))(jax.random.key(1))
  np.testing.assert_allclose(np.asarray(run(a, pa).rewards), np.asarray(run(b, pb).rewards),
                             rtol=1e-6, atol=1e-7)
  with pytest.raises(ValueError, match="episode_noise_std"):
    envs.make("KeyChain-v0", distractor_reward_std=0.1, episode_noise_std=1.0)
  with pytest.raises(ValueError, match="segment_cue_onehot"):
    envs.make("KeyChain-v0", segment_cue_onehot=True, cue_delay=2)
  with pytest.raises(ValueError, match="episode_noise_std"):
    envs.make("KeyChain-v0", episode_noise_std=-1.0)


def test_probe_random_success_is_exact_by_enumeration():
  # Every action sequence of one short episode: the fraction that succeeds is (1/A)^k.
  env, params = envs.make("KeyChain-v0", horizon=6, num_pivotal=2, num_actions=2, **PROBE)
  _, first = env.reset(jax.random.key(9), params)
  seqs = (jnp.arange(2 ** 6)[:, None] >> jnp.arange(6)) & 1

  def final(actions):
    def body(s, a):
      _, s, _, _, info = env.step_env(jax.random.key(0), s, a, params)
      return s, info["success"]
    return jax.lax.scan(body, first, actions)[1][-1]
  rate = float(jnp.mean(jax.vmap(final)(seqs).astype(jnp.float32)))
  assert rate == env.random_success() == 0.25
