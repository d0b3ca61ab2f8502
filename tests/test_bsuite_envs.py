"""bsuite's chains (credit_jax/envs/bsuite.py) against bsuite's definitions.

Each fix over gymnax's versions is checked against a plain-Python reference of bsuite's
rules and, where the `bsuite` package is installed (the test extra), against bsuite's own
environment classes stepped with the same actions; the gymnax behaviour each fix removes
is checked too, so a test fails if the difference it guards disappears or comes back.
"""
import functools

import gymnax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import oracles

from credit_jax import envs
from credit_jax.envs import bsuite as bs

KEY = jax.random.PRNGKey(0)


@functools.partial(jax.jit, static_argnums=0)
def _scan_actions(env, params, state, actions, key):
  def body(state, xs):
    t, a = xs
    _, state, r, term, trunc, info = env.step(jax.random.fold_in(key, t), state, a,
                                              params)
    return state, (info["final_observation"], r, term, trunc,
                   info.get("success", jnp.zeros((), bool)))
  steps = jnp.arange(actions.shape[0])
  return jax.lax.scan(body, state, (steps, actions))[1]


PAD = 1024   # every action sequence is padded to this length: one compile per env


def play(env, params, actions, key=KEY, state=None):
  """Steps `actions` from a reset (or `state`) in one scan, up to the first episode end;
  per step (obs, reward, terminated, truncated, success)."""
  if state is None:
    _, state = env.reset(key, params)
  padded = np.zeros(PAD, np.int32)
  padded[:len(actions)] = actions
  out = jax.device_get(_scan_actions(env, params, state, jnp.asarray(padded), key))
  out = [x[:len(actions)] for x in out]
  rows = []
  for obs, r, term, trunc, succ in zip(*out):
    rows.append((np.asarray(obs), float(r), bool(term), bool(trunc), bool(succ)))
    if term or trunc:
      break
  return rows


# --- umbrella -------------------------------------------------------------------------

UMBRELLA = envs.make("bsuite/UmbrellaChain-v0")
MEMORY = envs.make("bsuite/MemoryChain-v0")


def umbrella(chain_length):
  env, params = UMBRELLA
  return env, params.replace(chain_length=chain_length)


def memory(length):
  env, params = MEMORY
  return env, params.replace(memory_length=length)


def test_umbrella_longer_than_100_reaches_its_final_reward():
  env, params = umbrella(150)
  _, state = env.reset(KEY, params)
  rows = play(env, params, [int(state.need_umbrella)] + [0] * 200, state=state)
  assert len(rows) == 150
  assert [r[2] for r in rows] == [False] * 149 + [True]
  assert not any(r[3] for r in rows)
  assert rows[-1][1] == 1.0 and rows[-1][4]
  assert not any(r[4] for r in rows[:-1])
  # gymnax's own version cuts the same chain at step 100, before the final reward.
  genv, gparams = gymnax.make("UmbrellaChain-bsuite")
  gparams = gparams.replace(chain_length=150)
  grows = play(genv, gparams, [0] * 200)
  assert len(grows) == 100 and grows[-1][3] and not grows[-1][2]


def test_umbrella_wrong_umbrella_pays_minus_one_and_is_no_success():
  env, params = umbrella(7)
  _, state = env.reset(KEY, params)
  rows = play(env, params, [1 - int(state.need_umbrella)] * 7, state=state)
  assert len(rows) == 7 and rows[-1][1] == -1.0 and not rows[-1][4]
  # every earlier step pays a random +-1 (the distractor reward)
  assert all(r[1] in (-1.0, 1.0) for r in rows[:-1])


def test_umbrella_has_20_iid_distractor_bits():
  env, params = umbrella(1000)
  assert env.obs_shape == (23,) and env.n_distractor == 20
  assert env.observation_space(params).shape == (23,)
  rows = play(env, params, [0] * 400)
  assert len(rows) == 400
  bits = np.stack([r[0][3:] for r in rows])                     # [400, 20]
  assert set(np.unique(bits)) <= {0.0, 1.0}
  assert abs(bits.mean() - 0.5) < 0.03                          # 8000 fair bits: sd .0056
  assert np.mean(np.all(bits[1:] == bits[:-1], axis=1)) < 0.01  # redrawn every step
  # gymnax's default has none.
  assert gymnax.make("UmbrellaChain-bsuite")[0].observation_space(None).shape == (3,)


