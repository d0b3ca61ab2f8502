"""Tests for credit_jax/addons/critique.py: critics against hand-made ground truth, and the retry
wrapper's attempt accounting, state restores and critique channel."""
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax.addons import critique
from credit_jax.experiments.critique import critic_training as ct
from credit_jax import envs, rollout


def _keychain(horizon=6, k=2, a=4, cue_delay=0):
  return envs.make("KeyChain-v0", horizon=horizon, num_pivotal=k, num_actions=a,
                   cue_delay=cue_delay)


def _np_first_wrong(pivotal, answers, actions, length):
  for t in range(length):
    if pivotal[t] and actions[t] != answers[t]:
      return (t, answers[t], 1.0)
  return critique.NO_CRITIQUE


@pytest.mark.parametrize("actions,length,expected", [
    ([0, 2, 9, 3, 0, 0], 6, (2, 1, 1.0)),      # step 1 right, step 2 wrong
    ([0, 2, 1, 0, 0, 0], 6, (4, 3, 1.0)),      # first two right, step 4 wrong
    ([0, 2, 1, 0, 3, 0], 6, (-1, -1, 0.0)),    # all pivotal steps right
    ([0, 2, 1, 0, 0, 0], 4, (-1, -1, 0.0)),    # the wrong step lies past `length`
    ([5, 0, 0, 0, 0, 0], 6, (1, 2, 1.0)),      # distractor actions never count
])
def test_first_wrong_step_hand_made(actions, length, expected):
  pivotal = np.array([0, 1, 1, 0, 1, 0], bool)
  answers = np.array([-1, 2, 1, -1, 3, -1])
  got = critique.first_wrong_step(pivotal, answers, np.array(actions), length)
  np.testing.assert_allclose(got, expected)
  np.testing.assert_allclose(got, _np_first_wrong(pivotal, answers, actions, length))
  jitted = jax.jit(critique.first_wrong_step)(pivotal, answers, np.array(actions), length)
  np.testing.assert_allclose(jitted, expected)


def test_first_wrong_step_checks_shapes():
  with pytest.raises(ValueError, match="must all be"):
    critique.first_wrong_step(np.zeros(3, bool), np.zeros(3), np.zeros(4), 3)


def test_keychain_oracle_matches_numpy_on_random_tasks():
  env, params = _keychain(horizon=8, k=3)
  keys = jax.random.split(jax.random.key(1), 64)
  _, states = jax.vmap(env.reset, (0, None))(keys, params)
  acts = jax.random.randint(jax.random.key(2), (64, 8), 0, 4)
  crit = jax.vmap(lambda s, a: critique.keychain_oracle(env, s, a, 8, None, None))(states, acts)
  for i in range(64):
    s = jax.tree.map(lambda x, i=i: x[i], states)
    piv, ans = (np.asarray(x) for x in env.oracle(s))
    np.testing.assert_allclose(crit[i], _np_first_wrong(piv, ans, np.asarray(acts[i]), 8))


def test_noisy_critic_rate_and_lies():
  env, params = _keychain(horizon=8, k=3)
  _, state = env.reset(jax.random.key(3), params)
  piv, ans = (np.asarray(x) for x in env.oracle(state))
  acts = jnp.where(jnp.asarray(piv), (jnp.asarray(ans) + 1) % 4, 0)   # all pivotal wrong
  truth = np.asarray(critique.keychain_oracle(env, state, acts, 8, None, None))
  keys = jax.random.split(jax.random.key(4), 4000)
  for noise in (0.0, 0.3, 1.0):
    crit = np.asarray(jax.vmap(lambda k, n=noise: critique.keychain_noisy(
        env, state, acts, 8, k, critique.RetryParams(params, n)))(keys))
    lies = ~np.all(crit == truth, axis=1)
    steps = crit[:, 0].astype(int)
    assert np.all(piv[steps]) and np.all(crit[:, 2] == 1.0)
    # A lie never suggests the right answer; a truth always does.
    assert np.all(crit[lies, 1] != ans[steps[lies]])
    assert np.all(crit[~lies, 1] == ans[steps[~lies]])
    # A lie that blames the true first step with another wrong action still differs.
    assert abs(lies.mean() - noise) < 0.03


def _step(w, params, state, action, key=0):
  return jax.jit(w.step_env)(jax.random.key(key), state, jnp.int32(action), params)


