"""The step-credit features as hooks (credit_jax/addons/vine_ppo.py, gigpo.py,
tree_groups.py, step_states.py): refusal and validation through `hooks.check`, the state
and carry they keep, and each slot against the core function it wraps."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from credit_jax import envs, rollout
from credit_jax.addons import gigpo, hooks, step_states, tree_groups, vine_ppo
from credit_jax.config import ConfigError

import step_credit_refs as refs

T, A = 6, 2
WEIGHTS = np.array([[1.0, -0.5, 0.3, 0.2], [-0.5, 1.0, -0.3, -0.4]])
FEATURES = (vine_ppo.VineFeature(), gigpo.GigpoFeature(), tree_groups.TreeFeature())
GRPO = hooks.Recipe("grpo", ("vine", "gigpo", "tree"), rollout=hooks.GROUPS)
PPO = hooks.Recipe("ppo", ("vine",), rollout=hooks.CONTINUING, critic=True)
episodes = jax.jit(rollout.collect_episodes, static_argnums=(0, 2, 5, 6),
                   static_argnames=("keep_states",))
groups = jax.jit(rollout.collect_groups, static_argnums=(0, 2, 5, 6, 7))


def _keychain():
  env, params = envs.make("KeyChain-v0", horizon=T, num_pivotal=2, num_actions=A)
  return step_states.StepStateWrapper(env), params


def _config(**blocks):
  c = ml_collections.ConfigDict({"horizon": T, "group_size": 4, "num_steps": 2 * T,
                                 "history_window": 0, "env_kwargs": {"horizon": T}})
  for name, add in blocks.items():
    add(c)
  return c


def _context(config, env, params, policy):
  return hooks.Context(config=config, recipe=GRPO, env=env, env_params=params,
                       policy=policy, network=None, logits=None,
                       discount=hooks.undiscounted, batch=8)


def test_check_validates_and_refuses_naming_fields():
  hooks.check(_config(vine=vine_ppo.add_config), PPO, FEATURES)
  hooks.check(_config(gigpo=gigpo.add_config), GRPO, FEATURES)
  hooks.check(_config(tree=lambda c: tree_groups.add_config(c, 2, (2, 4))), GRPO, FEATURES)
  bad = [
      (_config(vine=vine_ppo.add_config), hooks.Recipe("dqn"), r"vine\.enabled"),
      (_config(gigpo=gigpo.add_config), PPO, r"gigpo\.enabled"),
      (_config(vine=lambda c: vine_ppo.add_config(c, every=4)), PPO, r"vine\.every"),
      (_config(vine=lambda c: vine_ppo.add_config(c, num_vines=0)), GRPO,
       r"vine\.num_vines"),
      (_config(tree=lambda c: tree_groups.add_config(c, 2, (2,))), GRPO, r"group_size"),
      (_config(tree=lambda c: tree_groups.add_config(c, 2, (4, 2))), GRPO,
       r"tree\.branch_steps"),
      (_config(gigpo=lambda c: gigpo.add_config(c, anchor="hash")), GRPO,
       r"gigpo\.anchor"),
  ]
  for config, recipe, field in bad:
    with pytest.raises(ConfigError, match=field):
      hooks.check(config, recipe, FEATURES)
  c = _config(vine=vine_ppo.add_config)
  c.num_steps = T + 1
  with pytest.raises(ConfigError, match=r"num_steps"):
    hooks.check(c, PPO, FEATURES)
  c = _config(vine=vine_ppo.add_config, gigpo=gigpo.add_config)
  with pytest.raises(ConfigError, match="one advantage estimator"):
    hooks.check(c, GRPO, FEATURES)


def test_wrapper_keeps_the_state_and_policy_states_the_carry():
  env, params = _keychain()
  policy, _, _ = refs.memory_policy(WEIGHTS, [[1.0, -2.0], [-1.5, 1.0]], carry_extras=True)
  traj, kept = episodes(env, params, policy, None, jax.random.key(0), 3, T,
                        keep_states=True)
  states = step_states.step_states(policy, traj)
  for got, want in ((states.env_state, kept.env_state),
                    (states.policy_state, kept.policy_state)):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
      np.testing.assert_array_equal(g, w)
  # A kept state replays its step in the inner environment.
  s = jax.tree.map(lambda x: x[2, 1], states.env_state)
  obs, _, _, _, _ = env.inner.step_env(jax.random.key(1), s, traj.actions[2, 1], params)
  np.testing.assert_array_equal(obs, traj.final_obs[2, 1])
  assert env.num_actions == A and env.horizon == T
  with pytest.raises(ValueError, match="step_state"):
    step_states.step_states(policy, traj._replace(info={}))


def _inputs(traj, adv, hp, key):
  return hooks.EstimatorInput(traj=traj, signal=hooks.Signal(rewards=traj.rewards),
                              values=None, advantages=adv, params=None, hp=hp, key=key)


def test_vine_slot_equals_the_core_estimator():
  env, params = _keychain()
  policy, _ = refs.linear_logits(WEIGHTS)
  config = _config(vine=lambda c: vine_ppo.add_config(c, num_vines=8, every=2))
  bound = hooks.Hooks([("vine", FEATURES[0].bind(_context(config, env, params, policy)))])
  traj = groups(env, params, policy, None, jax.random.key(2), 2, 3, T)
  hp = {"gamma": jnp.float32(0.9)}
  key = jax.random.key(3)
  adv, _, metrics = jax.jit(lambda t: bound.advantages({}, _inputs(
      t, jnp.zeros_like(t.rewards), hp, key)))(traj)
  def direct(traj):
    out = vine_ppo.collect_vines(env.inner, params, policy, None, jax.random.fold_in(key, 3),
                             traj, step_states.step_states(policy, traj), num_vines=8,
                             every=2, gamma=0.9)
    return vine_ppo.vine_advantages(traj.rewards, out.values, every=2, gamma=0.9,
                                terminated=traj.terminated, truncated=traj.truncated,
                                valid=traj.valid)
  want = jax.jit(direct)(traj)
  np.testing.assert_allclose(adv, want, rtol=1e-6)
  assert float(metrics["env_steps"]) == float(metrics["vine_env_steps"]) == \
      2 * 3 * 8 * (6 + 4 + 2)


def test_gigpo_slot_adds_weighted_anchor_advantages():
  env, params = _keychain()
  policy, _ = refs.linear_logits(WEIGHTS)
  traj = groups(env, params, policy, None, jax.random.key(4), 3, 4, T)
  config = _config(gigpo=gigpo.add_config)
  bound = hooks.Hooks([("gigpo", FEATURES[1].bind(_context(config, env, params, policy)))])
  hp = {"gigpo.step_weight": jnp.float32(0.5), "gigpo.gamma": jnp.float32(0.9)}
  episode = jnp.broadcast_to(jnp.arange(4.0), traj.rewards.shape)
  adv, _, metrics = jax.jit(lambda t: bound.advantages(
      {}, _inputs(t, episode, hp, jax.random.key(0))))(traj)
  rewards = np.where(traj.valid, traj.rewards, 0.0)
  to_go = np.zeros_like(rewards)                       # returns-to-go, a loop
  for t in reversed(range(T)):
    later = to_go[t + 1] if t + 1 < T else 0.0
    to_go[t] = rewards[t] + 0.9 * np.where(traj.dones[t], 0.0, later)
  step, stats = jax.jit(gigpo.anchor_advantages)(traj.info["step_state"],
                                                   jnp.asarray(to_go), traj.valid)
  np.testing.assert_allclose(adv, np.where(traj.valid, episode + 0.5 * step, 0.0),
                             rtol=1e-6)
  assert float(metrics["gigpo_groups"]) == float(np.mean(stats["num_groups"]))


def test_tree_slots_collect_once_per_prefix_and_credit_nodes():
  env, params = envs.make("KeyChain-v0", horizon=T, num_pivotal=2, num_actions=A)
  policy, _ = refs.linear_logits(WEIGHTS)
  config = _config(tree=lambda c: tree_groups.add_config(c, 2, (2, 4), 0.5))
  bound = hooks.Hooks([("tree", FEATURES[2].bind(_context(config, env, params, policy)))])
  inputs = hooks.CollectInput(env, params, policy, None, jax.random.key(5), 3, 4, T)
  traj, _, metrics = jax.jit(lambda key: bound.collect(
      {}, None, inputs._replace(key=key)))(inputs.key)
  assert float(metrics["env_steps"]) == 3 * tree_groups.tree_env_steps(2, (2, 4), T)
  assert int(jnp.sum(traj.valid)) == float(metrics["env_steps"])
  hp = {"tree.episode_weight": jnp.float32(0.5)}
  adv, _, m = jax.jit(lambda t: bound.advantages({}, _inputs(
      t, jnp.zeros_like(t.rewards), hp, jax.random.key(0))))(traj)
  outcomes = np.sum(np.where(traj.info["tree_valid"], traj.rewards, 0.0), axis=0)
  node, _ = tree_groups.tree_advantages(jnp.asarray(outcomes), 2, 2, episode_weight=0.5)
  want = np.asarray(node)[tree_groups.segment_index((2, 4), T)]
  np.testing.assert_allclose(adv, np.where(traj.valid, want, 0.0), rtol=1e-6)
  # Without a tree feature the recipe's own rollout runs.
  plain = hooks.Hooks([])
  traj2, _, m2 = plain.collect({}, lambda *a: groups(*a), inputs)
  assert traj2.rewards.shape == (T, 3, 4) and m2 == {}