def test_umbrella_observation_and_choice_as_bsuite_defines_them():
  """need, has, 1 - t/L at every step; the umbrella is the first action alone."""
  env, params = umbrella(5)
  obs0, state = env.reset(KEY, params)
  assert obs0[0] == state.need_umbrella and obs0[1] == state.has_umbrella
  assert obs0[2] == 1.0
  first = 1 - int(state.need_umbrella)
  rows = play(env, params, [first, 1, 1, 0, 1], state=state)
  for t, (obs, *_rest) in enumerate(rows):
    assert obs[1] == first and np.isclose(obs[2], 1 - (t + 1) / 5)
  assert rows[-1][1] == -1.0    # later actions did not change the umbrella


def test_umbrella_against_bsuite_itself():
  chain = oracles.import_oracle("bsuite.environments.umbrella_chain")
  for length, seed in ((1, 0), (4, 1), (12, 2)):
    ref = chain.UmbrellaChain(chain_length=length, n_distractor=20, seed=seed)
    ref_obs = [ref.reset().observation[0]]
    env, params = umbrella(length)
    _, state = env.reset(KEY, params)
    state = state.replace(need_umbrella=jnp.int32(ref._need_umbrella),
                          has_umbrella=jnp.int32(ref._has_umbrella))
    actions = [seed % 2] + [1] * (length - 1)
    ref_rows = []
    for a in actions:
      ts = ref.step(a)
      ref_rows.append((ts.observation[0], ts.reward, ts.last()))
    rows = play(env, params, actions, state=state)
    assert len(rows) == len(ref_rows) == length
    assert ref_obs[0].shape == rows[0][0].shape == (23,)
    for (obs, r, term, trunc, _), (robs, rr, rlast) in zip(rows, ref_rows):
      np.testing.assert_allclose(obs[:3], robs[:3], atol=1e-6)   # the bits are noise
      assert term == rlast and not trunc
    assert rows[-1][1] == ref_rows[-1][1]                       # the final reward


# --- memory ---------------------------------------------------------------------------

def reference_memory(length, context, actions):
  """bsuite's MemoryChain (one bit, query 0) in plain Python: (reset obs, rows)."""
  def obs(t):
    return [1 - t / length, 0.0, (2 * context - 1) if t == 0 else 0.0]
  rows, t = [], 0
  for a in actions:
    o = obs(t)
    t += 1
    if t - 1 < length:
      rows.append((o, 0.0, False))
    else:
      rows.append((o, 1.0 if a == context else -1.0, True))
      break
  return obs(0), rows


@pytest.mark.parametrize("length,context,answer", [(1, 0, 0), (3, 1, 1), (5, 1, 0)])
def test_memory_context_and_length_as_bsuite(length, context, answer):
  env, params = memory(length)
  obs0, state = env.reset(KEY, params)
  state = state.replace(context=jnp.full((1,), context, jnp.int32))
  obs0 = env.get_obs(state, params)
  actions = [0] * length + [answer]
  ref0, ref_rows = reference_memory(length, context, actions)
  np.testing.assert_allclose(obs0, ref0, atol=1e-6)
  rows = play(env, params, actions, state=state)
  assert len(rows) == len(ref_rows) == length + 1      # L + 1 steps, the last answered
  for (obs, r, term, trunc, success), (robs, rr, rterm) in zip(rows, ref_rows):
    np.testing.assert_allclose(obs, robs, atol=1e-6)
    assert (r, term, trunc) == (rr, rterm, False)
    assert success == (term and rr > 0)
  # the context is seen twice, in the reset observation and the first step's, as bsuite
  assert obs0[2] == rows[0][0][2] == 2 * context - 1
  assert all(r[0][2] == 0 for r in rows[1:])


