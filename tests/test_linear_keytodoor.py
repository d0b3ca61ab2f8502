"""LinearKeyToDoor-v0 against a plain-Python layout and hand-computed returns."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import envs, rollout
from credit_jax.envs import linear_keytodoor as lk
from test_keytodoor import ref_mix32


def ref_layout(length, seed, p=0.8, low=0.1, high=0.9, scale=1.0):
  """Plain-Python corridor: contents and apple values (scaled) per cell."""
  contents, values = [], []
  for c in range(length):
    h = ref_mix32(seed, c)
    apple = 1 <= c <= length - 3 and ((h >> 8) + 0.5) / 2 ** 24 < p
    content = (lk.APPLE_A if h & 1 == 0 else lk.APPLE_B) if apple else lk.EMPTY
    content = {0: lk.KEY, length - 2: lk.DOOR}.get(c, content)
    contents.append(content)
    values.append(((low if (h >> 1) & 1 == 0 else high) * scale) if apple else 0.0)
  return contents, values


def start(length, seed):
  env, params = envs.make("LinearKeyToDoor-v0", length=length)
  state = lk.LinearKeyToDoorState(time=jnp.zeros((), jnp.int32),
                                  seed=jnp.asarray(seed, jnp.uint32),
                                  has_key=jnp.array(False), door_open=jnp.array(False))
  return env, params, state


def play(env, params, state, actions):
  step = jax.jit(lambda s, a: env.step_env(jax.random.key(0), s, a, params))
  obs, total, infos = [np.asarray(env.get_obs(state, params))], 0.0, []
  for a in actions:
    o, state, r, term, info = step(state, jnp.int32(a))
    obs.append(np.asarray(o))
    total += float(r)
    infos.append(info)
  assert bool(term)
  return obs, total, infos


def test_make_defaults_and_bad_params():
  env, params = envs.make("LinearKeyToDoor-v0", length=103)
  assert "LinearKeyToDoor-v0" in envs.registered_envs()
  assert params.reward_scale == pytest.approx(23 / 103) and params.max_steps_in_episode == 103
  assert env.obs_shape == (8,) and env.num_actions == 4
  with pytest.raises(ValueError, match="length"):
    envs.make("LinearKeyToDoor-v0", length=2)
  with pytest.raises(ValueError, match="apple_prob"):
    envs.make("LinearKeyToDoor-v0", apple_prob=1.5)


@pytest.mark.parametrize("seed", [0, 12345, 2 ** 32 - 1])
def test_layout_and_observations_match_the_reference(seed):
  length = 23
  env, params, state = start(length, seed)
  contents, values = ref_layout(length, seed)
  got_c, got_v = jax.jit(env.layout)(state, params)
  np.testing.assert_array_equal(np.asarray(got_c), contents)
  np.testing.assert_allclose(np.asarray(got_v), values, rtol=1e-6)
  obs, _, _ = play(env, params, state, [0] * length)
  for t in range(length - 1):   # the last cell shows the treasure room
    assert int(np.argmax(obs[t][:6])) == contents[t]
    assert obs[t][7] == pytest.approx(t / length)
  assert obs[1][6] == 1.0       # the key is held after step 0's PICK_KEY


def optimal(contents):
  return [{lk.APPLE_A: lk.EAT_A, lk.APPLE_B: lk.EAT_B, lk.DOOR: lk.OPEN}.get(c, lk.PICK_KEY)
          for c in contents]


@pytest.mark.parametrize("seed", [3, 99])
def test_returns_of_optimal_key_skipping_and_door_skipping_by_hand(seed):
  length = 23
  env, params, state = start(length, seed)
  contents, values = ref_layout(length, seed)
  treasure = 0.2                                  # x 23 / L = 1 at L = 23
  acts = optimal(contents)
  _, ret, infos = play(env, params, state, acts)
  assert ret == pytest.approx(sum(values) + treasure, rel=1e-5)
  assert bool(infos[-1]["success"]) and sum(bool(i["apple"]) for i in infos) == sum(
      c in (lk.APPLE_A, lk.APPLE_B) for c in contents)
  assert np.asarray(jax.jit(env.correct_action)(state)) == acts[0]
  skip = [lk.EAT_A] + acts[1:]                    # every apple, no key
  _, ret, infos = play(env, params, state, skip)
  assert ret == pytest.approx(sum(values), rel=1e-5)
  assert not any(bool(i["success"]) for i in infos)
  shut = acts[:length - 2] + [lk.PICK_KEY, lk.PICK_KEY]   # the key, but the door shut
  _, ret, infos = play(env, params, state, shut)
  assert ret == pytest.approx(sum(values), rel=1e-5) and not bool(infos[-1]["success"])
  # The oracle: the key step alone is pivotal; success needs PICK_KEY then OPEN.
  pivotal, needed = env.oracle(state)
  assert np.flatnonzero(np.asarray(pivotal)).tolist() == [0]
  assert {t: int(a) for t, a in enumerate(np.asarray(needed)) if a >= 0} == {
      0: lk.PICK_KEY, length - 2: lk.OPEN}
  assert [bool(i["pivotal"]) for i in infos] == [True] + [False] * (length - 1)
  assert [int(i["correct_action"]) for i in infos] == np.asarray(needed).tolist()


def test_random_policy_exactly_by_enumeration():
  length = 5                                       # cells: key, 2 middle, door, treasure
  seed = next(s for s in range(100) if all(
      c in (lk.APPLE_A, lk.APPLE_B) for c in ref_layout(length, s)[0][1:3]))
  env, params, state = start(length, seed)
  _, values = ref_layout(length, seed, scale=23 / length)
  seqs = jnp.asarray(list(itertools.product(range(4), repeat=length)), jnp.int32)

  def episode(actions):
    def body(s, a):
      _, s, r, _, info = env.step_env(jax.random.key(0), s, a, params)
      return s, (r, info["success"])
    _, (r, succ) = jax.lax.scan(body, state, actions)
    return jnp.sum(r), jnp.any(succ)
  returns, succ = jax.jit(jax.vmap(episode))(seqs)
  assert float(np.mean(succ)) == 1 / 16                         # exact
  by_hand = sum(values) / 4 + 0.2 * 23 / length / 16
  assert float(np.mean(returns)) == pytest.approx(by_hand, rel=1e-5)


def test_random_policy_rates_and_return_over_layouts():
  length, episodes = 103, 4096
  env, params = envs.make("LinearKeyToDoor-v0", length=length)
  traj = jax.jit(lambda k: rollout.collect_episodes(
      env, params, rollout.uniform_random_policy(4), None, k, episodes, length))(
          jax.random.key(5))
  assert bool(np.all(np.asarray(traj.valid)))
  won = np.asarray(traj.info["success"]).any(axis=0)
  p = env.random_success()
  assert abs(won.mean() - p) < 3 * np.sqrt(p * (1 - p) / episodes)
  available = np.asarray(traj.info["apple_available"])
  eaten = np.asarray(traj.info["apple"])
  n = available.sum()
  assert abs(eaten.sum() / n - 0.25) < 3 * np.sqrt(0.25 * 0.75 / n)
  cells = available[1:length - 2].size
  assert abs(available.sum() / cells - 0.8) < 3 * np.sqrt(0.8 * 0.2 / cells)
  returns = np.asarray(traj.rewards).sum(axis=0)
  assert abs(returns.mean() - env.expected_return("random", params)) < \
      3 * returns.std() / np.sqrt(episodes)
  scale = 23 / length
  assert env.expected_return("optimal", params) == pytest.approx(
      100 * 0.8 * 0.5 * scale + 0.2 * scale)
  assert env.expected_return("skip_key", params) == pytest.approx(100 * 0.8 * 0.5 * scale)
