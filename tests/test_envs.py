"""Tests for credit_jax.envs: task semantics, oracles, goal API, make() validation,
wrappers."""
import functools
import math

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import envs, rollout
from credit_jax.envs import textedit

# JIT compilation dominates on CPU, so tests share compiled rollouts: environments are
# cached per configuration (jit keys on the env object) and one policy serves both the
# random and the no-op behaviour, chosen by its params (a traced value, no recompile).
episodes = jax.jit(rollout.collect_episodes, static_argnums=(0, 2, 5, 6))
make = functools.lru_cache(envs.make)
RANDOM = jnp.int32(-1)
NO_OP = jnp.int32(10_000)  # out of range for every environment here


@functools.lru_cache
def random_or(num_actions):
  """Policy: uniform over num_actions if params is RANDOM, else always action `params`."""
  uniform = rollout.uniform_random_policy(num_actions)

  def policy(params, obs, key):
    action, log_prob, extras = uniform(None, obs, key)
    forced = params >= 0
    return (jnp.where(forced, params, action), jnp.where(forced, 0.0, log_prob),
            extras)

  return policy


def _first_done_index(traj):
  """[B] int: index of each env's first boundary (horizon if none)."""
  done = np.asarray(traj.terminated | traj.truncated)
  return np.where(done.any(0), done.argmax(0), done.shape[0])


# ----------------------------------------------------------------------------- KeyChain


@pytest.mark.parametrize("num_pivotal,num_actions", [(1, 2), (2, 5), (3, 2)])
def test_keychain_random_policy_success_is_one_over_a_to_the_k(num_pivotal, num_actions):
  horizon, n = 6, 6000
  env, params = make("KeyChain-v0", horizon=horizon, num_pivotal=num_pivotal,
                      num_actions=num_actions, cue_delay=1)
  traj = episodes(env, params, random_or(num_actions), RANDOM,
                  jax.random.key(num_actions), n, horizon)
  rewards = np.asarray(traj.rewards)
  # The single reward comes at the last step, which terminates (never truncates).
  assert np.all(rewards[:-1] == 0)
  assert np.all(np.asarray(traj.terminated[-1])) and not np.any(traj.terminated[:-1])
  assert not np.any(traj.truncated)
  assert np.all(np.asarray(traj.info["pivotal"]).sum(0) == num_pivotal)
  p = (1.0 / num_actions) ** num_pivotal
  rate = rewards[-1].mean()
  assert abs(rate - p) <= 3 * math.sqrt(p * (1 - p) / n), (rate, p)
  # Success iff every pivotal step was answered right, by the env's own oracle.
  correct = np.asarray(traj.info["correct"]).sum(0) == num_pivotal
  np.testing.assert_array_equal(correct, rewards[-1] == 1)


def _oracle_scan(env, params, keys, num_steps):
  """Plays env.correct_action from the true state (memory-free oracle) in B envs."""
  step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

  def body(carry, key):
    obs, state = carry
    action = jax.vmap(env.correct_action)(state)
    out = step(jax.random.split(key, keys.shape[0]), state, action, params)
    return (out[0], out[1]), (obs, state, action) + out[2:]

  obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
  _, outs = jax.lax.scan(body, (obs, state), jax.random.split(keys[0], num_steps))
  return outs


