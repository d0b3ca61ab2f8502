"""Tests for PPO's independent critics (credit_jax.algos.ppo_agent) and KeyChain's
oracle feature."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from credit_jax import algos, envs, rollout
from credit_jax.addons import gae_probe
from credit_jax.algos import train as train_lib, ppo, ppo_agent
from config_files import load_config_module

collect = jax.jit(rollout.collect, static_argnums=(0, 2, 7))


def keychain_config(kind="mlp", critic_kind="same", oracle=False, **env_kwargs):
  c = ppo.default_config()
  c.env_name = "KeyChain-v0"
  c.env_kwargs.horizon, c.env_kwargs.num_pivotal, c.env_kwargs.num_actions = 5, 2, 2
  c.env_kwargs.update(env_kwargs)
  c.num_envs, c.num_steps, c.num_minibatches, c.update_epochs = 4, 7, 2, 2
  c.network.hidden_sizes, c.network.gru_size = (8,), 8
  c.network.d_model, c.network.max_len = 8, 4
  c.network.kind, c.network.critic_kind, c.network.critic_oracle = kind, critic_kind, oracle
  c.total_timesteps = 2 * 4 * 7
  return c


def test_default_critic_is_the_unchanged_path():
  # "same" and a config from before the fields compile the same program as each other
  # (the flat and the sequence agents of ppo_agent.py).
  key = jax.random.PRNGKey(0)
  for kind in ("mlp", "gru"):
    c = keychain_config(kind)
    old = ml_collections.ConfigDict(c.to_dict())
    del old.network["critic_kind"], old.network["critic_oracle"]
    assert not ppo_agent.separate_critic(old) and not ppo_agent.separate_critic(c)
    program = str(jax.make_jaxpr(algos.make_train(c))(key))
    assert str(jax.make_jaxpr(algos.make_train(old))(key)) == program
    assert "critic" not in str(algos.make_train(c).init(key).params.keys())


def reference_oracle(traj, num_pivotal):
  """[T, B, 2] features of obs and of final_obs from the info stream, by a Python loop."""
  pivotal, correct = np.asarray(traj.info["pivotal"]), np.asarray(traj.info["correct"])
  dones = np.asarray(traj.dones)
  num_steps, batch = dones.shape
  at_obs, at_final = np.zeros((num_steps, batch, 2)), np.zeros((num_steps, batch, 2))
  for b in range(batch):
    ok, seen = True, 0
    for t in range(num_steps):
      at_obs[t, b] = (ok, (num_pivotal - seen) / num_pivotal)
      if pivotal[t, b]:
        ok, seen = ok and bool(correct[t, b]), seen + 1
      at_final[t, b] = (ok, (num_pivotal - seen) / num_pivotal)
      if dones[t, b]:
        ok, seen = True, 0
  return at_obs, at_final


@pytest.mark.parametrize("time_limit", [None, 4])
def test_oracle_feature_is_keychain_ground_truth(time_limit):
  extra = {} if time_limit is None else {"max_steps_in_episode": time_limit}
  env, params = envs.make("KeyChain-v0", horizon=6, num_pivotal=2, num_actions=2, **extra)
  wrapped = ppo_agent.OracleFeatureWrapper(env)
  assert wrapped.num_features == 2 and env.ORACLE_FEATURES == ("all_correct", "pivotal_left")
  obs, state = rollout.reset(wrapped, params, jax.random.PRNGKey(0), 32)
  traj, _ = collect(wrapped, params, rollout.uniform_random_policy(2), None,
                    jax.random.PRNGKey(1), state, obs, 20)
  at_obs, at_final = reference_oracle(traj, 2)
  np.testing.assert_array_equal(np.asarray(traj.obs[..., -2:]), at_obs)
  np.testing.assert_array_equal(np.asarray(traj.final_obs[..., -2:]), at_final)
  # Episodes succeeded and failed, boundaries of the expected kind happened.
  assert 0 < at_final[..., 0][np.asarray(traj.dones)].mean() < 1
  kind = traj.terminated if time_limit is None else traj.truncated
  assert np.asarray(kind).sum() >= 32 * 2 and not np.asarray(
      traj.truncated if time_limit is None else traj.terminated).any()
  # What the actor sees (the first A + 2 entries) is KeyChain's own observation.
  first = jax.vmap(env.get_obs)(state)
  np.testing.assert_array_equal(np.asarray(obs[:, :-2]), np.asarray(first))


def test_oracle_feature_from_states_matches_oracle():
  # Step one episode answering every pivotal step right except the first: the bit is 1
  # up to and including that step's state and 0 after it; the fraction left counts the
  # pivotal steps of `oracle(state)` not yet taken.
  env, params = envs.make("KeyChain-v0", horizon=7, num_pivotal=3, num_actions=4)
  _, state = env.reset(jax.random.PRNGKey(3), params)
  pivotal, answers = (np.asarray(x) for x in env.oracle(state))
  first = int(np.argmax(pivotal))
  step = jax.jit(env.step_env)
  for t in range(7):
    expected = [1.0 if t <= first else 0.0, pivotal[t:].sum() / 3]
    np.testing.assert_allclose(np.asarray(env.oracle_feature(state)), expected)
    action = (answers[t] + 1) % 4 if t == first else max(answers[t], 0)
    _, state, _, _, _ = step(jax.random.PRNGKey(0), state, action, params)
  np.testing.assert_allclose(np.asarray(env.oracle_feature(state)), [0.0, 0.0])


@pytest.mark.parametrize("critic_kind,time_limit", [
    ("gru", 4), pytest.param("transformer", None, marks=pytest.mark.slow)])
def test_sequence_critic_values_and_bootstraps_follow_its_carry_across_windows(
    critic_kind, time_limit):
  # An MLP actor with a sequence critic that sees the oracle; episodes of T = 5 end inside
  # the windows of 6 steps, truncated by a time limit of 4 or terminated at T. Window 2's values and advantages, from the critic carry
  # stored by the rollout, must equal stepping the critic through both windows from an
  # episode's start (memory reset at every boundary), and numpy GAE with truncations
  # bootstrapped from the final observation's value under the carry at that step.
  c = keychain_config("mlp", critic_kind, True,
                      **({"max_steps_in_episode": time_limit} if time_limit else {}))
  env, env_params, num_oracle = ppo_agent.make_env(c)
  actor, critic, obs_shape = ppo_agent.make_parts(c, env, env_params, num_oracle)
  policy = ppo_agent.make_policy(actor, critic, "sequence")
  params = {"actor": actor.init(jax.random.PRNGKey(0), obs_shape),
            "critic": critic.init(jax.random.PRNGKey(1), obs_shape)}
  kernel = params["actor"]["params"]["pi_torso"]["Dense_0"]["kernel"]
  assert kernel.shape[0] == 4 and obs_shape == (6,)   # actor: A + 2 inputs, no oracle
  obs, env_state = rollout.reset(env, env_params, jax.random.PRNGKey(2), 3)
  ps0 = rollout.initial_policy_state(policy, 3)
  traj1, (env_state, obs, ps1) = collect(env, env_params, policy, params,
                                         jax.random.PRNGKey(3), env_state, obs, 6, ps0)
  traj2, (_, next_obs, ps2) = collect(env, env_params, policy, params,
                                      jax.random.PRNGKey(4), env_state, obs, 6, ps1)
  gamma, lam = 0.9, 0.8
  adv, values = ppo_agent.critic_advantages(critic, params["critic"], traj2, ps1,
                                            next_obs, ps2, gamma, lam)
  # Reference: step the critic through windows 1 and 2, one step at a time.
  step = jax.jit(jax.vmap(lambda c, o, a, r: critic.step(params["critic"], c, o, a, r)))
  initial = rollout.initial_policy_state(policy, 3)
  carry, prev_a, prev_r = initial.carry[1], initial.prev_action, initial.prev_reward
  ref_v, ref_final = [], []
  for traj in (traj1, traj2):
    for t in range(6):
      new, _, v = step(carry, traj.obs[t], prev_a, prev_r)
      ref_v.append(v)
      ref_final.append(step(new, traj.final_obs[t], traj.actions[t], traj.rewards[t])[2])
      done = np.asarray(traj.dones[t])
      reset = lambda i, x: jnp.where(done.reshape((3,) + (1,) * (x.ndim - 1)), i, x)
      carry = jax.tree.map(reset, initial.carry[1], new)
      prev_a, prev_r = reset(-1, traj.actions[t]), reset(0.0, traj.rewards[t])
  ref_next = step(carry, next_obs, prev_a, prev_r)[2]
  v = np.asarray(ref_v[6:])
  np.testing.assert_allclose(values, v, rtol=1e-5, atol=1e-5)
  final_v, r = np.asarray(ref_final[6:]), np.asarray(traj2.rewards)
  term, trunc = np.asarray(traj2.terminated), np.asarray(traj2.truncated)
  assert (trunc if time_limit else term).any()
  ref_adv, running = np.zeros((6, 3)), np.zeros(3)
  for t in reversed(range(6)):
    nxt = np.asarray(ref_next) if t == 5 else v[t + 1]
    nxt = np.where(term[t], 0.0, np.where(trunc[t], final_v[t], nxt))
    cont = ~(term[t] | trunc[t])
    running = r[t] + gamma * nxt - v[t] + gamma * lam * cont * running
    ref_adv[t] = running
  np.testing.assert_allclose(adv, ref_adv, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind,critic_kind,oracle", [("mlp", "gru", False),
                                                     ("gru", "mlp", True)])
def test_separate_critic_ppo_replays_its_rollout(kind, critic_kind, oracle):
  # lr = 0: the loss replays each window with the parameters that acted, from the stored
  # carries, so every minibatch sees ratio 1 (no clipping, zero KL).
  c = keychain_config(kind, critic_kind, oracle)
  c.lr, c.update_epochs = 0.0, 1
  train = algos.make_train(c)
  state, m = jax.jit(train)(jax.random.PRNGKey(1))
  assert set(state.params) == {"actor", "critic"}
  np.testing.assert_allclose(m["approx_kl"], 0.0, atol=1e-6)
  np.testing.assert_allclose(m["clip_frac"], 0.0)
  assert np.all(np.isfinite(m["loss"])) and "success" in m


@pytest.mark.parametrize("field,value,match", [
    ("network.critic_kind", "lstm", "config.network.critic_kind: must be one of"),
    ("network.critic_oracle", "yes", "config.network.critic_oracle: must be True or False"),
    ("num_minibatches", 4, "config.num_minibatches: a sequence network splits"),
])
def test_critic_config_errors_name_the_field(field, value, match):
  c = keychain_config("mlp", "gru")
  c.num_envs = 6 if field == "num_minibatches" else c.num_envs
  c.num_steps = 4 if field == "num_minibatches" else c.num_steps
  if field.startswith("network."):   # a fresh dict: ConfigDict would refuse the type
    net = c.network.to_dict()
    net[field.split(".")[1]] = value
    c.network = ml_collections.ConfigDict(net)
  else:
    c[field] = value
  with pytest.raises(train_lib.ConfigError, match=match):
    algos.validate_config(c)


def test_oracle_critic_needs_an_env_with_the_feature():
  c = ppo.default_config()
  c.network.critic_oracle = True
  with pytest.raises(train_lib.ConfigError, match="config.network.critic_oracle: CartPole-v1 "
                     "has no oracle_feature"):
    algos.validate_config(c)
  c = keychain_config(oracle=True)
  c.retry_attempts = 1
  with pytest.raises(train_lib.ConfigError, match="config.retry_attempts"):
    algos.validate_config(c)
  c.retry_attempts = 0
  algos.validate_config(c)


@pytest.mark.slow
@pytest.mark.parametrize("critic_kind,oracle", [("gru", False), ("mlp", True)])
def test_mlp_actor_with_a_separate_critic_learns_keychain(critic_kind, oracle):
  # KeyChain T = 8, k = 2, A = 4 (random policy: 1/16): an MLP actor with a GRU critic
  # over the episode, or with an MLP critic that sees the oracle state. Seed 0 reached
  # training success >= 0.94 from update 40 on in both (0.98-0.99 over the last 10 of 100).
  c = keychain_config("mlp", critic_kind, oracle, horizon=8, num_actions=4)
  c.num_envs, c.num_steps, c.num_minibatches, c.update_epochs = 16, 8, 2, 4
  c.network.hidden_sizes, c.network.gru_size = (32,), 32
  c.lr, c.anneal_lr, c.gamma, c.gae_lambda = 3e-3, False, 1.0, 0.95
  c.total_timesteps = 70 * 16 * 8
  _, m = jax.jit(algos.make_train(c))(jax.random.PRNGKey(0))
  success = np.asarray(m["success"])
  print(f"{critic_kind} critic, oracle {oracle}: success at updates 0, 10, ...: "
        f"{np.round(success[::10], 2).tolist()}")
  assert success[:5].mean() <= 0.3            # starts near the random rate
  assert success[-10:].mean() >= 0.85


def test_gae_gradient_metrics_every_n_updates_leave_training_unchanged():
  c = keychain_config()
  c.total_timesteps, c.gae_gradient_episodes = 3 * 4 * 7, 8
  plain = algos.make_train(c)
  c.gae_gradient_every, c.chunk_updates = 2, 2
  measured = algos.make_train(c)
  key = jax.random.PRNGKey(4)
  s0, m0 = jax.jit(plain)(key)
  s1, m1 = jax.jit(measured)(key)
  for k in m0:        # the measurement draws from its own key: training is the same
    np.testing.assert_array_equal(m0[k], m1[k], err_msg=k)
  jax.tree.map(np.testing.assert_array_equal, s0.params, s1.params)
  # Measured before updates 0 and 2 (a partial last block), reported until the next.
  bias = np.asarray(m1["gae_grad_bias"])
  assert bias.shape == (3,) and np.isfinite(bias).all()
  assert bias[0] == bias[1] != bias[2]
  np.testing.assert_array_equal(m1["gae_grad_measured"], [1.0, 0.0, 1.0])
  # Update 0's figures are make_ppo_measure's at the initial parameters.
  state = measured.init(key)
  direct = jax.jit(ppo_agent.make_ppo_measure(c))(
      state.params, jax.random.fold_in(state.key, 0x6AE), c.gamma, c.gae_lambda)
  for name, value in direct.items():
    np.testing.assert_allclose(m1["gae_grad_" + name][0], value, rtol=1e-5, err_msg=name)
  assert abs(float(direct["cosine"])) <= 1 and float(direct["true_norm"]) > 0


def test_episode_values_of_a_gru_critic_equal_stepping_it():
  # What the measurement weighs the episodes with: the GRU critic from its initial carry,
  # fed the previous action and reward, on the oracle-augmented observations.
  c = keychain_config("mlp", "gru", True)
  env, env_params, num_oracle = ppo_agent.make_env(c)
  _, critic, obs_shape = ppo_agent.make_parts(c, env, env_params, num_oracle)
  params = critic.init(jax.random.PRNGKey(0), obs_shape)
  traj = rollout.collect_episodes(env, env_params, rollout.uniform_random_policy(2), None,
                                  jax.random.PRNGKey(1), 3, 5)
  values = ppo_agent.episode_values(critic, params, traj)
  step = jax.vmap(lambda c, o, a, r: critic.step(params, c, o, a, r))
  carry = jax.tree.map(lambda x: jnp.broadcast_to(x, (3,) + x.shape), critic.initial_carry())
  prev_a, prev_r = jnp.full((3,), -1, jnp.int32), jnp.zeros((3,))
  for t in range(5):
    carry, _, v = step(carry, traj.obs[t], prev_a, prev_r)
    np.testing.assert_allclose(values[t], v, rtol=1e-5, atol=1e-6)
    prev_a, prev_r = traj.actions[t], traj.rewards[t]


def test_gae_gradient_under_a_gru_critic_is_unbiased_at_lambda_one():
  # gamma = lambda = 1: the critic is only a baseline (it sees the history, never the
  # action it weighs), so the estimate is unbiased whatever the GRU's weights.
  c = keychain_config("mlp", "gru", horizon=4, num_actions=4)
  c.gae_gradient_episodes = 4096
  params = algos.make_train(c).init(jax.random.PRNGKey(0)).params
  # A sharper actor than at init (J = 0.065 against 1/16 for the uniform one).
  params = {"actor": jax.tree.map(lambda x: 8.0 * x, params["actor"]),
            "critic": params["critic"]}
  stats = jax.jit(ppo_agent.make_ppo_measure(c))(params, jax.random.PRNGKey(1), 1.0, 1.0)
  # Measured: bias 0.0 (debiased estimate), cosine 0.995 (two keys: 0.98-0.995).
  assert float(stats["bias"]) < 0.25 and float(stats["cosine"]) > 0.9
  assert abs(float(stats["success"]) - float(stats["objective"])) < 0.02


@pytest.mark.parametrize("change,match", [
    ({"network.kind": "gru"}, "needs an MLP actor"),
    ({"env_kwargs.cue_delay": 1}, "cue_delay = 0"),
    ({"chunk_updates": 3}, "must divide chunk_updates=3"),
    ({"env_name": "CartPole-v1"}, "needs KeyChain-v0"),
    ({"gae_gradient_episodes": 1}, "config.gae_gradient_episodes"),
])
def test_gae_gradient_config_errors(change, match):
  c = keychain_config()
  c.gae_gradient_every, c.chunk_updates, c.checkpoint_every = 2, 2, 0
  for field, value in change.items():
    head, _, leaf = field.rpartition(".")
    if field == "env_name":
      c.env_kwargs = ml_collections.ConfigDict()
    (c[head] if head else c)[leaf] = value
  with pytest.raises(train_lib.ConfigError, match=match):
    algos.validate_config(c)


@pytest.mark.parametrize("variant", [None, "oracle", "obs", "small"])
def test_critic_keychain_config_variants_validate_and_build(variant):
  module = load_config_module("ppo_critic_keychain")
  c = module.get_config(variant)
  train = algos.make_train(c)
  assert isinstance(train, train_lib.MeasuredTrain) and c.network.kind == "mlp"
  assert ppo_agent.separate_critic(c) == (variant != "obs")
  with pytest.raises(ValueError, match="unknown variant"):
    module.get_config("huge")
