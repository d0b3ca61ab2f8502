"""KeyToDoor-v0's growing phases and carried position; its exact success rates."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import envs, rollout
from credit_jax.envs import keytodoor, keytodoor_dp


def test_defaults_keep_fixed_phases():
  env, params = envs.make("KeyToDoor-v0")
  assert env.phase_lengths(params.distractor_length) == (4, 4)
  assert env.max_episode_length == 38 and not env.carry_position


def test_phase_growth_lengthens_key_and_door_phases():
  env, params = envs.make("KeyToDoor-v0", max_distractor=40, phase_growth=0.25)
  assert env.max_episode_length == (4 + 10) + 40 + (4 + 10)
  params = params.replace(distractor_length=20)
  first, last = (int(x) for x in env.phase_lengths(params.distractor_length))
  assert (first, last) == (9, 9)
  phases = [int(env.phase_of(t, params)) for t in range(38)]
  assert phases == [0] * 9 + [1] * 20 + [2] * 9
  _, state = env.reset(jax.random.key(0), params)
  step = jax.jit(lambda s: env.step_env(jax.random.key(0), s, 0, params))
  for t in range(38):
    _, state, _, term, _ = step(state)
    assert bool(term) == (t == 37)


def _state(env, key_cell):
  return keytodoor.KeyToDoorState(
      time=jnp.zeros((), jnp.int32), pos=jnp.asarray(env.start_cell, jnp.int32),
      key_cell=jnp.asarray(key_cell, jnp.int32), has_key=jnp.array(False),
      door_open=jnp.array(False),
      eaten_at=jnp.full((env.num_cells,), keytodoor.NEVER, jnp.int32),
      noise_seed=jnp.asarray(1, jnp.uint32))


def _scan(env, params, actions, key_cell):
  """(positions [n], success [n]) after each of `actions` [n] from the start."""
  def body(s, a):
    _, s, _, _, info = env.step_env(jax.random.key(0), s, a, params)
    return s, (s.pos, info["success"])
  return jax.lax.scan(body, _state(env, key_cell), actions)[1]


def _positions(env, params, actions, key_cell=8):
  pos, succ = jax.jit(lambda a: _scan(env, params, a, key_cell))(
      jnp.asarray(actions, jnp.int32))
  return list(zip(np.asarray(pos).tolist(), np.asarray(succ).tolist()))


def test_carry_position_keeps_the_cell_across_phases():
  base, params = envs.make("KeyToDoor-v0", key_phase=2, door_phase=2, max_distractor=2)
  carry, _ = envs.make("KeyToDoor-v0", key_phase=2, door_phase=2, max_distractor=2,
                       carry_position=True)
  # Key at cell 8 (bottom right): down, right picks it; up, up in the apples; left, left.
  actions = [1, 3, 0, 0, 2, 2]
  reset = _positions(base, params, actions)
  kept = _positions(carry, params, actions)
  assert [p for p, _ in reset] == [7, 4, 1, 4, 3, 3]     # back to the centre twice
  assert [p for p, _ in kept] == [7, 8, 5, 2, 1, 0]      # walks on to the door
  assert not any(s for _, s in reset) and kept[-1][1]


def brute_force_success(env, params):
  """Uniform random policy's success by enumerating every action sequence per key cell."""
  steps = env.max_episode_length
  seqs = jnp.asarray(list(itertools.product(range(4), repeat=steps)), jnp.int32)
  probs = keytodoor_dp.key_cell_probs(env)
  total = 0.0
  for cell in np.flatnonzero(probs):
    succ = jax.jit(jax.vmap(lambda a, c=int(cell): jnp.any(_scan(env, params, a, c)[1])))(
        seqs)
    total += probs[cell] * float(np.mean(np.asarray(succ)))
  return total


@pytest.mark.parametrize("carry", [False, True])
def test_dp_matches_enumeration_on_a_tiny_room(carry):
  env, params = envs.make("KeyToDoor-v0", room_size=2, key_phase=1, door_phase=2,
                          max_distractor=1, carry_position=carry)
  assert env.random_success(params) == pytest.approx(brute_force_success(env, params),
                                                     abs=1e-12)


def test_key_cell_probabilities_are_the_reset_draw():
  env, params = envs.make("KeyToDoor-v0", room_size=5)
  probs = keytodoor_dp.key_cell_probs(env)
  assert probs[env.start_cell] == 0.0 and probs.sum() == pytest.approx(1.0)
  cells = jax.jit(jax.vmap(lambda k: env.reset(k, params)[1].key_cell))(
      jax.random.split(jax.random.key(0), 48_000))
  counts = np.bincount(np.asarray(cells), minlength=25)
  expected = probs * counts.sum()
  keep = expected > 0
  chi2 = np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep])
  assert chi2 < 51.2                                       # 23 dof, p = 0.0005


@pytest.mark.parametrize("kwargs", [
    dict(max_distractor=10),
    dict(max_distractor=20, phase_growth=0.2),
    dict(max_distractor=10, carry_position=True),
    dict(room_size=5, max_distractor=10, phase_growth=0.5, carry_position=True),
])
def test_dp_random_success_matches_simulation(kwargs):
  env, params = envs.make("KeyToDoor-v0", **kwargs)
  episodes, horizon = 8192, env.max_episode_length
  traj = jax.jit(lambda k: rollout.collect_episodes(
      env, params, rollout.uniform_random_policy(4), None, k, episodes, horizon))(
          jax.random.key(11))
  won = np.asarray(jnp.any(traj.info["success"] & traj.valid, axis=0))
  p = env.random_success(params)
  assert abs(won.mean() - p) < 3 * np.sqrt(p * (1 - p) / episodes), (won.mean(), p)
  assert env.optimal_success(params) == 1.0


def test_optimal_success_counts_reachable_key_cells():
  env, params = envs.make("KeyToDoor-v0", room_size=5, key_phase=1, door_phase=4,
                          max_distractor=0)
  probs = keytodoor_dp.key_cell_probs(env)
  neighbours = [7, 11, 13, 17]           # one move from the centre (12)
  assert env.optimal_success(params) == pytest.approx(probs[neighbours].sum())
  short, params = envs.make("KeyToDoor-v0", room_size=5, door_phase=3, max_distractor=0)
  assert short.optimal_success(params) == 0.0              # the door is 4 moves away
