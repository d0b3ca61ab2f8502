"""KeyChain's shortcut switches: each one's semantics on hand-built episodes, the oracle
and the random-policy success under every combination (enumeration and simulation)."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import envs, rollout
from credit_jax.envs import keychain, keychain_switches

ON = {"pivotal_flag": False, "distractor_cues": True, "distinct_rules": True,
      "cues_at_start": True, "pivotal_density": 0.25, "distractor_reward_std": 0.5}


def hand_state(env, positions, cues, seeds=(11, 22)):
  """A reset state with chosen pivotal positions and cues (seeds where the env has them)."""
  fields = dict(positions=jnp.asarray(positions, jnp.int32),
                cues=jnp.asarray(cues, jnp.int32), all_correct=jnp.array(True),
                time=jnp.zeros((), jnp.int32))
  if env.distractor_cues or env.distractor_reward_std > 0:
    return keychain.KeyChainProbeState(**fields, seeds=jnp.asarray(seeds, jnp.uint32))
  return keychain.KeyChainState(**fields)


def play(env, state, actions):
  """Steps `actions` from `state`: lists of obs (incl. the first), rewards, infos, states."""
  params = env.default_params
  step = jax.jit(lambda s, a: env.step_env(jax.random.key(0), s, a, params))
  obs, rewards, infos, states = [env.get_obs(state)], [], [], [state]
  for a in actions:
    o, state, r, _, info = step(state, jnp.int32(a))
    obs.append(o), rewards.append(float(r)), infos.append(info), states.append(state)
  return [np.asarray(o) for o in obs], rewards, infos, states


def part(env, obs, name):
  start, stop = env.observation_layout[name]
  return obs[start:stop]


def test_defaults_keep_the_original_layout_state_and_info():
  env = keychain.KeyChain(horizon=6, num_pivotal=2, num_actions=3)
  assert env.shortcuts_removed == () and env.obs_shape == (5,)
  assert env.observation_layout == {"cue": (0, 3), "flag": (3, 4), "time": (4, 5)}
  _, state = env.reset(jax.random.key(0), env.default_params)
  assert type(state) is keychain.KeyChainState
  obs, rewards, infos, _ = play(env, hand_state(env, [1, 4], [2, 0]), [0, 2, 0, 0, 0, 0])
  np.testing.assert_array_equal(obs[1], np.float32([0, 0, 1, 1, 1 / 6]))   # pivotal, cue 2
  np.testing.assert_array_equal(obs[2], np.float32([0, 0, 0, 0, 2 / 6]))   # distractor
  assert set(infos[0]) == {"pivotal", "correct_action", "correct"}
  assert rewards == [0, 0, 0, 0, 0, 1]


def test_no_pivotal_flag_leaves_only_the_cue():
  env = keychain.KeyChain(horizon=6, num_pivotal=2, num_actions=3, pivotal_flag=False)
  assert env.obs_shape == (4,) and "flag" not in env.observation_layout
  obs, rewards, infos, _ = play(env, hand_state(env, [1, 4], [2, 0]), [0, 2, 1, 1, 0, 1])
  np.testing.assert_array_equal(obs[1], np.float32([0, 0, 1, 1 / 6]))
  np.testing.assert_array_equal(obs[3], np.float32([0, 0, 0, 3 / 6]))
  assert rewards[-1] == 1.0 and bool(infos[-1]["success"])


def test_distractor_cues_show_a_cue_everywhere_and_change_nothing():
  env = keychain.KeyChain(horizon=40, num_pivotal=2, num_actions=4, distractor_cues=True)
  state = hand_state(env, [7, 30], [3, 1])
  right = np.zeros(40, int)
  right[7], right[30] = 3, 1
  other = (right + 1 + np.arange(40) % 3) % 4
  other[7], other[30] = 3, 1          # the same pivotal answers, other distractor actions
  obs_a, rew_a, info_a, st_a = play(env, state, right)
  obs_b, rew_b, info_b, st_b = play(env, state, other)
  for o in obs_a[:-1]:
    assert part(env, o, "cue").sum() == 1.0          # one cue in every observation
  np.testing.assert_array_equal(part(env, obs_a[7], "cue"), [0, 0, 0, 1])
  np.testing.assert_array_equal(part(env, obs_a[30], "cue"), [0, 1, 0, 0])
  flags = [part(env, o, "flag")[0] for o in obs_a[:-1]]
  assert [t for t, f in enumerate(flags) if f] == [7, 30]
  np.testing.assert_array_equal(np.stack(obs_a), np.stack(obs_b))   # actions move nothing
  assert rew_a == rew_b and rew_a[-1] == 1.0
  assert all(bool(a.all_correct) == bool(b.all_correct) for a, b in zip(st_a, st_b))
  fakes = {int(np.argmax(part(env, o, "cue"))) for t, o in enumerate(obs_a[:-1])
           if t not in (7, 30)}
  assert len(fakes) == 4                               # the fakes use every cue


def test_fake_cues_are_uniform_and_independent_of_the_pivotal_step():
  env, params = envs.make("KeyChain-v0", horizon=16, num_pivotal=1, num_actions=4,
                          distractor_cues=True, pivotal_flag=False)
  traj = jax.jit(lambda k: rollout.collect_episodes(
      env, params, rollout.uniform_random_policy(4), None, k, 4096, 16))(jax.random.key(3))
  cues = np.asarray(jnp.argmax(traj.obs[:, :, :4], axis=-1))         # [T, B]
  pivotal = np.asarray(traj.info["pivotal"])
  for mask in (pivotal, ~pivotal):                    # real cues, fake cues
    counts = np.bincount(cues[mask], minlength=4)
    n = counts.sum()
    chi2 = np.sum((counts - n / 4) ** 2 / (n / 4))
    assert chi2 < 16.3, counts                          # chi-square, 3 dof, p = 0.001


def test_distinct_rules_permute_the_answer_and_show_the_index():
  env = keychain.KeyChain(horizon=30, num_pivotal=3, num_actions=4, distinct_rules=True)
  rules = env.rules
  assert rules.shape == (3, 4)
  assert all(sorted(r) == [0, 1, 2, 3] for r in rules)           # permutations
  assert len({tuple(r) for r in rules}) == 3                      # pairwise distinct
  wide = keychain.KeyChain(horizon=50, num_pivotal=24, num_actions=4, distinct_rules=True)
  assert len({tuple(r) for r in wide.rules}) == 24                # all 4! of them
  state = hand_state(env, [3, 14, 25], [0, 0, 0])
  answers = rules[:, 0]
  acts = np.zeros(30, int)
  acts[[3, 14, 25]] = answers
  obs, rewards, infos, _ = play(env, state, acts)
  assert rewards[-1] == 1.0
  assert [int(infos[t]["correct_action"]) for t in (3, 14, 25)] == answers.tolist()
  for i, t in enumerate((3, 14, 25)):
    np.testing.assert_array_equal(part(env, obs[t], "index"), np.eye(3)[i])
  segments = [int(np.argmax(part(env, o, "index"))) for o in obs[:-1]]
  assert segments == [0] * 10 + [1] * 10 + [2] * 10             # a function of t alone
  assert part(env, obs[-1], "index").sum() == 0.0
  wrong = acts.copy()
  wrong[[3, 14, 25]] = 0                                         # the cue itself
  expected = float(np.all(answers == 0))
  assert play(env, state, wrong)[1][-1] == expected


def test_cues_at_start_show_every_cue_once():
  env = keychain.KeyChain(horizon=12, num_pivotal=3, num_actions=4, cues_at_start=True)
  with pytest.raises(ValueError, match="cues_at_start"):
    keychain.KeyChain(horizon=12, num_pivotal=3, cue_delay=2, cues_at_start=True)
  state = hand_state(env, [1, 6, 9], [2, 3, 1])
  first = env.get_obs(state)
  block = np.asarray(part(env, np.asarray(first), "start_cues")).reshape(3, 4)
  np.testing.assert_array_equal(block, np.eye(4)[[2, 3, 1]])
  acts = np.zeros(12, int)
  acts[[1, 6, 9]] = np.argmax(block, axis=1)       # the policy remembers the first obs
  obs, rewards, _, _ = play(env, state, acts)
  for o in obs[1:]:
    assert part(env, o, "start_cues").sum() == 0.0 and part(env, o, "cue").sum() == 0.0
  assert part(env, obs[1], "flag")[0] == 1.0 and rewards[-1] == 1.0


@pytest.mark.parametrize("rho,horizon,k", [(0.03, 100, 3), (0.03, 1000, 30),
                                           (0.25, 12, 3), (1.0, 5, 5), (0.001, 10, 1)])
def test_pivotal_density_sets_k(rho, horizon, k):
  env = keychain.KeyChain(horizon=horizon, pivotal_density=rho)
  assert env.num_pivotal == k and env.random_success() == pytest.approx(0.25 ** k)
  _, state = env.reset(jax.random.key(1), env.default_params)
  assert state.positions.shape == (k,)


@pytest.mark.parametrize("kwargs,field", [
    (dict(pivotal_density=1.5), "pivotal_density"),
    (dict(pivotal_density=-0.1), "pivotal_density"),
    (dict(horizon=10, cue_delay=5, pivotal_density=0.8), "cue_delay"),
    (dict(distractor_reward_std=float("nan")), "distractor_reward_std"),
    (dict(pivotal_flag=0), "pivotal_flag"),
    (dict(distinct_rules="yes"), "distinct_rules"),
    (dict(rule_seed=-1), "rule_seed"),
])
def test_bad_switch_values_name_the_field(kwargs, field):
  with pytest.raises(ValueError, match=field):
    envs.make("KeyChain-v0", **kwargs)


def test_reward_noise_is_zero_mean_and_leaves_success_to_the_task():
  sigma = 0.5
  env = keychain.KeyChain(horizon=20, num_pivotal=2, num_actions=4,
                          distractor_reward_std=sigma)
  state = hand_state(env, [4, 15], [1, 2], seeds=(5, 77))
  acts = np.zeros(20, int)
  acts[[4, 15]] = [1, 2]
  _, rewards, infos, _ = play(env, state, acts)
  _, again, _, _ = play(env, state, acts)
  assert rewards == again                                     # same actions, same noise
  assert all(r != 0.0 for r in rewards) and bool(infos[-1]["success"])
  acts[4] = 0                                                 # wrong at step 4
  _, wrong, infos_w, _ = play(env, state, acts)
  np.testing.assert_array_equal(rewards[:4], wrong[:4])       # noise before it unchanged
  assert all(a != b for a, b in zip(rewards[4:], wrong[4:]))  # a new draw from there on
  assert not bool(infos_w[-1]["success"])
  params = env.default_params
  traj = jax.jit(lambda k: rollout.collect_episodes(
      env, params, rollout.uniform_random_policy(4), None, k, 2048, 20))(jax.random.key(4))
  noise = np.asarray(traj.rewards) - np.asarray(traj.info["success"], np.float32)
  n = noise.size
  assert abs(noise.mean()) < 3 * sigma / np.sqrt(n)
  assert abs(noise.std() / sigma - 1.0) < 0.02


def test_reward_noise_differs_inside_a_group_from_one_reset():
  # GRPO's K episodes share a reset; noise that depended on the reset alone would be
  # identical across them and cancel in the group baseline.
  sigma, K, T = 1.0, 8, 30
  env = keychain.KeyChain(horizon=T, num_pivotal=2, num_actions=4,
                          distractor_reward_std=sigma)
  params = env.default_params
  traj = jax.jit(lambda k: rollout.collect_groups(
      env, params, rollout.uniform_random_policy(4), None, k, num_tasks=256,
      group_size=K, horizon=T))(jax.random.key(5))
  noise = np.asarray(traj.rewards) - np.asarray(traj.info["success"], np.float32)
  noise = noise.reshape(T, 256, K)            # time-major, tasks then group members
  summed = noise.sum(0)                       # [tasks, K] each episode's summed noise
  within = summed.var(axis=1, ddof=1).mean()  # variance between members of a group
  assert abs(within / (T * sigma ** 2) - 1.0) < 0.15


COMBOS = [dict(zip(ON, bits)) for bits in itertools.product((False, True), repeat=len(ON))]


def _kwargs(bits):
  return {name: (ON[name] if on else keychain_switches.SWITCHES[name])
          for name, on in bits.items()}


SINGLES = [dict(zip(ON, [name == other for other in ON])) for name in ON]
SINGLES += [dict.fromkeys(ON, False), dict.fromkeys(ON, True)]


def _ids(bits):
  return "".join(str(int(v)) for v in bits.values())


def _make(bits, horizon=12):
  return envs.make("KeyChain-v0", horizon=horizon, num_pivotal=2, num_actions=2,
                   **_kwargs(bits))


def _simulate(env, params, key, episodes, horizon):
  """[] success rate of uniform random actions, by the env's own success report."""
  k_reset, k_act = jax.random.split(key)
  _, state = jax.vmap(env.reset, in_axes=(0, None))(
      jax.random.split(k_reset, episodes), params)
  actions = (jax.random.bits(k_act, (horizon, episodes), jnp.uint32) & 1).astype(jnp.int32)

  def body(s, a):
    _, s, r, _, info = jax.vmap(env.step_env, in_axes=(None, 0, 0, None))(
        k_reset, s, a, params)
    return s, info["success"] if "success" in info else r > 0
  return jnp.mean(jax.lax.scan(body, state, actions)[1][-1].astype(jnp.float32))


