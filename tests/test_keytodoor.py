"""KeyToDoor-v0 against a plain-Python reference on fixed action sequences."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import envs, rollout

MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))


def ref_mix32(seed, t):
  """credit_jax.envs.hashing.mix32 in plain Python integers."""
  m = 0xFFFFFFFF
  x = (seed ^ ((t * 0x9E3779B9) & m)) & m
  x ^= x >> 16
  x = (x * 0x85EBCA6B) & m
  x ^= x >> 13
  x = (x * 0xC2B2AE35) & m
  return x ^ (x >> 16)


def ref_noise(seed, t):
  """The noise hash in plain Python integers."""
  u = (ref_mix32(seed, t) >> 8) / float(1 << 24)
  return (2.0 * u - 1.0) * np.sqrt(3.0)


def reference_episode(w, p1, length, p3, key_cell, seed, actions, apple_reward,
                      apple_noise, regrow, door_reward=1.0):
  """Plain-Python KeyToDoor: per step (reward, pivotal, success, terminated)."""
  centre = (w // 2) * w + w // 2
  pos, has_key, eaten, out = centre, False, {}, []
  for t, a in enumerate(actions):
    phase = 0 if t < p1 else (1 if t < p1 + length else 2)
    r, c = divmod(pos, w)
    dr, dc = MOVES[a]
    r, c = min(max(r + dr, 0), w - 1), min(max(c + dc, 0), w - 1)
    pos = r * w + c
    reward, pivotal, success = 0.0, False, False
    if phase == 0 and pos == key_cell and not has_key:
      has_key = pivotal = True
    if phase == 1 and t - eaten.get(pos, -10**9) >= regrow:
      reward += apple_reward + apple_noise * ref_noise(seed, t)
      eaten[pos] = t
    if phase == 2 and pos == 0 and has_key:
      reward += door_reward
      success = True
    if t + 1 in (p1, p1 + length):
      pos = centre
    terminated = success or t + 1 >= p1 + length + p3
    out.append((reward, pivotal, success, terminated, pos))
    if terminated:
      break
  return out


def run_actions(env, params, key, actions):
  obs, state = env.reset(key, params)
  first = state
  rows = []
  for a in actions:
    obs, state, r, term, trunc, info = env.step(key, state, jnp.int32(a), params)
    rows.append((float(r), bool(info["pivotal"]), bool(info["success"]), bool(term),
                 bool(trunc), obs))
    if term:
      break
  return first, rows


@pytest.mark.parametrize("length,noise,seq", [
    (3, 0.0, "key_then_door"), (5, 0.5, "key_then_door"), (4, 0.0, "no_key"),
    (0, 0.0, "key_then_door"), (6, 1.0, "wander")])
def test_matches_reference(length, noise, seq):
  env, params = envs.make("KeyToDoor-v0", max_distractor=8, apple_noise=noise,
                          distractor_length=length)
  key = jax.random.PRNGKey(3)
  _, state = env.reset(key, params)
  key_cell, seed = int(state.key_cell), int(state.noise_seed)
  w, centre = 3, 4
  # A path from the centre to the key cell (row moves then column moves).
  kr, kc = divmod(key_cell, w)
  to_key = ([0] * max(0, 1 - kr) + [1] * max(0, kr - 1)
            + [2] * max(0, 1 - kc) + [3] * max(0, kc - 1))
  distract = [3, 2, 2, 3, 0, 1, 3, 3][:length]
  if seq == "key_then_door":
    actions = (to_key + [1] * 4)[:4] + distract + [0, 2, 0, 2]
  elif seq == "no_key":
    avoid = 2 if key_cell != 3 else 3
    actions = [avoid, avoid, avoid, avoid] + distract + [0, 2, 0, 2]
  else:
    actions = [0, 3, 1, 2] + distract + [3, 3, 1, 1]
  ref = reference_episode(w, 4, length, 4, key_cell, seed, actions,
                          float(params.apple_reward), noise, int(params.regrow))
  _, got = run_actions(env, params, key, actions)
  assert len(got) == len(ref)
  for (r, piv, suc, term, trunc, obs), (rr, rp, rs, rt, rpos) in zip(got, ref):
    np.testing.assert_allclose(r, rr, rtol=1e-5, atol=1e-6)
    assert (piv, suc, term) == (rp, rs, rt)
    assert not trunc
    if not term:
      assert int(np.argmax(np.asarray(obs)[:9])) == rpos
  assert sum(g[1] for g in got) == (1 if seq == "key_then_door" else sum(r[1] for r in ref))
  if seq == "key_then_door":
    assert got[-1][2] and got[-1][3]          # door opened with the key: success
  if seq == "no_key":
    assert not any(g[2] for g in got)


def test_key_cell_never_centre_and_uniform():
  env, params = envs.make("KeyToDoor-v0")
  keys = jax.random.split(jax.random.PRNGKey(0), 4000)
  _, states = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
  counts = np.bincount(np.asarray(states.key_cell), minlength=9)
  assert counts[4] == 0
  np.testing.assert_allclose(counts[np.arange(9) != 4] / 4000, 1 / 8, atol=0.025)


def test_rollout_lengths_follow_traced_distractor_length():
  """One compiled rollout of the longest episode serves every distractor length."""
  env, params = envs.make("KeyToDoor-v0", max_distractor=20)
  horizon = env.max_episode_length
  policy = rollout.uniform_random_policy(4)

  @jax.jit
  def lengths(length):
    p = params.replace(distractor_length=length)
    traj = rollout.collect_episodes(env, p, policy, None, jax.random.PRNGKey(1), 64,
                                    horizon)
    steps = jnp.sum(traj.valid, axis=0)
    success = jnp.any(traj.info["success"] & traj.valid, axis=0)
    return steps, success, jnp.sum(traj.info["pivotal"] & traj.valid, axis=0)

  for length in (0, 7, 20):
    steps, success, pivotal = lengths(jnp.int32(length))
    steps, success = np.asarray(steps), np.asarray(success)
    assert np.all(steps[~success] == 8 + length)
    assert np.all(steps[success] <= 8 + length) and np.all(steps[success] > 4 + length)
    assert np.all(np.asarray(pivotal) <= 1)
    assert np.all(np.asarray(pivotal)[success] == 1)   # no success without the key
    assert 0.0 < success.mean() < 0.6


def test_invalid_values_name_the_field():
  with pytest.raises(ValueError, match="distractor_length"):
    envs.make("KeyToDoor-v0", max_distractor=5, distractor_length=6)
  with pytest.raises(ValueError, match="apple_noise"):
    envs.make("KeyToDoor-v0", apple_noise=-1.0)
  with pytest.raises(ValueError, match="room_size"):
    envs.make("KeyToDoor-v0", room_size=1)
  env, _ = envs.make("KeyToDoor-v0", max_distractor=1000)
  assert env.max_episode_length == 1008