def test_keychain_oracle_cues_and_delay():
  horizon, k, a, delay, b = 12, 3, 4, 2, 64
  env, params = envs.make("KeyChain-v0", horizon=horizon, num_pivotal=k, num_actions=a,
                          cue_delay=delay)
  keys = jax.random.split(jax.random.key(1), b)
  obs, states, actions, rewards, term, trunc, info = jax.jit(
      _oracle_scan, static_argnums=(0, 3))(env, params, keys, horizon)
  # Acting on the oracle's answers always succeeds.
  np.testing.assert_array_equal(rewards[-1], np.ones(b))
  np.testing.assert_array_equal(info["correct"], info["pivotal"])
  first = jax.tree.map(lambda x: x[0], states)
  pivotal, answers = jax.vmap(env.oracle)(first)          # [B, T]
  np.testing.assert_array_equal(pivotal.T, info["pivotal"])
  np.testing.assert_array_equal(answers.T, info["correct_action"])
  np.testing.assert_array_equal(np.where(pivotal, answers, -1), answers)
  assert np.all(np.asarray(first.positions) >= delay)
  # The cue of pivotal step p shows at p - delay and only there; the flag shows at p.
  obs = np.asarray(obs)                                     # [T, B, A + 2]
  shown = obs[:, :, :a].sum(-1) > 0
  np.testing.assert_array_equal(shown[:horizon - delay], pivotal.T[delay:])
  assert not shown[horizon - delay:].any()
  cue = np.where(shown, obs[:, :, :a].argmax(-1), -1)
  np.testing.assert_array_equal(cue[:horizon - delay], np.asarray(answers.T)[delay:])
  np.testing.assert_array_equal(obs[:, :, a] == 1, pivotal.T)
  np.testing.assert_allclose(obs[:, :, a + 1], np.arange(horizon)[:, None] / horizon
                             * np.ones((1, b)))
  # Random positions: one per segment [2, 5), [5, 8), [8, 12), each value drawn.
  positions = np.asarray(first.positions)
  for i, (lo, hi) in enumerate([(2, 5), (5, 8), (8, 12)]):
    assert set(positions[:, i]) == set(range(lo, hi))


def test_keychain_fixed_positions_are_segment_centres_in_every_episode():
  env, params = envs.make("KeyChain-v0", horizon=12, num_pivotal=3, num_actions=4,
                          cue_delay=2, positions="fixed")
  keys = jax.random.split(jax.random.key(0), 16)
  _, states = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
  np.testing.assert_array_equal(states.positions, np.tile([3, 6, 10], (16, 1)))
  assert len(np.unique(np.asarray(states.cues))) == 4


def test_keychain_out_of_range_actions_never_succeed_under_jit():
  horizon, k = 5, 5  # every step pivotal: any wrong action must fail the episode
  env, params = envs.make("KeyChain-v0", horizon=horizon, num_pivotal=k, num_actions=3)
  step = jax.jit(env.step)
  for bad in (3, -1, 2**31 - 1, -2**31):
    obs, state = env.reset(jax.random.key(0), params)
    total = 0.0
    for t in range(horizon):
      obs, state, reward, term, trunc, info = step(jax.random.key(t), state,
                                                   jnp.int32(bad), params)
      total += float(reward)
      assert bool(info["pivotal"]) and not bool(info["correct"])
    assert bool(term) and total == 0.0


def test_keychain_time_limit_truncates_without_reward():
  # Same env and sizes as a success-rate case: only the (traced) params differ.
  env, params = make("KeyChain-v0", horizon=6, num_pivotal=1, num_actions=2,
                     cue_delay=1)
  params = params.replace(max_steps_in_episode=5)
  traj = episodes(env, params, random_or(2), RANDOM, jax.random.key(0), 6000, 6)
  np.testing.assert_array_equal(_first_done_index(traj), 4)
  assert np.all(np.asarray(traj.truncated[4])) and not np.any(traj.terminated[:5])
  assert not np.any(np.asarray(traj.rewards)[:5])


def test_deterministic_step_matches_gymnax_step_up_to_reset_draws():
  env, params = make("KeyChain-v0", horizon=6, num_pivotal=1, num_actions=2,
                     cue_delay=1)
  ours = jax.jit(env.step)
  theirs = jax.jit(functools.partial(gymnax.environments.environment.Environment.step,
                                     env))
  obs, state = env.reset(jax.random.key(0), params)
  for t in range(6):
    key = jax.random.key(t + 1)
    a = ours(key, state, t % 2, params)
    b = theirs(key, state, t % 2, params)
    for x, y in zip(a[2:5], b[2:5]):
      np.testing.assert_array_equal(x, y)  # reward, terminated, truncated
    np.testing.assert_array_equal(a[5]["final_observation"], b[5]["final_observation"])
    assert a[5].keys() == b[5].keys()
    if t < 5:  # no reset yet: identical next state and observation
      jax.tree.map(np.testing.assert_array_equal, a[:2], b[:2])
    else:      # both reset to a fresh episode (different draws of it)
      assert int(a[1].time) == int(b[1].time) == 0
    obs, state = a[0], a[1]