def test_every_combination_random_success_matches_simulation():
  horizon, episodes = 12, 4096
  made = [_make(bits, horizon) for bits in COMBOS]
  for bits, (env, _) in zip(COMBOS, made):
    assert env.num_pivotal == (3 if bits["pivotal_density"] else 2)
    assert env.random_success() == 0.5 ** env.num_pivotal
  # All 64 environments in one compiled program (one compile instead of 64).
  rates = jax.jit(lambda key: jnp.stack([
      _simulate(env, params, jax.random.fold_in(key, i), episodes, horizon)
      for i, (env, params) in enumerate(made)]))(jax.random.key(7))
  bad = []
  for bits, (env, _), p in zip(COMBOS, made, np.asarray(rates)):
    q = env.random_success()
    if abs(p - q) >= 3 * np.sqrt(q * (1 - q) / episodes):
      bad.append((_ids(bits), float(p), q))
  assert not bad, bad


def _oracle_measure(env, params, key, episodes, horizon):
  traj = rollout.collect_episodes(env, params, rollout.uniform_random_policy(2), None,
                                  key, episodes, horizon)
  _, first = jax.vmap(env.reset, in_axes=(0, None))(
      jax.random.split(jax.random.split(key)[0], episodes), params)
  pivotal, answers = jax.vmap(env.oracle)(first)                       # [B, T]
  # Every action sequence of one episode (2^T of them), from its start state.
  seqs = (jnp.arange(2 ** horizon)[:, None] >> jnp.arange(horizon)) & 1   # [S, T]
  one = jax.tree.map(lambda x: x[0], first)

  def final(actions):
    def body(s, a):
      _, s, _, _, info = env.step_env(key, s, a, params)
      return s, info.get("success", s.all_correct & (s.time >= horizon))
    _, out = jax.lax.scan(body, one, actions)
    return out[-1]
  enum = jnp.mean(jax.vmap(final)(seqs).astype(jnp.float32))
  return traj, pivotal, answers, enum, jax.vmap(env.answers)(first), first.cues