def test_memory_against_bsuite_itself():
  chain = oracles.import_oracle("bsuite.environments.memory_chain")
  for length, seed in ((1, 0), (4, 3), (9, 5)):
    ref = chain.MemoryChain(memory_length=length, num_bits=1, seed=seed)
    ref_obs0 = ref.reset().observation[0]
    context = int(ref._context[0])
    actions = [1] * length + [seed % 2]
    ref_rows = [ref.step(a) for a in actions]
    env, params = memory(length)
    _, state = env.reset(KEY, params)
    state = state.replace(context=jnp.full((1,), context, jnp.int32))
    np.testing.assert_allclose(env.get_obs(state, params), ref_obs0, atol=1e-6)
    rows = play(env, params, actions, state=state)
    assert len(rows) == len(ref_rows)
    for (obs, r, term, _, _), ts in zip(rows, ref_rows):
      np.testing.assert_allclose(obs, ts.observation[0], atol=1e-6)
      assert r == ts.reward and term == ts.last()


def test_memory_1000_is_answered_where_gymnax_truncates():
  env, params = memory(1000)
  rows = play(env, params, [0] * 1001)
  assert len(rows) == 1001 and rows[-1][2] and not rows[-1][3]
  assert rows[-1][1] in (-1.0, 1.0)
  genv, gparams = gymnax.make("MemoryChain-bsuite")
  gparams = gparams.replace(memory_length=1000)
  grows = play(genv, gparams, [0] * 1001)
  assert len(grows) == 1000 and grows[-1][3] and grows[-1][1] == 0.0


# --- discounting ----------------------------------------------------------------------

DISCOUNTING = envs.make("bsuite/DiscountingChain-v0")


def episode_return(env, params, action):
  rows = play(env, params, [action] * 200)
  rewards = [r[1] for r in rows]
  return rows, rewards


@pytest.mark.parametrize("mapping_seed", [0, 3, 5, 9, 14, 19])
def test_discounting_mapping_seed_is_modulo_five_as_bsuite(mapping_seed):
  env, params = DISCOUNTING
  params = params.replace(mapping_seed=mapping_seed)
  for action, horizon in enumerate(bs.BSUITE_HORIZONS):
    rows, rewards = episode_return(env, params, action)
    assert len(rows) == 100 and rows[-1][2] and not rows[-1][3]   # terminates at 100
    paid = [t + 1 for t, r in enumerate(rewards) if r]
    assert paid == [horizon]
    bonus = action == mapping_seed % 5
    assert np.isclose(sum(rewards), 1.1 if bonus else 1.0)
    assert rows[-1][4] == bonus
    assert not any(r[4] for r in rows[:-1])


def test_gymnax_mapping_seed_is_an_index_that_can_drop_the_bonus():
  """What the fix removes: gymnax's mapping_seed 5 has no bonus chain at all."""
  genv, gparams = gymnax.make("DiscountingChain-bsuite", mapping_seed=5)
  returns = [sum(r[1] for r in play(genv, gparams, [a] * 100)) for a in range(5)]
  assert np.allclose(returns, 1.0)
  rows = play(genv, gparams, [0] * 100)
  assert rows[-1][3] and not rows[-1][2]   # it ends by truncation, never terminates


def test_discounting_against_bsuite_itself():
  chain = oracles.import_oracle("bsuite.environments.discounting_chain")
  env, params = DISCOUNTING
  for mapping_seed in range(20):
    p = params.replace(mapping_seed=mapping_seed)
    for action in range(5):
      ref = chain.DiscountingChain(mapping_seed=mapping_seed)
      ref_obs0 = ref.reset().observation[0]
      ref_rows = [ref.step(action) for _ in range(100)]
      obs0, _ = env.reset(KEY, p)
      np.testing.assert_allclose(obs0, ref_obs0, atol=1e-6)
      rows = play(env, p, [action] * 100)
      assert len(rows) == 100 and ref_rows[-1].last()
      got = np.array([[*r[0], r[1], r[2]] for r in rows])
      want = np.array([[*ts.observation[0], ts.reward, ts.last()] for ts in ref_rows])
      np.testing.assert_allclose(got, want, atol=1e-6)


def test_discounting_mapping_seed_vmaps_as_a_param():
  env, params = envs.make("bsuite/DiscountingChain-v0")
  _, states = jax.jit(jax.vmap(
      lambda m: env.reset(KEY, params.replace(mapping_seed=m))))(jnp.arange(20))
  bonus = np.argmax(np.asarray(states.rewards), axis=1)
  np.testing.assert_array_equal(bonus, np.arange(20) % 5)
  np.testing.assert_allclose(np.asarray(states.rewards).max(axis=1), 1.1, rtol=1e-6)


