"""ConveyorTreasure-v0, COCOA's corridor: the stored layout against their generator, hand-built
episodes, apple values drawn per member of a group, and the random policy's rates against
exact values and a NumPy simulation of the rules."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import envs, rollout
from credit_jax.envs import conveyor_treasure as ct


@pytest.mark.parametrize("length", [23, 43, 63, 83, 103, 1003])
def test_stored_layout_is_their_numpy_draw(length):
  # Their code: numpy.random.default_rng(seed).choice([0, 1, 2], size=L - 3,
  # p=[1 - d, d / 2, d / 2]) on grid[1:-2], key at 0, door at L - 2, last cell empty.
  draw = np.random.default_rng(ct.LAYOUT_SEED).choice(
      a=[0, 1, 2], size=(length - 3,),
      p=[1 - ct.DISTRACTOR_PROB, ct.DISTRACTOR_PROB / 2, ct.DISTRACTOR_PROB / 2])
  want = np.concatenate([[ct.KEY], draw, [ct.DOOR, ct.EMPTY]])
  env, _ = envs.make("ConveyorTreasure-v0", length=length)
  np.testing.assert_array_equal(env.cells, want)


def _play(env, params, actions, key=0):
  step = jax.jit(lambda k, s, a: env.step_env(k, s, a, params))
  obs, state = env.reset(jax.random.key(0), params)
  out = [np.asarray(obs)]
  rewards, infos = [], []
  for t, a in enumerate(actions):
    o, state, r, done, info = step(jax.random.key(1000 * key + t), state, jnp.int32(a))
    out.append(np.asarray(o)), rewards.append(float(r)), infos.append(info)
  assert bool(done)
  return out, rewards, infos


def _eater(cells, key=True, door=True):
  acts = []
  for c in cells:
    acts.append({ct.KEY: ct.PICK_KEY if key else ct.OPEN_DOOR, ct.APPLE_LEFT: ct.PICK_LEFT,
                 ct.APPLE_RIGHT: ct.PICK_RIGHT, ct.DOOR: ct.OPEN_DOOR if door else 0,
                 ct.EMPTY: 0}[int(c)])
  return acts


def test_hand_built_episode_key_apples_door_treasure():
  length = 23
  env, params = envs.make("ConveyorTreasure-v0", length=length)
  cells = env.cells
  obs, rewards, infos = _play(env, params, _eater(cells))
  scale = 23.0 / length
  for t in range(length):
    assert obs[t].shape == (9,) and obs[t][0] == pytest.approx(t / length, rel=1e-6)
    content = ct.TREASURE if t == length - 1 else cells[t]
    np.testing.assert_array_equal(obs[t][1:7], np.eye(6, dtype=np.float32)[content])
    np.testing.assert_array_equal(obs[t][7:9], [1, 0] if t == 0 else [0, 1])
    if cells[t] in (ct.APPLE_LEFT, ct.APPLE_RIGHT):
      assert bool(infos[t]["apple"]) and rewards[t] in (
          pytest.approx(0.1 * scale), pytest.approx(0.9 * scale))
    elif t == length - 1:
      assert rewards[t] == pytest.approx(0.2 * scale) and bool(infos[t]["success"])
    else:
      assert rewards[t] == 0.0 and not bool(infos[t]["success"])
  np.testing.assert_array_equal(obs[length][1:7], np.eye(6)[ct.TREASURE])  # clamped cell
  # Without the key the door stays shut: no treasure, apples unchanged.
  obs, rewards, infos = _play(env, params, _eater(cells, key=False))
  assert not any(bool(i["success"]) for i in infos) and rewards[-1] == 0.0
  assert np.all(obs[-2][7:9] == [1, 0]) and np.all(obs[-2][1:7] == np.eye(6)[ct.EMPTY])
  # The wrong apple action eats nothing.
  t = int(np.flatnonzero(cells == ct.APPLE_LEFT)[0])
  acts = _eater(cells)
  acts[t] = ct.PICK_RIGHT
  _, rewards, infos = _play(env, params, acts)
  assert rewards[t] == 0.0 and not bool(infos[t]["apple"])


def _eater_policy(params, obs, key):
  del params, key
  content = jnp.argmax(obs[1:7])
  action = jnp.select([content == ct.APPLE_LEFT, content == ct.APPLE_RIGHT,
                       content == ct.DOOR], [ct.PICK_LEFT, ct.PICK_RIGHT, ct.OPEN_DOOR],
                      ct.PICK_KEY).astype(jnp.int32)
  return action, jnp.float32(0.0), ()


def test_apple_values_differ_inside_a_group_and_the_layout_does_not():
  length, tasks, group = 43, 16, 8
  env, params = envs.make("ConveyorTreasure-v0", length=length)
  traj = jax.jit(lambda k: rollout.collect_groups(
      env, params, _eater_policy, None, k, tasks, group, length))(jax.random.key(2))
  avail = np.asarray(traj.info["apple_available"])           # [T, tasks, K]
  want = np.isin(env.cells, [ct.APPLE_LEFT, ct.APPLE_RIGHT])
  assert np.all(avail == want[:, None, None])                 # one layout, every episode
  assert np.all(np.asarray(traj.info["apple"]) == avail)      # the eater eats them all
  values = np.asarray(traj.info["apple_reward"])[want]        # [apples, tasks, K]
  assert set(np.round(values.ravel().astype(np.float64) * length / 23, 5)) == {0.1, 0.9}
  # Within a group, members' apple values are independent fair coins: two members
  # agree on an apple with probability 1/2, never on all of them.
  same = (values[:, :, :, None] == values[:, :, None, :])     # [apples, tasks, K, K]
  off = ~np.eye(group, dtype=bool)
  agree = same[..., off].mean()
  assert abs(agree - 0.5) < 0.02
  assert not np.any(same.all(axis=0)[:, off])
  assert np.all(np.asarray(traj.info["success"]).any(axis=0))  # treasure every episode


def _numpy_random_rollouts(cells, episodes, seed):
  """(treasure [E] bool, eaten apples [E], returns [E]) of uniform actions on the corridor,
  by the rules in NumPy."""
  rng = np.random.default_rng(seed)
  length = len(cells)
  scale = 23.0 / length
  acts = rng.integers(0, 4, size=(episodes, length))
  has_key = acts[:, 0] == ct.PICK_KEY
  opened = has_key & (acts[:, length - 2] == ct.OPEN_DOOR)
  left, right = cells == ct.APPLE_LEFT, cells == ct.APPLE_RIGHT
  eaten = (left & (acts == ct.PICK_LEFT)) | (right & (acts == ct.PICK_RIGHT))
  values = np.where(rng.random(eaten.shape) < 0.5, 0.1, 0.9) * scale
  returns = (eaten * values).sum(1) + opened * 0.2 * scale
  return opened, eaten.sum(1), returns


def test_random_policy_rates_against_exact_values_and_numpy():
  length, episodes = 23, 8192
  env, params = envs.make("ConveyorTreasure-v0", length=length)
  traj = jax.jit(lambda k: rollout.collect_episodes(
      env, params, rollout.uniform_random_policy(4), None, k, episodes, length))(
          jax.random.key(3))
  treasure = np.asarray(traj.info["success"]).any(axis=0)
  eaten = np.asarray(traj.info["apple"]).sum(axis=0)
  returns = np.asarray(traj.rewards).sum(axis=0)
  n = env.num_apples()
  assert n == 16
  np_treasure, np_eaten, np_returns = _numpy_random_rollouts(env.cells, episodes, 4)
  for t_rate, e_rate, ret in ((treasure.mean(), eaten.mean() / n, returns.mean()),
                              (np_treasure.mean(), np_eaten.mean() / n, np_returns.mean())):
    assert abs(t_rate - 1 / 16) < 4 * np.sqrt(1 / 16 * 15 / 16 / episodes)
    assert abs(e_rate - 1 / 4) < 4 * np.sqrt(1 / 4 * 3 / 4 / (episodes * n))
    assert abs(ret - env.expected_return("random")) < 4 * returns.std() / np.sqrt(episodes)
  assert env.random_success() == 1 / 16
  assert env.expected_return("optimal") == pytest.approx(n * 0.5 * 23 / length + 0.2)


def test_lengths_and_refusals():
  for length in (23, 103, 1003):
    env, params = envs.make("ConveyorTreasure-v0", length=length)
    assert params.max_steps_in_episode == length
    assert params.reward_scale == pytest.approx(23 / length)
    assert env.onehot_groups == ((1, 7), (7, 9))
  with pytest.raises(ValueError, match="length"):
    envs.make("ConveyorTreasure-v0", length=1004)
  with pytest.raises(ValueError, match="length"):
    envs.make("ConveyorTreasure-v0", length=2)