# ------------------------------------------------------------------------------ BitFlip


def _flip_first_wrong_bit(params, obs, key):
  n = obs.shape[0] // 2
  return jnp.argmax(obs[:n] != obs[n:]).astype(jnp.int32), jnp.float32(0.0), ()


def test_bitflip_optimal_policy_solves_every_episode_within_n_steps():
  n, b = 7, 512
  env, params = envs.make("BitFlip-v0", num_bits=n)
  traj = episodes(env, params, _flip_first_wrong_bit, None, jax.random.key(0), b, n)
  ends = _first_done_index(traj)
  assert np.all(ends < n)
  cols = np.arange(b)
  assert np.all(np.asarray(traj.terminated)[ends, cols])
  assert np.all(np.asarray(traj.rewards)[ends, cols] == 1.0)
  assert np.asarray(traj.rewards)[np.asarray(traj.valid)].sum() == b
  # The episode lasts exactly the Hamming distance from start to goal (>= 1).
  obs0 = np.asarray(traj.obs[0])
  np.testing.assert_array_equal(ends + 1, (obs0[:, :n] != obs0[:, n:]).sum(1))


def _goal_env_episodes(name, policy_params, seed):
  """32 episodes of the default goal env, 2 steps past its time limit (one compile)."""
  env, params = make(name)
  limit = int(params.max_steps_in_episode)
  traj = episodes(env, params, random_or(env.num_actions), policy_params,
                  jax.random.key(seed), 32, limit + 2)
  return env, params, limit, traj


@pytest.mark.parametrize("name", ["BitFlip-v0", "GoalGrid-v0", "TextEdit-v0"])
def test_horizon_is_truncated_not_terminated_and_bad_actions_are_no_ops(name):
  env, params, limit, traj = _goal_env_episodes(name, NO_OP, 3)
  np.testing.assert_array_equal(_first_done_index(traj), limit - 1)
  assert np.all(np.asarray(traj.truncated[limit - 1]))
  assert not np.any(np.asarray(traj.terminated[:limit]))
  assert not np.any(np.asarray(traj.rewards[:limit]))
  # Out-of-range actions changed nothing: the last observation equals the first.
  np.testing.assert_array_equal(traj.obs[0], traj.final_obs[limit - 1])


# ----------------------------------------------------------------------------- GoalGrid


def _greedy_grid_policy(size, params, obs, key):
  cells = size * size
  here, goal = jnp.argmax(obs[:cells]), jnp.argmax(obs[cells:])
  dr = goal // size - here // size
  dc = goal % size - here % size
  action = jnp.where(dr < 0, 0, jnp.where(dr > 0, 2, jnp.where(dc > 0, 1, 3)))
  return action.astype(jnp.int32), jnp.float32(0.0), ()


def test_goalgrid_greedy_policy_reaches_goal_and_achieved_goal_is_the_cell():
  size, b = 5, 256
  env, params = envs.make("GoalGrid-v0", size=size, targets=((0, 0), (4, 4), (2, 3)))
  policy = functools.partial(_greedy_grid_policy, size)
  traj = episodes(env, params, policy, None, jax.random.key(0), b, 2 * size)
  ends = _first_done_index(traj)
  cols = np.arange(b)
  assert np.all(ends <= 2 * (size - 1) - 1)
  assert np.all(np.asarray(traj.rewards)[ends, cols] == 1.0)
  achieved = np.asarray(traj.info["achieved_goal"])[ends, cols]          # [B, 2]
  goal_cells = np.asarray(traj.obs[0, :, size * size:]).argmax(1)
  np.testing.assert_array_equal(achieved[:, 0] * size + achieved[:, 1], goal_cells)
  assert set(map(int, np.unique(goal_cells))) == {0, 24, 13}