def test_discounting_long_chains_last_their_longest_horizon():
  env, params = envs.make("bsuite/DiscountingChain-v0", mapping_seed=6,
                          reward_horizons=(1, 3, 10, 30, 100, 300, 1000))
  assert env.num_actions == 7 and env.episode_len == 1000
  rows = play(env, params, [6] * 1000)
  assert len(rows) == 1000 and rows[-1][2]
  assert rows[-1][1] == pytest.approx(1.1) and rows[-1][4]
  assert np.isclose(rows[299][0][1], 0.3)   # t / 1000


def test_impossible_settings_name_the_field():
  with pytest.raises(ValueError, match="chain_length"):
    envs.make("bsuite/UmbrellaChain-v0", chain_length=0)
  with pytest.raises(ValueError, match="memory_length"):
    envs.make("bsuite/MemoryChain-v0", memory_length=0.5)
  with pytest.raises(ValueError, match="mapping_seed"):
    envs.make("bsuite/DiscountingChain-v0", mapping_seed=-1)
  with pytest.raises(ValueError, match="reward_horizons"):
    envs.make("bsuite/DiscountingChain-v0", reward_horizons=(3, 3))
  with pytest.raises(ValueError, match="n_distractor"):
    envs.make("bsuite/UmbrellaChain-v0", n_distractor=-1)


def test_recipes_report_success_from_info_not_from_a_positive_reward():
  """The PPO success signal of an umbrella chain is the umbrella, not the +-1 noise."""
  from credit_jax import rollout
  from credit_jax import episodes
  env, params = umbrella(10)
  obs, state = rollout.reset(env, params, KEY, 64)
  traj, _ = rollout.collect(env, params, rollout.uniform_random_policy(2), None,
                            jax.random.PRNGKey(1), state, obs, 100)
  dones = np.asarray(traj.dones)
  signal = np.asarray(episodes.success_signal(traj))
  final_reward = np.asarray(traj.rewards)[dones]
  np.testing.assert_array_equal(signal[dones] > 0, final_reward > 0)
  assert not signal[~dones].any()
  rate = (signal[dones] > 0).mean()
  assert 0.4 < rate < 0.6                        # a random umbrella: 640 episodes
  any_positive = np.asarray(traj.rewards).reshape(10, 10, 64).max(axis=1) > 0
  assert any_positive.mean() > 0.95              # what "a positive reward" would say


@pytest.mark.parametrize("adapter,gymnax_id,kwargs", [
    ("bsuite/UmbrellaChain-v0", "UmbrellaChain-bsuite", {"chain_length": 7}),
    ("bsuite/MemoryChain-v0", "MemoryChain-bsuite", {"memory_length": 4}),
])
def test_adapter_success_agrees_with_the_gymnax_ids_rule(adapter, gymnax_id, kwargs):
  """credit_jax/envs/success.py's rule for gymnax's id (terminated on a final +1) gives
  the adapter's `info["success"]` on every episode; the recipes report it on the adapter
  (a CreditEnv) and, on gymnax's id, only where their own test is that rule."""
  from credit_jax import episodes, rollout
  from credit_jax.envs import success
  env, params = envs.make(adapter, **kwargs)
  traj = rollout.collect_episodes(env, params, rollout.uniform_random_policy(2), None,
                                  jax.random.PRNGKey(3), 256, 16)
  rule = success.final_reward_success(traj.rewards, traj.terminated, traj.valid)
  reported = success.episode_success(adapter, env, traj.rewards, traj.terminated,
                                     traj.valid, traj.info)
  np.testing.assert_array_equal(np.asarray(reported), np.asarray(rule))
  assert 0.3 < float(np.mean(rule)) < 0.7          # a random choice, 256 episodes
  assert episodes.has_success(ml_collections.ConfigDict(
      {"env_name": adapter, "env_kwargs": kwargs}))
  assert episodes.has_success(ml_collections.ConfigDict({"env_name": gymnax_id})) == (
      success.rule_for(gymnax_id).recipes_agree)