def test_retry_wrapper_attempt_accounting_and_restore():
  env, p = _keychain(horizon=4, k=2)
  w = critique.RetryWrapper(env, attempts=3, critic="oracle")
  params = critique.RetryParams(inner=p, noise=0.0)
  obs, s = w.reset(jax.random.key(5), params)
  assert obs.shape == w.obs_shape == (6 + 4 + 2,)
  piv, ans = (np.asarray(x) for x in env.oracle(s.start))
  wrong = np.where(piv, (ans + 1) % 4, 0)
  right = np.where(piv, ans, 0)
  first = int(np.argmax(piv))
  # Attempt 0: all wrong -> a critique for the first pivotal step, attempt 1 starts.
  for t in range(4):
    obs, s, r, term, info = _step(w, params, s, wrong[t])
    assert int(info["attempt"]) == 0 and bool(info["attempt_end"]) == (t == 3)
  assert not term and float(r) == 0.0
  np.testing.assert_allclose(info["critique"], (first, ans[first], 1.0))
  np.testing.assert_allclose(s.critiques[0], (first, ans[first], 1.0))
  assert int(s.attempt) == 1 and int(s.t) == 0 and np.all(np.asarray(s.actions) == -1)
  chex_equal = jax.tree.map(lambda a, b: bool(np.all(np.asarray(a) == np.asarray(b))),
                            s.inner, s.start)
  assert all(jax.tree.leaves(chex_equal))        # inner state restored to the task start
  np.testing.assert_allclose(obs[:6], s.start_obs)
  # The critique shows at its step, with the suggestion one-hot and the flags.
  features = np.asarray(w.critique_features(s.critiques, jnp.int32(first), s.attempt))
  np.testing.assert_allclose(features, np.r_[np.eye(4)[ans[first]], 1.0, 0.5])
  # Attempt 1: right everywhere -> success terminates the retry episode with reward 1.
  for t in range(4):
    obs, s, r, term, info = _step(w, params, s, right[t])
    assert int(info["attempt"]) == 1
  assert bool(term) and float(r) == 1.0 and bool(info["attempt_success"])
  np.testing.assert_allclose(info["critique"], critique.NO_CRITIQUE)


def test_retry_wrapper_ends_after_last_attempt():
  env, p = _keychain(horizon=3, k=1)
  w = critique.RetryWrapper(env, attempts=2, critic="oracle")
  params = w.default_params
  _, s = w.reset(jax.random.key(6), params)
  piv, ans = (np.asarray(x) for x in env.oracle(s.start))
  wrong = np.where(piv, (ans + 1) % 4, 0)
  terms = []
  for _ in range(2):
    for t in range(3):
      _, s, r, term, info = _step(w, params, s, wrong[t])
      terms.append(bool(term))
  assert terms == [False] * 5 + [True]
  # The last attempt writes no critique (nothing would read it).
  np.testing.assert_allclose(info["critique"], critique.NO_CRITIQUE)
  # gymnax's auto-reset draws a fresh task after the retry episode ends.
  _, s2, *_ = jax.jit(w.step)(jax.random.key(7), s.replace(
      t=jnp.int32(2), attempt=jnp.int32(1)), jnp.int32(wrong[2]), params)
  assert int(s2.attempt) == 0 and int(s2.time) == 0


def _follow_critique(num_actions):
  """A scripted policy: the suggested action where a critique points, else action 0."""
  def policy(params, obs, key):
    suggest = obs[-(num_actions + 2):-2]
    action = jnp.where(jnp.any(suggest > 0), jnp.argmax(suggest), 0).astype(jnp.int32)
    return action, jnp.zeros(()), {}
  return policy


@pytest.mark.parametrize("critic,expect_last", [("oracle", 1.0), ("none", None)])
def test_retry_rollout_with_a_critique_following_policy(critic, expect_last):
  env, p = _keychain(horizon=6, k=2)
  w = critique.RetryWrapper(env, attempts=3, critic=critic)
  traj = jax.jit(lambda k: rollout.collect_episodes(
      w, w.default_params, _follow_critique(4), None, k, 256, w.horizon))(jax.random.key(8))
  per = ct.attempt_success(traj, 3)
  cum = np.asarray(ct.cumulative_success(per)).mean(1)
  # Action 0 is right with probability 1/4 per pivotal step: 1/16 on the first attempt.
  assert abs(cum[0] - 1 / 16) < 0.05
  if expect_last is not None:
    assert cum[2] == expect_last         # two critiques fix both pivotal steps
  else:
    np.testing.assert_allclose(cum, cum[0])   # a deterministic policy repeats itself
  # A retry episode's return is 1 iff some attempt succeeded.
  ret = np.asarray(jnp.sum(traj.rewards * traj.valid, 0))
  np.testing.assert_allclose(ret, np.asarray(per).max(0))