def test_goalgrid_slip_prob_is_a_vmappable_param():
  env, params = envs.make("GoalGrid-v0", size=4)
  sweep = params.replace(slip_prob=jnp.array([0.0, 1.0]))
  keys = jax.random.split(jax.random.key(0), 64)

  @jax.jit
  def moved(p):
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, p)
    obs2, *_ = jax.vmap(env.step, in_axes=(0, 0, None, None))(keys, state, 99, p)
    return jnp.mean(jnp.any(obs2[:, :16] != obs[:, :16], axis=1))

  axes = params.replace(max_steps_in_episode=None, slip_prob=0)
  frac = jax.vmap(moved, in_axes=(axes,))(sweep)
  assert float(frac[0]) == 0.0 and float(frac[1]) > 0.3


# ----------------------------------------------------------------------------- TextEdit


def _edit_script(buffer, goal):
  """Python reference: overwrite each wrong token (move, backspace, write), submit."""
  script, cursor = [], 0
  for p in np.flatnonzero(buffer != goal):
    script += [textedit.RIGHT if p + 1 > cursor else textedit.LEFT] * abs(p + 1 - cursor)
    script += [textedit.DELETE, textedit.WRITE + int(goal[p])]
    cursor = p + 1
  return script + [textedit.SUBMIT]


def test_textedit_scripted_edits_reach_the_goal():
  env, params = envs.make("TextEdit-v0", buffer_len=6, vocab_size=3, start_len=5,
                          num_edits=3)
  step = jax.jit(env.step)
  for seed in range(4):
    obs, state = env.reset(jax.random.key(seed), params)
    buffer, goal = np.asarray(state.buffer), np.asarray(state.goal)
    assert (buffer != goal).sum() == 3 and np.all(buffer[5:] == textedit.PAD)
    script = _edit_script(buffer, goal)
    assert len(script) <= params.max_steps_in_episode
    for t, action in enumerate(script):
      obs, state, reward, term, trunc, info = step(jax.random.key(t), state, action,
                                                   params)
      last = t == len(script) - 1
      assert bool(term) == last and not bool(trunc)
      assert float(reward) == float(last)
    np.testing.assert_array_equal(info["achieved_goal"], goal)
    assert bool(info["goal_checked"])


def test_textedit_editing_semantics():
  env, params = envs.make("TextEdit-v0", buffer_len=4, vocab_size=3, start_len=2,
                          num_edits=0)
  obs, state = env.reset(jax.random.key(0), params)
  start = [int(v) for v in state.buffer[:2]]
  w = lambda v: textedit.WRITE + v
  actions = [textedit.LEFT, w(2), textedit.RIGHT, w(0), w(1), w(1), textedit.DELETE,
             textedit.DELETE, textedit.DELETE, textedit.RIGHT, textedit.RIGHT]
  expected_after = [
      ([*start, -1, -1], 0), ([2, *start, -1], 1), ([2, *start, -1], 2),
      ([2, start[0], 0, start[1]], 3), ([2, start[0], 0, start[1]], 3),   # full: no-op
      ([2, start[0], 0, start[1]], 3), ([2, start[0], start[1], -1], 2),
      ([2, start[1], -1, -1], 1), ([start[1], -1, -1, -1], 0),
      ([start[1], -1, -1, -1], 1), ([start[1], -1, -1, -1], 1)]
  for t, (action, (buffer, cursor)) in enumerate(zip(actions, expected_after)):
    _, state, reward, term, *_ = env.step(jax.random.key(t), state, action, params)
    np.testing.assert_array_equal(state.buffer, buffer, err_msg=f"step {t}")
    assert int(state.cursor) == cursor, t
    assert int(state.length) == sum(v >= 0 for v in buffer)
    assert not bool(term) and float(reward) == 0.0
  _, _, reward, term, *_ = env.step(jax.random.key(0), state, textedit.SUBMIT, params)
  assert bool(term) and float(reward) == 0.0  # the goal was the untouched start