def test_oracle_and_enumerated_random_success_per_switch():
  horizon, episodes = 12, 256
  made = [_make(bits, horizon) for bits in SINGLES]
  outs = jax.jit(lambda key: [_oracle_measure(env, params, key, episodes, horizon)
                              for env, params in made])(jax.random.key(7))
  for bits, (env, _), out in zip(SINGLES, made, outs):
    traj, pivotal, answers, enum, right, cues = out
    k = env.num_pivotal
    assert float(enum) == env.random_success(), _ids(bits)       # exact
    # The per-step oracle equals the episode oracle (every episode lasts T steps).
    np.testing.assert_array_equal(np.asarray(traj.info["pivotal"]).T, np.asarray(pivotal))
    np.testing.assert_array_equal(np.asarray(traj.info["correct_action"]).T,
                                  np.asarray(answers))
    assert np.all(np.asarray(pivotal).sum(axis=1) == k)
    np.testing.assert_array_equal(np.asarray(right),
                                  env.rules[np.arange(k), np.asarray(cues)])
    correct = np.asarray(traj.info["correct"])
    np.testing.assert_array_equal(correct, np.asarray(traj.info["pivotal"]) & (
        np.asarray(traj.actions) == np.asarray(traj.info["correct_action"])))
    if "success" in traj.info:
      np.testing.assert_array_equal(np.asarray(traj.info["success"]).any(axis=0),
                                    correct.sum(axis=0) == k)
    assert traj.obs.shape[-1] == env.obs_shape[0]
    np.testing.assert_allclose(np.asarray(traj.obs)[..., -1], np.broadcast_to(
        (np.arange(horizon, dtype=np.float32) / np.float32(horizon))[:, None],
        (horizon, episodes)), rtol=1e-6)