@pytest.mark.parametrize("name,kwargs,steps", [
    ("BitFlip-v0", dict(num_bits=3), 3),
    ("GoalGrid-v0", dict(size=3, targets="all", max_steps_in_episode=4), 4),
    ("TextEdit-v0", dict(buffer_len=3, vocab_size=2, start_len=2, num_edits=1,
                         goal_edits="all"), 6),
])
def test_retry_wrapper_on_a_goal_environment(name, kwargs, steps):
  env, p = envs.make(name, **kwargs)
  w = critique.RetryWrapper(env, attempts=2, critic="none", max_attempt_steps=steps)
  traj = jax.jit(lambda k: rollout.collect_episodes(
      w, w.default_params, rollout.uniform_random_policy(env.num_actions), None, k, 64,
      w.horizon))(jax.random.key(9))
  per = np.asarray(ct.attempt_success(traj, 2))
  ret = np.asarray(jnp.sum(traj.rewards * traj.valid, 0))
  np.testing.assert_allclose(ret, per.max(0))   # an episode succeeds iff an attempt does
  assert 0 < per[0].mean() < 1
  # A second attempt happens only after a failed first one.
  assert not np.any(per[1][per[0] > 0])


def test_retry_wrapper_argument_checks():
  env, _ = _keychain()
  with pytest.raises(ValueError, match="attempts"):
    critique.RetryWrapper(env, attempts=0)
  with pytest.raises(ValueError, match="critic"):
    critique.RetryWrapper(env, attempts=2, critic="psychic")


def test_with_critiques_preloads_the_store():
  env, _ = _keychain(horizon=4, k=1)
  w = critique.RetryWrapper(env, attempts=3, critic="oracle")
  obs, s = w.reset(jax.random.key(10), w.default_params)
  crit = jnp.asarray([[0.0, 2.0, 1.0], critique.NO_CRITIQUE], jnp.float32)
  obs, s = w.with_critiques(s, crit)
  np.testing.assert_allclose(obs[-6:], np.r_[np.eye(4)[2], 1.0, 0.0])
  # A new critique goes into the first free slot, leaving the preloaded one.
  piv, ans = (np.asarray(x) for x in env.oracle(s.start))
  for t in range(4):
    _, s, *_ = _step(w, w.default_params, s, (ans[t] + 1) % 4 if piv[t] else 0)
  np.testing.assert_allclose(s.critiques[0], crit[0])
  np.testing.assert_allclose(s.critiques[1], (int(np.argmax(piv)), ans[piv][0], 1.0))
  with pytest.raises(ValueError, match="critiques must be"):
    w.with_critiques(s, jnp.zeros((3, 3)))


def test_learned_critic_beats_chance_and_fits_the_wrapper():
  env, p = _keychain(horizon=6, k=2, cue_delay=3)
  params, losses = jax.jit(lambda k: ct.train_critic(env, p, k, 150, batch=128))(
      jax.random.key(11))
  assert float(losses[-1]) < 0.5 * float(losses[0])
  step_acc, both_acc = jax.jit(lambda k: ct.localisation_accuracy(env, p, params, k, 512))(
      jax.random.key(12))
  # Chance: 2 pivotal steps among 6 (+ "none"); a fitted critic names the right one.
  assert float(step_acc) > 0.6 and float(both_acc) > 0.5
  w = critique.RetryWrapper(env, attempts=2, critic=ct.learned_critic)
  wp = critique.RetryParams(inner=p, critic_params=params)
  traj = jax.jit(lambda k: rollout.collect_episodes(
      w, wp, _follow_critique(4), None, k, 128, w.horizon))(jax.random.key(13))
  cum = np.asarray(ct.cumulative_success(ct.attempt_success(traj, 2))).mean(1)
  assert cum[1] > cum[0] + 0.1     # its critiques fix steps, as the oracle's do


@pytest.mark.slow
def test_reinforce_learns_to_follow_oracle_critiques_on_retry_episodes():
  from credit_jax.algos import reinforce
  c = reinforce.default_config()
  c.env_kwargs.update(horizon=6, num_pivotal=2, cue_delay=3)
  c.retry_attempts, c.retry_critic, c.horizon = 3, "oracle", 18
  c.num_updates, c.num_envs, c.lr = 60, 32, 1e-2
  _, m = jax.jit(reinforce.make_train(c))(jax.random.key(0))
  # Blind: 1 - (15/16)^3 = 0.18 without critiques; following them solves every task.
  assert float(np.mean(m["success"][:5])) < 0.35
  assert float(np.mean(m["success"][-10:])) > 0.9