# ------------------------------------------------------------------------- goal API


@pytest.mark.parametrize("name", ["BitFlip-v0", "GoalGrid-v0", "TextEdit-v0"])
def test_goal_api_relabels_generically(name):
  env, params, _, traj = _goal_env_episodes(name, RANDOM, 1)
  b = 32

  @jax.jit
  def check():
    _, states = jax.vmap(env.reset, in_axes=(0, None))(
        jax.random.split(jax.random.key(5), b), params)
    obs = jax.vmap(env.get_obs)(states)
    goals = jax.vmap(env.desired_goal)(states)
    new_goals = jax.vmap(env.achieved_goal)(states)
    return (obs, env.obs_with_goal(obs, goals), env.obs_with_goal(obs, new_goals),
            jax.vmap(env.get_obs)(states.replace(goal=new_goals)),
            env.goal_reward(new_goals, new_goals), env.goal_reward(goals, new_goals))

  obs, same, relabeled, observed, ones, start_success = check()
  np.testing.assert_array_equal(same, obs)
  # Replacing the goal in the observation equals observing a state with that goal.
  np.testing.assert_array_equal(relabeled, observed)
  np.testing.assert_array_equal(ones, np.ones(b))
  if name != "TextEdit-v0":  # those start away from their goal
    np.testing.assert_array_equal(start_success, np.zeros(b))
  # The env's reward is goal_checked * goal_reward(achieved_goal, goal) at every step.
  first_goal = _goal_from_trajectory(env, traj)
  verified = traj.info["goal_checked"] * env.goal_reward(traj.info["achieved_goal"],
                                                         first_goal)
  valid = np.asarray(traj.valid)
  np.testing.assert_array_equal(np.asarray(verified)[valid],
                                np.asarray(traj.rewards)[valid])
  with pytest.raises(ValueError, match="goal"):
    env.obs_with_goal(obs, first_goal[0, :1])


