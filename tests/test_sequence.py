"""Tests for sequence policies: the rollout carry, the GRU and transformer networks, and PPO
with them (credit_jax.nets.sequence, rollout's PolicyState, algos.ppo_agent)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from credit_jax import algos, envs, rollout
from credit_jax.nets import sequence as sn
from config_files import load_config
from credit_jax.algos import train as train_lib, ppo
from credit_jax.types import PolicyState, SequencePolicy

collect = jax.jit(rollout.collect, static_argnums=(0, 2, 7))
KEYCHAIN = envs.make("KeyChain-v0", horizon=4, num_pivotal=2, num_actions=3)
CARTPOLE = envs.make("CartPole-v1", max_steps_in_episode=6)


def counting_policy(num_actions):
  """A SequencePolicy whose carry counts the steps of the episode and sums obs[0]; its
  extras record what it was given, so a test can see every reset."""

  def act(params, carry, obs, prev_action, prev_reward, noise):
    del params
    extras = {"count": carry["count"], "acc": carry["acc"], "prev_action": prev_action,
              "prev_reward": prev_reward}
    carry = {"count": carry["count"] + 1, "acc": carry["acc"] + obs[0]}
    action = ((jnp.argmax(noise) + carry["count"]) % num_actions).astype(jnp.int32)
    return carry, action, jnp.float32(-np.log(num_actions)), extras

  return SequencePolicy(
      initial_carry=lambda: {"count": jnp.zeros((), jnp.int32),
                             "acc": jnp.zeros((), jnp.float32)},
      draw=lambda key: jax.random.uniform(key, (num_actions,)), act=act)


POLICIES = {3: counting_policy(3), 2: counting_policy(2)}


@pytest.mark.parametrize("env_and_params", [KEYCHAIN, CARTPOLE], ids=["keychain", "cartpole"])
def test_carry_resets_at_episode_starts_like_a_python_loop(env_and_params):
  env, params = env_and_params
  policy = POLICIES[env.num_actions]
  num_steps, batch = 13, 3
  obs0, state0 = rollout.reset(env, params, jax.random.key(0), batch)
  ps0 = rollout.initial_policy_state(policy, batch)
  key = jax.random.key(1)
  traj, (_, _, ps) = collect(env, params, policy, None, key, state0, obs0, num_steps,
                             policy_state=ps0)
  # The reference: gymnax's own auto-reset env.step and a hand-reset carry, step by step,
  # with the engine's keys ([T, 2, B]: policy, env).
  keys = jax.random.split(key, (num_steps, 2, batch))
  step = jax.jit(env.step)
  for b in range(batch):
    state = jax.tree.map(lambda x: x[b], state0)
    obs, carry = obs0[b], policy.initial_carry()
    prev_a, prev_r = -1, 0.0
    for t in range(num_steps):
      assert int(traj.extras["count"][t, b]) == int(carry["count"])
      np.testing.assert_allclose(traj.extras["acc"][t, b], carry["acc"], rtol=1e-5)
      assert int(traj.extras["prev_action"][t, b]) == prev_a
      assert float(traj.extras["prev_reward"][t, b]) == prev_r
      carry, action, _, _ = policy(None, carry, obs, jnp.int32(prev_a),
                                   jnp.float32(prev_r), keys[t, 0, b])
      assert int(traj.actions[t, b]) == int(action)
      obs, state, reward, term, trunc, _ = step(keys[t, 1, b], state, action, params)
      assert bool(traj.terminated[t, b]) == bool(term)
      assert bool(traj.truncated[t, b]) == bool(trunc)
      prev_a, prev_r = int(action), float(reward)
      if term or trunc:
        carry, prev_a, prev_r = policy.initial_carry(), -1, 0.0
    assert int(ps.carry["count"][b]) == int(carry["count"])
    assert int(ps.prev_action[b]) == prev_a and float(ps.prev_reward[b]) == prev_r
  # Both kinds of boundary happened (CartPole: time limit 6; KeyChain: T = 4).
  assert bool(jnp.any(traj.terminated if env is KEYCHAIN[0] else traj.truncated))
  # The replay inputs rebuilt from the trajectory are what the policy was given.
  prev_actions, prev_rewards, starts = rollout.sequence_inputs(traj, ps0)
  np.testing.assert_array_equal(prev_actions, traj.extras["prev_action"])
  np.testing.assert_array_equal(prev_rewards, traj.extras["prev_reward"])
  np.testing.assert_array_equal(starts[1:], traj.extras["count"][1:] == 0)
  assert not np.any(starts[0])


def test_episodes_and_groups_start_every_member_from_the_initial_carry():
  env, params = KEYCHAIN
  policy = POLICIES[3]
  traj = jax.jit(rollout.collect_episodes, static_argnums=(0, 2, 5, 6))(
      env, params, policy, None, jax.random.key(2), 3, 6)
  np.testing.assert_array_equal(traj.extras["count"][:, 0], [0, 1, 2, 3, 0, 1])
  groups = jax.jit(rollout.collect_groups, static_argnums=(0, 2, 5, 6, 7))(
      env, params, policy, None, jax.random.key(3), 2, 3, 5)
  assert groups.actions.shape == (5, 2, 3)
  np.testing.assert_array_equal(groups.extras["count"][:, 1, 2], [0, 1, 2, 3, 0])
  np.testing.assert_array_equal(groups.extras["prev_action"][0], -1)


NETWORKS = {
    "gru_shared": sn.GRUActorCritic(num_actions=3, hidden_size=8, encoder_sizes=(8,)),
    "gru_separate": sn.GRUActorCritic(num_actions=3, hidden_size=8, encoder_sizes=(8,),
                                      shared_torso=False),
    # max_len 4 < T: the ring buffer wraps and attention is a sliding window.
    "transformer": sn.TransformerActorCritic(num_actions=3, d_model=8, num_heads=2,
                                             num_layers=2, max_len=4),
}


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_unroll_equals_stepping_across_resets(name):
  net = NETWORKS[name]
  params = sn.init_params(net, jax.random.key(0), (5,))
  num_steps = 11
  ks = jax.random.split(jax.random.key(1), 4)
  obs = jax.random.normal(ks[0], (num_steps, 5))
  final_obs = jax.random.normal(ks[1], (num_steps, 5))
  actions = jax.random.randint(ks[2], (num_steps,), 0, 3)
  rewards = jax.random.normal(ks[3], (num_steps,))
  starts = jnp.zeros((num_steps,), bool).at[6].set(True)   # a new episode at t = 6
  prev_a = jnp.where(starts, -1, jnp.concatenate([jnp.array([2]), actions[:-1]]))
  prev_r = jnp.where(starts, 0.0, jnp.concatenate([jnp.array([0.5]), rewards[:-1]]))
  step = jax.jit(lambda c, o, a, r: net.apply(params, c, o, a, r, method="step"))
  carry = net.initial_carry()
  for t in range(3):  # a window that starts mid-episode, with memory in its carry
    carry, _, _ = step(carry, obs[t] + 1.0, jnp.int32(t % 3), jnp.float32(0.0))
  logits, values, final_values = jax.jit(
      lambda c: sn.unroll(net, params, c, obs, prev_a, prev_r, starts,
                          (final_obs, actions, rewards)))(carry)
  assert logits.shape == (num_steps, 3) and values.shape == final_values.shape == (num_steps,)
  c = carry
  for t in range(num_steps):
    if starts[t]:
      c = net.initial_carry()
    c, l_t, v_t = step(c, obs[t], prev_a[t], prev_r[t])
    _, _, f_t = step(c, final_obs[t], actions[t], rewards[t])
    np.testing.assert_allclose(logits[t], l_t, atol=1e-6, err_msg=f"t={t}")
    np.testing.assert_allclose(values[t], v_t, atol=2e-6, err_msg=f"t={t}")
    np.testing.assert_allclose(final_values[t], f_t, atol=2e-6, err_msg=f"t={t}")
  # Without `final` the same logits and values.
  l2, v2 = jax.jit(lambda c: sn.unroll(net, params, c, obs, prev_a, prev_r, starts)[:2])(
      carry)
  assert sn.unroll(net, params, carry, obs, prev_a, prev_r, starts)[2] is None
  np.testing.assert_allclose(l2, logits, atol=1e-6)
  np.testing.assert_allclose(v2, values, atol=2e-6)


@pytest.mark.parametrize("name", ["gru_separate", "transformer"])
def test_replay_from_the_stored_carry_reproduces_the_rollout(name):
  net = NETWORKS[name]
  env, params = envs.make("KeyChain-v0", horizon=5, num_pivotal=1, num_actions=3)
  net_params = sn.init_params(net, jax.random.key(4), env.obs_shape)
  policy = sn.make_sequence_policy(net, value=True)
  obs, state = rollout.reset(env, params, jax.random.key(5), 2)
  ps = rollout.initial_policy_state(policy, 2)
  # Two windows of 7 steps: the second starts mid-episode and has a reset inside.
  _, (state, obs, ps) = collect(env, params, policy, net_params, jax.random.key(6), state,
                                obs, 7, policy_state=ps)
  traj, _ = collect(env, params, policy, net_params, jax.random.key(7), state, obs, 7,
                    policy_state=ps)
  assert int(jnp.max(ps.carry["t"] if name == "transformer" else 1)) >= 1
  prev_a, prev_r, starts = rollout.sequence_inputs(traj, ps)
  assert bool(jnp.any(starts))
  logits, values, _ = jax.vmap(
      lambda c, o, a, r, s: sn.unroll(net, net_params, c, o, a, r, s),
      in_axes=(0, 1, 1, 1, 1), out_axes=1)(ps.carry, traj.obs, prev_a, prev_r, starts)
  log_probs = jax.nn.log_softmax(logits)
  log_probs = jnp.take_along_axis(log_probs, traj.actions[..., None], -1)[..., 0]
  np.testing.assert_allclose(log_probs, traj.log_probs, atol=1e-5)
  np.testing.assert_allclose(values, traj.extras["value"], atol=1e-5)


def test_transformer_step_has_one_shape_and_cost_at_every_step_index():
  net = sn.TransformerActorCritic(num_actions=3, d_model=8, num_heads=2, num_layers=2,
                                  max_len=16)
  params = sn.init_params(net, jax.random.key(0), (5,))
  step = jax.jit(lambda c, o: net.apply(params, c, o, jnp.int32(1), jnp.float32(0.0),
                                        method="step"))
  carry = net.initial_carry()
  jaxprs = []
  for t in (0, 3, 1000, 123_456):
    c = dict(carry, t=jnp.int32(t), time=jnp.maximum(
        jnp.arange(16, dtype=jnp.int32) + t - 16, -1))
    out, _, _ = step(c, jnp.ones((5,)))
    assert int(out["t"]) == t + 1 and int(out["time"][t % 16]) == t
    jaxprs.append(str(jax.make_jaxpr(lambda c: net.apply(
        params, c, jnp.ones((5,)), jnp.int32(1), jnp.float32(0.0), method="step"))(c)))
  assert step._cache_size() == 1  # pylint: disable=protected-access
  assert all(j == jaxprs[0] for j in jaxprs)
  # No intermediate is larger than the cache or the widest layer: nothing grows with t.
  jaxpr = jax.make_jaxpr(lambda c: net.apply(params, c, jnp.ones((5,)), jnp.int32(1),
                                             jnp.float32(0.0), method="step"))(carry)
  sizes = [int(np.prod(v.aval.shape)) for eqn in jaxpr.jaxpr.eqns for v in eqn.outvars]
  assert max(sizes) <= 2 * 16 * 8   # num_layers * max_len * d_model (the stacked cache)


def test_entry_checks_raise_clear_errors():
  env, params = KEYCHAIN
  policy = POLICIES[3]
  obs, state = rollout.reset(env, params, jax.random.key(0), 3)
  with pytest.raises(ValueError, match="needs the policy_state"):
    rollout.collect(env, params, policy, None, jax.random.key(1), state, obs, 2)
  with pytest.raises(ValueError, match="B = 3"):
    rollout.collect(env, params, policy, None, jax.random.key(1), state, obs, 2,
                    policy_state=rollout.initial_policy_state(policy, 2))
  with pytest.raises(ValueError, match="only for a SequencePolicy"):
    rollout.collect(env, params, rollout.uniform_random_policy(3), None,
                    jax.random.key(1), state, obs, 2,
                    policy_state=rollout.initial_policy_state(policy, 3))
  net = NETWORKS["gru_shared"]
  p = sn.init_params(net, jax.random.key(0), (5,))
  with pytest.raises(ValueError, match="must share T"):
    sn.unroll(net, p, net.initial_carry(), jnp.zeros((4, 5)), jnp.zeros((3,), jnp.int32),
              jnp.zeros((4,)), jnp.zeros((4,), bool))
  with pytest.raises(ValueError, match="prev_action"):
    net.apply(p, net.initial_carry(), jnp.zeros((5,)), jnp.zeros((2,), jnp.int32),
              jnp.zeros(()), method="step")
  with pytest.raises(ValueError, match="kind must be one of"):
    sn.make_sequence_network("lstm", 3)
  c = load_config("ppo_gru_keychain", "small")
  c.network.kind = "lstm"
  with pytest.raises(train_lib.ConfigError, match="config.network.kind"):
    algos.validate_config(c)
  c = load_config("ppo_gru_keychain", "small")
  c.num_minibatches = 5
  with pytest.raises(train_lib.ConfigError, match="config.num_minibatches"):
    algos.validate_config(c)


def tiny_sequence_config(kind):
  c = load_config("ppo_gru_keychain", "small")
  c.network.kind = kind
  c.env_kwargs.horizon, c.env_kwargs.cue_delay = 5, 2
  c.num_envs, c.num_steps, c.num_minibatches, c.update_epochs = 4, 7, 2, 2
  c.network.gru_size, c.network.d_model, c.network.max_len = 8, 8, 4
  c.total_timesteps = 2 * 4 * 7
  return c


def test_gru_ppo_vmaps_over_seeds_and_first_ratio_is_one():
  train = algos.make_train(tiny_sequence_config("gru"))
  keys = jax.random.split(jax.random.key(0), 2)
  states, m = jax.jit(jax.vmap(train))(jax.vmap(jax.random.key_data)(keys))
  one, m_one = jax.jit(train)(jax.random.key_data(keys[1]))
  for k in m:
    np.testing.assert_allclose(m[k][1], m_one[k], rtol=2e-5, atol=1e-6, err_msg=k)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a[1], b, rtol=2e-5, atol=1e-6),
               states.params, one.params)
  assert m["loss"].shape == (2, 2) and np.all(np.isfinite(m["loss"]))
  # The policy state at the next window's start is part of the train state.
  assert isinstance(one.aux["policy_state"], PolicyState)


def test_transformer_ppo_replays_its_rollout():
  c = tiny_sequence_config("transformer")
  c.update_epochs, c.lr = 1, 0.0
  train = algos.make_train(c)
  _, m = jax.jit(train)(jax.random.PRNGKey(1))
  # lr = 0: the loss replays the rollout with the parameters that acted, so every
  # minibatch sees ratio 1 (no clipping, zero KL).
  np.testing.assert_allclose(m["approx_kl"], 0.0, atol=1e-6)
  np.testing.assert_allclose(m["clip_frac"], 0.0)


def test_mlp_kind_is_the_unchanged_mlp_path():
  # The same program whether the config names the MLP or has no kind field (as every
  # config before sequence networks): the existing PPO tests cover its numbers.
  c = load_config("ppo_cartpole", "small")
  c.total_timesteps = 2 * c.num_envs * c.num_steps
  assert c.network.kind == "mlp"                      # PPO's default_config names it
  old = ml_collections.ConfigDict(c.to_dict())        # a config from before the field
  del old.network["kind"]
  assert "kind" not in old.network and train_lib.network_kind(old) == "mlp"
  key = jax.random.PRNGKey(0)
  default = str(jax.make_jaxpr(algos.make_train(old))(key))
  assert str(jax.make_jaxpr(algos.make_train(c))(key)) == default
  assert len(default) > 1000


def sampled_success(env, params, policy, net_params, num_envs=256):
  traj = jax.jit(rollout.collect_episodes, static_argnums=(0, 2, 5, 6))(
      env, params, policy, net_params, jax.random.PRNGKey(99), num_envs, env.horizon)
  return float(jnp.mean(jnp.sum(traj.rewards * traj.valid, axis=0)))


@pytest.mark.slow
def test_gru_ppo_learns_delayed_cues_an_mlp_cannot():
  # KeyChain T=16, k=1, A=4, cue shown 4 steps before its pivotal step and never at it,
  # no history window. At the pivotal step a memoryless policy's observation is
  # independent of the answer, so its success is exactly 1/4 whatever it learns.
  c = load_config("ppo_gru_keychain", "small")
  train = algos.make_train(c)
  state, m = jax.jit(train)(jax.random.PRNGKey(c.seed))
  env, params = train_lib.make_env(c)
  network, _ = train_lib.make_network(c, env, params, value_head=True)
  gru = sampled_success(env, params, sn.make_sequence_policy(network, value=False),
                        state.params)
  c.network.kind = "mlp"
  mlp_train = algos.make_train(c)
  mlp_state, _ = jax.jit(mlp_train)(jax.random.PRNGKey(c.seed))
  mlp_net, _ = train_lib.make_network(c, env, params, value_head=True)
  from credit_jax import nets
  mlp = sampled_success(env, params, nets.make_policy_fn(mlp_net, value=False),
                        mlp_state.params)
  print(f"sampled success on 256 fresh episodes: GRU {gru:.3f}, MLP {mlp:.3f} "
        f"(MLP ceiling 0.25); GRU training return, last 10 updates "
        f"{float(np.mean(m['return'][-10:])):.3f}")
  assert gru >= 0.8
  assert mlp <= 0.36   # 0.25 + 4 standard errors of 256 episodes


@pytest.mark.parametrize("variant", [None, "small", "transformer"])
def test_gru_keychain_config_variants_validate_and_build(variant):
  c = load_config("ppo_gru_keychain", variant)
  algos.validate_config(c)
  train = algos.make_train(c)
  assert train.env_steps_per_update == c.num_envs * c.num_steps
  # The cue is given before its pivotal step and there is no window: memory is needed.
  assert c.env_kwargs.cue_delay > 0 and c.history_window == 0
  with pytest.raises(ValueError, match="unknown variant"):
    load_config("ppo_gru_keychain", "huge")