def test_recipes_refuse_a_rollout_shorter_than_a_retry_episode():
  from credit_jax.algos import train as train_lib, grpo, reinforce
  for recipe in (reinforce, grpo):
    c = recipe.default_config()
    c.env_kwargs.update(horizon=6, num_pivotal=2)
    c.retry_attempts, c.retry_critic, c.horizon = 3, "oracle", 6
    with pytest.raises(train_lib.ConfigError, match=r"config\.horizon: 6 .* up to 18 steps"):
      recipe.validate_config(c)
    c.history_window = 2          # the check looks through the history wrapper
    with pytest.raises(train_lib.ConfigError, match="set horizon >= 18"):
      recipe.validate_config(c)
    c.horizon = 18
    recipe.validate_config(c)


def test_bitflip_oracle_hand_made_and_retries():
  env, p = envs.make("BitFlip-v0", num_bits=4)
  _, s = env.reset(jax.random.key(14), p)
  s = s.replace(bits=jnp.array([0, 0, 0, 0]), goal=jnp.array([1, 0, 1, 0]))
  crit = lambda acts, n=4: np.asarray(critique.bitflip_oracle(
      env, s, jnp.array(acts), n, None, None))
  # Flip 0 (useful), then 1 (already matches: wrong); bit 2 is the one left to flip.
  np.testing.assert_allclose(crit([0, 1, 1, 2]), (1, 2, 1.0))
  # Flip 3 first: wrong at step 0, suggest bit 0; an invalid action is wrong too.
  np.testing.assert_allclose(crit([3, 0, 2, 3]), (0, 0, 1.0))
  np.testing.assert_allclose(crit([0, 7, 2, 0]), (1, 2, 1.0))
  np.testing.assert_allclose(crit([0, 2, 1, 1]), critique.NO_CRITIQUE)   # solved at step 1
  np.testing.assert_allclose(crit([0, 1, 1, 2], n=1), critique.NO_CRITIQUE)
  # A critique-following policy with the BitFlip oracle solves within n + 1 attempts.
  w = critique.RetryWrapper(env, attempts=5, critic="bitflip_oracle")
  traj = jax.jit(lambda k: rollout.collect_episodes(
      w, w.default_params, _follow_critique(4), None, k, 64, w.horizon))(jax.random.key(15))
  cum = np.asarray(ct.cumulative_success(ct.attempt_success(traj, 5))).mean(1)
  assert cum[-1] > cum[0] + 0.3


def test_critic_trained_by_retry_improvement_learns_useful_critiques():
  env, p = _keychain(horizon=6, k=1, cue_delay=3)
  follow = _follow_critique(4)
  act = lambda params, obs, key: follow(params, obs, key)[0]
  _, rewards = jax.jit(lambda k: ct.train_critic_by_improvement(
      env, p, act, None, k, 150, batch=64, lr=3e-3))(jax.random.key(16))
  rewards = np.asarray(rewards)
  # k = 1: a retry that follows the right critique always succeeds; action 0 alone
  # succeeds with probability 1/4 (when it happens to be the cue).
  assert rewards[:10].mean() < 0.5
  assert rewards[-20:].mean() > rewards[:10].mean() + 0.25


def test_the_runner_names_no_recipe_and_imports_no_critique(monkeypatch):
  """algos/train.py keeps no list of recipe names (a recipe declares `whole_episodes`)
  and builds retry episodes through `features.CONFIG_WRAPPERS`, not an import."""
  import ast
  import os
  import types
  from credit_jax.algos import train as train_lib, reinforce
  from credit_jax.addons import features
  with open(os.path.join(os.path.dirname(__file__), os.pardir, "credit_jax", "algos",
                         "train.py")) as f:
    tree = ast.parse(f.read())
  imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
              for a in n.names}
  assert "critique" not in imported and not hasattr(train_lib, "EPISODIC")
  strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
  assert not strings & {"grpo", "reinforce", "grpo_relabel", "search_then_train"}
  assert features.CONFIG_WRAPPERS["retry_attempts"] == critique.__name__
  # An entry of the table is applied by make_env, under the history window.
  fake = types.ModuleType("fake_wrapper")
  fake.wrap_env_from_config = lambda c, env, p: (envs.HistoryWrapper(env, 3), p)
  monkeypatch.setitem(sys.modules, "fake_wrapper", fake)
  monkeypatch.setitem(features.CONFIG_WRAPPERS, "fake_window", "fake_wrapper")
  c = reinforce.default_config()
  c.fake_window, c.history_window = 1, 2
  env, _ = train_lib.make_env(c)
  assert env.name.startswith("History2(History3(")
  c.fake_window = 0
  name = train_lib.make_env(c)[0].name
  assert name.startswith("History2(") and "History3" not in name