def _goal_from_trajectory(env, traj):
  """[T, B, *goal_shape]: each first episode's goal, decoded from its first obs.

  The decoding is env-specific on purpose: an independent reference for encode_goal.
  """
  obs = np.asarray(traj.obs[0])
  part = obs[:, obs.shape[1] - env.goal_obs_size:]
  if isinstance(env, envs.BitFlip):
    goal = part.astype(np.int32)
  elif isinstance(env, envs.GoalGrid):
    idx = part.argmax(1)
    goal = np.stack([idx // env.size, idx % env.size], 1)
  else:
    onehot = part.reshape(-1, env.buffer_len, env.vocab_size)
    goal = np.where(onehot.any(-1), onehot.argmax(-1), textedit.PAD)
  np.testing.assert_array_equal(env.encode_goal(goal), part)
  return jnp.broadcast_to(goal, traj.info["achieved_goal"].shape)


# ------------------------------------------------------------------- make and registry


def test_make_passes_gymnax_ids_through():
  env, params = envs.make("CartPole-v1", max_steps_in_episode=7)
  ref_env, ref_params = gymnax.make("CartPole-v1")
  assert type(env) is type(ref_env) and env.num_actions == 2
  assert params == ref_params.replace(max_steps_in_episode=7)
  assert "CartPole-v1" in envs.registered_envs()
  assert "KeyChain-v0" in envs.registered_envs()
  static, fields = envs.overrides_of("KeyChain-v0")
  assert set(static) == {"horizon", "num_pivotal", "num_actions", "cue_delay",
                         "positions", "pivotal_flag", "distractor_cues", "distinct_rules",
                         "cues_at_start", "pivotal_density", "distractor_reward_std",
                         "rule_seed", "segment_cue_onehot", "episode_noise_std"}
  assert fields == ("max_steps_in_episode",)


@pytest.mark.parametrize("name", ["KeyChain-v0", "BitFlip-v0", "GoalGrid-v0",
                                  "TextEdit-v0"])
def test_envs_jit_and_vmap_over_batch_and_spaces(name):
  env, params = envs.make(name)
  obs_space, action_space = env.observation_space(params), env.action_space(params)

  @jax.jit
  def run(key):
    keys = jax.random.split(key, 3)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    actions = jax.vmap(action_space.sample)(keys)
    out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, actions, params)
    inside = jax.vmap(obs_space.contains)(jnp.concatenate([obs, out[0]]))
    return obs, out, inside

  obs, out, inside = run(jax.random.key(0))
  assert obs.shape == (3,) + obs_space.shape and obs.dtype == jnp.float32
  assert action_space.n == env.num_actions and env.name == name
  assert out[0].shape == obs.shape and out[2].shape == (3,)
  assert out[2].dtype == jnp.float32 and out[3].dtype == jnp.bool_
  assert bool(jnp.all(inside))


@pytest.mark.parametrize("name,overrides,field", [
    ("KeyChain-v0", dict(horizon=4, num_pivotal=5), "num_pivotal"),
    ("KeyChain-v0", dict(horizon=10, num_pivotal=3, cue_delay=8), "cue_delay"),
    ("KeyChain-v0", dict(cue_delay=-1), "cue_delay"),
    ("KeyChain-v0", dict(num_actions=1), "num_actions"),
    ("KeyChain-v0", dict(horizon=0), "horizon"),
    ("KeyChain-v0", dict(horizon=10.0), "horizon"),
    ("KeyChain-v0", dict(num_pivotal=True), "num_pivotal"),
    ("KeyChain-v0", dict(positions="uniform"), "positions"),
    ("KeyChain-v0", dict(max_steps_in_episode=0), "max_steps_in_episode"),
    ("KeyChain-v0", dict(T=10), "horizon"),                 # unknown: lists options
    ("BitFlip-v0", dict(num_bits=0), "num_bits"),
    ("GoalGrid-v0", dict(size=3, targets=((3, 0),)), "targets"),
    ("GoalGrid-v0", dict(targets=()), "targets"),
    ("GoalGrid-v0", dict(targets=((0, 0), (0, 0))), "targets"),
    ("GoalGrid-v0", dict(slip_prob=1.5), "slip_prob"),
    ("TextEdit-v0", dict(start_len=2, num_edits=3), "num_edits"),
    ("TextEdit-v0", dict(buffer_len=4, start_len=5), "start_len"),
    ("TextEdit-v0", dict(vocab_size=1), "vocab_size"),
    ("CartPole-v1", dict(max_steps_in_episode=0), "max_steps_in_episode"),
    ("CartPole-v1", dict(horizon=3), "gravity"),             # lists CartPole's fields
    ("Nope-v0", {}, "KeyChain-v0.*CartPole-v1"),
])
def test_make_rejects_impossible_params_naming_the_field(name, overrides, field):
  with pytest.raises(ValueError, match=field):
    envs.make(name, **overrides)


# --- wrappers ---------------------------------------------------------------------------

def test_history_wrapper_windows_and_resets():
  env, params = envs.make("KeyChain-v0", horizon=4, num_pivotal=1, num_actions=2,
                          cue_delay=2, positions="fixed")
  wrapped = envs.HistoryWrapper(env, 3)
  assert wrapped.observation_space(params).shape == (3, 4)
  key = jax.random.PRNGKey(0)
  obs, state = wrapped.reset(key, params)
  inner_obs, _ = env.reset(key, params)
  np.testing.assert_array_equal(obs[:2], 0.0)
  np.testing.assert_array_equal(obs[2], inner_obs)
  frames = [obs[2]]
  for t in range(4):
    obs, state, _, terminated, truncated, info = wrapped.step(key, state, 0, params)
    if t < 3:
      frames.append(obs[2])
      np.testing.assert_array_equal(obs, np.stack(
          [np.zeros(4)] * max(0, 2 - len(frames) + 1) + frames)[-3:])
  # The 4th step ended the episode: the final window holds its last frames and the new
  # episode starts from an empty history.
  assert bool(terminated) and not bool(truncated)
  np.testing.assert_array_equal(info["final_observation"][:2], np.stack(frames[-2:]))
  np.testing.assert_array_equal(obs[:2], 0.0)


def test_history_wrapper_rejects_empty_window():
  env, _ = envs.make("KeyChain-v0")
  with pytest.raises(ValueError, match="window"):
    envs.HistoryWrapper(env, 0)


def test_desired_goal_wrapper_reports_the_episode_goal_across_an_auto_reset():
  env, params = envs.make("GoalGrid-v0", size=3, max_steps_in_episode=2)
  wrapped = envs.DesiredGoalWrapper(env)
  obs, state = wrapped.reset(jax.random.PRNGKey(0), params)
  for t in range(4):
    goal, pos = state.goal, state.pos
    obs, state, _, term, trunc, info = wrapped.step(jax.random.PRNGKey(t), state, 0, params)
    np.testing.assert_array_equal(info["desired_goal"], goal)
    np.testing.assert_array_equal(info["prev_achieved_goal"], pos)


def test_every_wrapper_is_one_base_and_delegates():
  """credit_jax/envs/wrappers.py's `Wrapper` is the base of every library wrapper; what a
  wrapper does not override is its inner env's (name, actions, params, spaces,
  boundaries), and only a wrapper that keeps the inner state forwards other attributes."""
  from credit_jax.addons import critique, step_states   # pylint: disable=g-import-not-at-top
  from credit_jax.algos import hierarchy                 # pylint: disable=g-import-not-at-top
  from credit_jax.envs import wrappers                   # pylint: disable=g-import-not-at-top
  from credit_jax.experiments.bsuite import padded       # pylint: disable=g-import-not-at-top
  for cls in (envs.HistoryWrapper, envs.DesiredGoalWrapper, step_states.StepStateWrapper,
              hierarchy.SubgoalWrapper, critique.RetryWrapper, padded.PaddedChain):
    assert issubclass(cls, wrappers.Wrapper), cls
  keychain, params = envs.make("KeyChain-v0", horizon=5, num_actions=3)
  same = step_states.StepStateWrapper(keychain)
  windowed = envs.HistoryWrapper(same, 2)
  assert windowed.inner is same and same.inner is keychain
  assert windowed.num_actions == same.num_actions == 3
  assert windowed.default_params == same.default_params == keychain.default_params
  assert windowed.action_space(params).n == 3
  assert same.observation_space(params).shape == keychain.observation_space(params).shape
  assert windowed.name == f"History2(StepStates({keychain.name}))"
  assert envs.DesiredGoalWrapper(keychain).name == keychain.name
  assert same.horizon == keychain.horizon == 5        # the same state: forwarded
  with pytest.raises(AttributeError, match="has no attribute 'horizon'"):
    windowed.horizon                                  # pylint: disable=pointless-statement
  # Boundary checks read the inner state (`state.inner` where the wrapper wraps it).
  _, state = windowed.reset(jax.random.PRNGKey(0), params)
  for time, ended in ((0, False), (5, True)):
    inner = state.inner.replace(time=jnp.int32(time))
    assert bool(keychain.is_terminated(inner, params)) is ended
    assert bool(same.is_terminated(inner, params)) is ended
    assert bool(windowed.is_terminated(state.replace(inner=inner), params)) is ended
    assert bool(windowed.is_truncated(state.replace(inner=inner), params)) == bool(
        keychain.is_truncated(inner, params))
  with pytest.raises(NotImplementedError, match="HistoryWrapper returns its obs"):
    windowed.get_obs(state, params)
