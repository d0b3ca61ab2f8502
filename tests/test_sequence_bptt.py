"""GRU PPO's values from its own rollout and truncated BPTT from stored hidden states
(credit_jax/algos/ppo_agent.py: `gru_values_and_advantages`, `network.bptt_chunk`).

References: the replay of the whole window (`values_and_advantages`, the previous path),
the rollout's own log-probs, and a truncated-BPTT loss written independently (a Python
loop over chunks, each replayed from the full replay's hidden state with
`jax.lax.stop_gradient`).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import algos, envs, fast_paths, rollout
from credit_jax.nets import sequence as sn
from config_files import load_config
from credit_jax.algos import train as train_lib, losses, ppo_agent

collect = jax.jit(rollout.collect, static_argnums=(0, 2, 7))
HP = {"clip_eps": 0.2, "vf_coef": 0.5, "ent_coef": 0.01}


def _net(shared):
  return sn.GRUActorCritic(num_actions=3, hidden_size=8, encoder_sizes=(8,),
                           shared_torso=shared)


def _window(net, env, env_params, num_steps, batch=3):
  """A second rollout window (it starts mid-episode) with resets inside it."""
  params = sn.init_params(net, jax.random.key(0), env.observation_space(env_params).shape)
  policy = sn.make_sequence_policy(net, value=True, carry=True)
  obs, state = rollout.reset(env, env_params, jax.random.key(1), batch)
  ps = rollout.initial_policy_state(policy, batch)
  _, (state, obs, ps) = collect(env, env_params, policy, params, jax.random.key(2), state,
                                obs, 5, policy_state=ps)
  traj, (_, obs2, ps2) = collect(env, env_params, policy, params, jax.random.key(3), state,
                                 obs, num_steps, policy_state=ps)
  return params, policy, traj, ps, obs2, ps2


@pytest.mark.parametrize("shared,fast", [(True, False), (False, True)])
def test_rollout_values_equal_the_replay(shared, fast):
  # CartPole with a time limit of 6: truncations inside the window, so the final
  # observations' values matter (and terminations).
  env, env_params = envs.make("CartPole-v1", max_steps_in_episode=6)
  net = _net(shared)
  with fast_paths.use(fast):
    params, _, traj, ps, obs2, ps2 = _window(net, env, env_params, 20)
    assert bool(jnp.any(traj.truncated[1:]))
    new = jax.jit(lambda p, t, o, s: ppo_agent.gru_values_and_advantages(
        net, p, t, o, s, 0.9, 0.8))(params, traj, obs2, ps2)
    old = jax.jit(lambda p, t, c, o, s: ppo_agent.replay_advantages(
        net, p, t, c, o, s, 0.9, 0.8)[:2])(params, traj, ps, obs2, ps2)
  # Up to float rounding (the rollout's [B]-row matmuls and the replay's [T]-row ones
  # round differently): advantages ~ 1-5, so a few float32 ulps.
  np.testing.assert_allclose(new[0], old[0], rtol=2e-6, atol=2e-6)   # advantages
  np.testing.assert_allclose(new[1], old[1], rtol=2e-6, atol=2e-6)   # values
  # Valuing only the first k truncated steps' final observations: the same numbers
  # (k from the time limit); a column with more than k truncations gets NaN.
  k = rollout.max_truncations(env, env_params, 20)
  assert k == 4
  few = ppo_agent.gru_values_and_advantages(net, params, traj, obs2, ps2, 0.9, 0.8,
                                               max_truncations=k)
  np.testing.assert_allclose(few[0], new[0], rtol=2e-6, atol=2e-6)
  one = ppo_agent.gru_values_and_advantages(net, params, traj, obs2, ps2, 0.9, 0.8,
                                               max_truncations=1)
  several = np.asarray(jnp.sum(traj.truncated, axis=0) > 1)
  assert several.any()
  assert np.all(np.isnan(one[0][:, several]))
  np.testing.assert_allclose(one[0][:, ~several], new[0][:, ~several], rtol=2e-6,
                             atol=2e-6)
  assert not np.any(np.isnan(few[0]))
  # A wrong final value at a truncation would move the advantages by far more.
  moved = ppo_agent.gru_values_and_advantages(
      net, params, traj._replace(final_obs=traj.final_obs + 1.0), obs2, ps2, 0.9, 0.8)
  assert float(jnp.max(jnp.abs(moved[0] - old[0]))) > 1e-3
  # Keeping the values and carries does not change what the rollout does.
  bare = sn.make_sequence_policy(net, value=False)
  obs, state = rollout.reset(env, env_params, jax.random.key(1), 3)
  with fast_paths.use(fast):
    t_bare, _ = collect(env, env_params, bare, params, jax.random.key(2), state, obs, 9,
                        policy_state=rollout.initial_policy_state(bare, 3))
    t_kept, _ = collect(env, env_params, sn.make_sequence_policy(net, True, True), params,
                        jax.random.key(2), state, obs, 9,
                        policy_state=rollout.initial_policy_state(bare, 3))
  np.testing.assert_array_equal(t_bare.actions, t_kept.actions)
  np.testing.assert_array_equal(t_bare.log_probs, t_kept.log_probs)
  with pytest.raises(ValueError, match="carry=True"):
    ppo_agent.gru_values_and_advantages(net, params, t_bare, obs2, ps2, 0.9, 0.8)


def _loss_data(net, params, traj, ps, obs2, ps2):
  adv, values = ppo_agent.gru_values_and_advantages(net, params, traj, obs2, ps2,
                                                        0.9, 0.8)
  prev_a, prev_r, starts = rollout.sequence_inputs(traj, ps)
  data = {"obs": traj.obs, "prev_actions": prev_a, "prev_rewards": prev_r,
          "starts": starts, "actions": traj.actions, "log_probs": traj.log_probs,
          "values": values, "advantages": adv, "targets": adv + values}
  return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), data)          # [B, T, ...]


def test_chunked_loss_replays_the_rollout_and_truncates_the_gradient():
  env, env_params = envs.make("CartPole-v1", max_steps_in_episode=6)
  net = _net(False)   # separate trunks: the carry is a pair
  num_steps, chunk = 12, 4
  params, _, traj, ps, obs2, ps2 = _window(net, env, env_params, num_steps)
  data = _loss_data(net, params, traj, ps, obs2, ps2)
  carries = ppo_agent.chunk_carries(ps.carry, traj.extras["carry"], chunk)
  for leaf, c0 in zip(jax.tree.leaves(carries), jax.tree.leaves(ps.carry)):
    assert leaf.shape == (3, num_steps // chunk) + c0.shape[1:]
  # The stored carries are the full replay's hidden states after steps 3 and 7.
  xp, w_h, b_h = net.apply(params, traj.obs, *rollout.sequence_inputs(traj, ps)[:2],
                           method="project")
  from credit_jax.nets import gru
  hs = jax.vmap(lambda h0, x, s: gru.scan(w_h, b_h, h0, x, s), in_axes=(0, 1, 1))(
      net.stack(ps.carry), xp, rollout.sequence_inputs(traj, ps)[2])     # [B, T, K, H]
  np.testing.assert_allclose(net.stack(carries)[:, 1:], hs[:, chunk - 1:-1:chunk],
                             atol=1e-6)
  loss_fn = jax.jit(jax.value_and_grad(
      lambda p, mb, c: losses.ppo_objective(*ppo_agent.window_outputs(net, c, p, mb), mb,
                                            HP, False), has_aux=True),
      static_argnums=2)
  (loss, aux), grads = loss_fn(params, {**data, "carry": carries}, chunk)
  # Forward: the rollout's log-probs, so the ratio is 1.
  np.testing.assert_allclose(aux["approx_kl"], 0.0, atol=1e-7)
  assert float(aux["clip_frac"]) == 0.0

  # The reference: a loop over chunks, each from the full replay's state, gradient stopped.
  def reference(p):
    logits, values = [], []
    for j in range(num_steps // chunk):
      h0 = jax.lax.stop_gradient(ps.carry if j == 0 else net.unstack(
          hs[:, j * chunk - 1]))
      sl = slice(j * chunk, (j + 1) * chunk)
      lg, v, _ = jax.vmap(lambda c, o, a, r, s: sn.unroll(net, p, c, o, a, r, s))(
          h0, data["obs"][:, sl], data["prev_actions"][:, sl],
          data["prev_rewards"][:, sl], data["starts"][:, sl])
      logits.append(lg)
      values.append(v)
    return losses.ppo_objective(jnp.concatenate(logits, 1), jnp.concatenate(values, 1),
                                data, HP, False)
  (ref_loss, _), ref_grads = jax.jit(jax.value_and_grad(reference, has_aux=True))(params)
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-7)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7),
               grads, ref_grads)
  # The whole window's gradient is another one (credit flows across chunk boundaries).
  (full_loss, _), full_grads = loss_fn(params, {**data, "carry": ps.carry}, 0)
  np.testing.assert_allclose(full_loss, loss, rtol=1e-5)
  diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(
      jax.tree.leaves(full_grads), jax.tree.leaves(grads)))
  assert diff > 1e-6


def tiny_config(chunk):
  c = load_config("ppo_gru_keychain", "small")
  c.env_kwargs.horizon, c.env_kwargs.cue_delay = 5, 2
  c.num_envs, c.num_steps, c.num_minibatches, c.update_epochs = 4, 8, 2, 2
  c.network.gru_size = 8
  c.network.bptt_chunk = chunk
  c.total_timesteps = 2 * 4 * 8
  return c


def test_chunk_of_the_whole_window_is_the_default_path():
  key = jax.random.PRNGKey(3)
  with fast_paths.use(False):   # the default: GAE's values from the replay
    runs = [jax.jit(algos.make_train(tiny_config(chunk)))(key) for chunk in (0, 8)]
  (s0, m0), (s1, m1) = runs
  for k in m0:
    np.testing.assert_array_equal(m0[k], m1[k], err_msg=k)
  jax.tree.map(np.testing.assert_array_equal, s0.params, s1.params)
  # A real chunk: lr 0 and one epoch, so every minibatch replays the rollout (ratio 1).
  c = tiny_config(2)
  c.lr, c.update_epochs = 0.0, 1
  _, m2 = jax.jit(algos.make_train(c))(key)
  assert all(np.all(np.isfinite(v)) for v in m2.values())
  np.testing.assert_allclose(m2["approx_kl"], 0.0, atol=1e-7)
  np.testing.assert_allclose(m2["clip_frac"], 0.0)


def test_bptt_chunk_config_errors():
  c = tiny_config(3)
  with pytest.raises(train_lib.ConfigError, match="network.bptt_chunk.*divide"):
    algos.validate_config(c)
  c = tiny_config(-1)
  with pytest.raises(train_lib.ConfigError, match="network.bptt_chunk"):
    algos.validate_config(c)
  c = tiny_config(4)
  c.network.kind = "transformer"
  with pytest.raises(train_lib.ConfigError, match="network.bptt_chunk.*'gru'"):
    algos.validate_config(c)
  c = tiny_config(4)
  c.network.critic_kind = "mlp"
  with pytest.raises(train_lib.ConfigError, match="network.bptt_chunk"):
    algos.validate_config(c)
  algos.validate_config(tiny_config(4))
  assert algos.RECIPES["ppo"].default_config().network.bptt_chunk == 0


@pytest.mark.slow
def test_gru_ppo_with_bptt_chunks_learns_delayed_cues():
  # The CI learning task of tests/test_sequence.py (KeyChain T=16, k=1, A=4, cue shown 4
  # steps before its pivotal step, no window: a memoryless policy succeeds 1/4 of the
  # time), trained with gradients cut every 8 steps: a cue and its pivotal step fall in
  # different chunks for some episodes, which the stored hidden state still bridges.
  # Three seeds in one vmapped program (one compile; the test took 14.5 s against 10.2 s
  # for one seed, at XLA optimisation level 0), judged together: one seed alone was
  # fragile under float-rounding changes (seed 0 alone: 0.938 at XLA's default level 3,
  # 0.707 at level 0).
  c = load_config("ppo_gru_keychain", "small")
  c.network.bptt_chunk = 8
  keys = jnp.stack([jax.random.PRNGKey(c.seed + i) for i in range(3)])
  states, m = jax.jit(jax.vmap(algos.make_train(c)))(keys)
  env, params = train_lib.make_env(c)
  network, _ = train_lib.make_network(c, env, params, value_head=True)
  evaluate = jax.jit(rollout.collect_episodes, static_argnums=(0, 2, 5, 6))
  policy = sn.make_sequence_policy(network, value=False)
  success = []
  for i in range(len(keys)):
    traj = evaluate(env, params, policy, jax.tree.map(lambda a, i=i: a[i], states.params),
                    jax.random.PRNGKey(99), 256, env.horizon)
    success.append(float(jnp.mean(jnp.sum(traj.rewards * traj.valid, axis=0))))
  print(f"bptt_chunk=8: sampled success on 256 fresh episodes per seed "
        f"{[round(s, 3) for s in success]} (memoryless ceiling 0.25); training return, "
        f"last 10 updates {np.round(np.mean(m['return'][:, -10:], axis=1), 3).tolist()}")
  # Measured (jax 0.10.2, CPU): these three seeds gave [0.719, 0.945, 0.965] (mean 0.876)
  # at level 3 and [0.699, 0.918, 0.973] (mean 0.863) at level 0 (tests/conftest.py); the
  # same config with seeds 0-7 in one program gave 0.703-0.961 (mean 0.907) at level 3 and
  # 0.852-0.992 (mean 0.940) at level 0. So every seed must beat 0.5 (twice the
  # memoryless ceiling 0.25), and a mean under 0.75 would need two of the three seeds at
  # the worst value seen (0.70) and the third under 0.85.
  assert min(success) >= 0.5 and np.mean(success) >= 0.75
