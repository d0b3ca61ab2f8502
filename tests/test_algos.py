"""Tests for credit_jax.algos: config validation, recipe pieces, sweeps, NaN stops,
and seeded learning tests (GRPO on KeyChain; PPO on CartPole, marked slow)."""
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import algos, envs, rollout
from credit_jax.runtime import checkpoint, metrics
from credit_jax.runtime import run as runner
from credit_jax.algos import train as train_lib, grpo, losses, ppo, ppo_agent, reinforce
from credit_jax import episodes
from credit_jax.types import Trajectory
from config_files import load_config

CONFIGS = {"ppo_cartpole": (None, "small"), "grpo_keychain": (None, "small", "delay"),
           "reinforce_keychain": (None, "small"), "dqn_bitflip": (None, "noher", "small"),
           "grpo_relabel_goalgrid": (None, "none", "iw", "small"),
           "search_then_train_keychain": (None, "small")}


def tiny_reinforce(**overrides):
  c = load_config("reinforce_keychain", "small")
  c.env_kwargs.horizon = 6
  c.env_kwargs.num_pivotal = 1
  c.env_kwargs.num_actions = 2
  c.horizon = 6
  c.num_envs = 8
  c.num_updates = 4
  c.network.hidden_sizes = (16,)
  c.chunk_updates = 1
  c.checkpoint_every = 1
  c.update(overrides)
  return c


def tiny_grpo(**overrides):
  c = load_config("grpo_keychain", "small")
  c.env_kwargs.horizon = 6
  c.env_kwargs.num_pivotal = 1
  c.env_kwargs.num_actions = 2
  c.horizon = 6
  c.num_tasks = 4
  c.group_size = 3
  c.num_updates = 3
  c.network.hidden_sizes = (16,)
  c.update(overrides)
  return c


# --- config validation ----------------------------------------------------------------

@pytest.mark.parametrize("name,variant", [(n, v) for n, vs in CONFIGS.items() for v in vs])
def test_every_shipped_config_validates(name, variant):
  algos.validate_config(load_config(name, variant))


def test_unknown_variant_is_rejected():
  with pytest.raises(ValueError, match="unknown variant"):
    load_config("ppo_cartpole", "huge")


def _set(c, path, value):
  *parents, leaf = path.split(".")
  for p in parents:
    c = c[p]
  c[leaf] = value


@pytest.mark.parametrize("name,field,value,match", [
    ("grpo_keychain", "group_size", 1, "config.group_size: a group needs at least 2"),
    ("ppo_cartpole", "num_minibatches", 3, "config.num_minibatches: batch .* 512 is not "
     "divisible"),
    ("grpo_keychain", "num_minibatches", 3, "config.num_minibatches: num_tasks=16"),
    ("ppo_cartpole", "lr", -1e-3, "config.lr: learning rate must be >= 0"),
    ("reinforce_keychain", "env_name", "NoSuchEnv-v0", "config.env_name: unknown "
     "environment 'NoSuchEnv-v0'"),
    ("grpo_keychain", "env_kwargs.horizon", 0, "config.env_kwargs: cannot make"),
    ("reinforce_keychain", "credit", "oracle", "config.credit: must be one of"),
    ("reinforce_keychain", "baseline", "median", "config.baseline"),
    ("grpo_keychain", "advantage", "ppo", "config.advantage"),
    ("ppo_cartpole", "checkpoint_every", 100, "config.checkpoint_every: 100 must be a "
     "multiple of chunk_updates=61"),
    ("ppo_cartpole", "total_timesteps", 100, "config.total_timesteps"),
    ("ppo_cartpole", "seeds", 0, "config.seeds"),
    ("ppo_cartpole", "algo", "sarsa", "config.algo: unknown recipe 'sarsa'"),
    ("ppo_cartpole", "gamma", 1.5, "config.gamma"),
    ("ppo_cartpole", "network.activation", "sigmoid", "config.network.activation"),
    ("search_then_train_keychain", "search_weight", 2.0, "config.search_weight: the "
     "weight of a searched episode is bounded"),
    ("search_then_train_keychain", "search_tasks", 99, "config.search_tasks: must lie in"),
    ("ppo_cartpole", "optimizer", "lion", "config.optimizer: must be one of"),
    ("grpo_keychain", "weight_decay", 0.1, "config.weight_decay: .* 0 unless "
     "optimizer='adamw'"),
    ("reinforce_keychain", "momentum", 0.9, "config.momentum: .* 0 unless optimizer='sgd'"),
])
def test_invalid_field_is_named(name, field, value, match):
  c = load_config(*name.split(":"))
  _set(c, field, value)
  with pytest.raises(algos.ConfigError, match=match):
    algos.make_train(c)


# --- pieces -----------------------------------------------------------------------------

def test_clipped_surrogate_and_value_loss_by_hand():
  logp = jnp.log(jnp.array([0.5, 0.9, 0.2]))
  old = jnp.log(jnp.array([0.4, 0.5, 0.4]))
  adv = jnp.array([1.0, 1.0, -1.0])
  loss, clipped, kl = losses.clipped_surrogate(logp, old, adv, 0.2)
  # ratios 1.25, 1.8, 0.5 -> min(r A, clip(r) A) = 1.2, 1.2, -0.8 (clipped side binds).
  np.testing.assert_allclose(loss, [-1.2, -1.2, 0.8], rtol=1e-6)
  np.testing.assert_array_equal(clipped, [1.0, 1.0, 1.0])
  assert np.all(np.asarray(kl) >= 0)
  v = losses.value_loss(jnp.array([1.0, 3.0]), jnp.array([0.0, 0.0]),
                        jnp.array([0.0, 2.5]), clip_eps=0.2)
  # First: unclipped 1.0 vs clipped 0.2^2 -> max 1.0; second: 9 vs 2.7^2=7.29 -> 9.
  np.testing.assert_allclose(v, [0.5, 4.5], rtol=1e-6)
  np.testing.assert_allclose(losses.value_loss(jnp.array([2.0]), jnp.array([1.0])), [0.5])
  with pytest.raises(ValueError, match="share one shape"):
    losses.clipped_surrogate(logp, old[:2], adv, 0.2)


def test_kl_to_reference_is_zero_at_reference_and_positive_elsewhere():
  lp = jnp.log(jnp.array([0.2, 0.5]))
  np.testing.assert_allclose(losses.kl_to_reference(lp, lp), 0.0, atol=1e-7)
  assert np.all(np.asarray(losses.kl_to_reference(lp, lp + 0.3)) > 0)


def test_continuing_episode_stats_match_a_loop():
  rng = np.random.default_rng(0)
  rewards = rng.normal(size=(7, 3)).astype(np.float32)
  dones = rng.random((7, 3)) < 0.3
  running0 = np.array([1.0, 0.0, -2.0], np.float32)
  running, mean, count = episodes.continuing_episode_stats(
      jnp.asarray(rewards), jnp.asarray(dones), jnp.asarray(running0), jnp.float32(9.0))
  acc, ended = running0.copy(), []
  for t in range(7):
    acc += rewards[t]
    for b in range(3):
      if dones[t, b]:
        ended.append(acc[b])
        acc[b] = 0.0
  np.testing.assert_allclose(running, acc, rtol=1e-5)
  assert count == len(ended)
  np.testing.assert_allclose(mean, np.mean(ended), rtol=1e-5)
  _, mean, _ = episodes.continuing_episode_stats(
      jnp.zeros((2, 3)), jnp.zeros((2, 3), bool), jnp.zeros(3), jnp.float32(9.0))
  assert mean == 9.0


def test_continuing_episode_success_matches_a_loop():
  rng = np.random.default_rng(1)
  rewards = (rng.random((9, 4)) < 0.2).astype(np.float32) * rng.integers(1, 3, (9, 4))
  dones = rng.random((9, 4)) < 0.3
  hits0 = np.array([1.0, 0.0, 0.0, 2.0], np.float32)
  hits, success = episodes.continuing_episode_success(
      jnp.asarray(rewards), jnp.asarray(dones), jnp.asarray(hits0), jnp.float32(0.5))
  acc, ended = hits0.copy(), []
  for t in range(9):
    acc += rewards[t] > 0
    for b in range(4):
      if dones[t, b]:
        ended.append(acc[b] > 0)
        acc[b] = 0.0
  np.testing.assert_allclose(hits, acc)
  assert ended and float(success) == pytest.approx(np.mean(ended))
  _, success = episodes.continuing_episode_success(
      jnp.zeros((2, 4)), jnp.zeros((2, 4), bool), jnp.zeros(4), jnp.float32(0.5))
  assert float(success) == 0.5
  with pytest.raises(ValueError, match="disagree"):
    episodes.continuing_episode_success(jnp.zeros((2, 4)), jnp.zeros((2, 3), bool),
                                      jnp.zeros(4), jnp.float32(0.0))


@pytest.mark.parametrize("kind,extra", [("sgd", {}), ("sgd", {"momentum": 0.9}),
                                        ("adamw", {"weight_decay": 0.1}), ("adam", {})])
def test_optimizers_match_optax(kind, extra):
  import optax  # pylint: disable=g-import-not-at-top
  c = load_config("grpo_keychain")
  c.optimizer = kind
  c.update(extra)
  opt = train_lib.make_optimizer(c)
  params = {"w": jnp.array([1.0, -2.0, 3.0])}
  grads = [{"w": jnp.array([0.5, 0.1, -0.3])}, {"w": jnp.array([-0.2, 0.4, 0.1])}]
  lr = 0.1
  reference = {"sgd": lambda: optax.sgd(lr, momentum=extra.get("momentum") or None),
               "adamw": lambda: optax.adamw(lr, eps=c.adam_eps, weight_decay=0.1),
               "adam": lambda: optax.adam(lr, eps=c.adam_eps)}[kind]()
  p, s = params, opt.init(params, jnp.float32(10.0))
  q, t = params, reference.init(params)
  for g in grads:
    p, s, norm = opt.apply(p, s, g, jnp.float32(lr), jnp.float32(10.0))
    u, t = reference.update(g, t, q)
    q = optax.apply_updates(q, u)
    np.testing.assert_allclose(norm, np.linalg.norm(g["w"]), rtol=1e-6)
  np.testing.assert_allclose(p["w"], q["w"], rtol=1e-5)
  # Clipping comes first: a tiny max_grad_norm scales sgd's step down to it.
  if kind == "sgd" and not extra:
    p, _, _ = opt.apply(params, opt.init(params, 1e-3), grads[0], 1.0, jnp.float32(1e-3))
    np.testing.assert_allclose(np.linalg.norm(p["w"] - params["w"]), 1e-3, rtol=1e-4)


@pytest.mark.parametrize("size", [1, 2, 7, 300, 512, 1025])
def test_shuffle_indices_is_a_permutation(size):
  perms = jax.jit(jax.vmap(lambda k: train_lib.shuffle_indices(k, size)))(
      jax.random.split(jax.random.PRNGKey(0), 8))
  assert perms.dtype == jnp.int32 and perms.shape == (8, size)
  np.testing.assert_array_equal(np.sort(np.asarray(perms), axis=1),
                                np.tile(np.arange(size), (8, 1)))
  if size > 1:
    # Different keys, different orders (both orders of two items among 8 keys).
    assert len({tuple(p) for p in np.asarray(perms)}) == min(8, math.factorial(size))


@pytest.mark.parametrize("n", [16, 300, 512])
def test_shuffle_indices_is_uniform_enough_for_minibatches(n):
  draws = 4000
  perms = np.asarray(jax.jit(jax.vmap(lambda k: train_lib.shuffle_indices(k, n)))(
      jax.random.split(jax.random.PRNGKey(1), draws)))
  # Every item lands in every position ~draws / n times: the counts' chi-square per
  # degree of freedom is ~1 (sd sqrt(2 / dof): 0.09 at n = 16, < 0.005 at n = 300)...
  counts = np.zeros((n, n))
  np.add.at(counts, (perms, np.arange(n)[None].repeat(draws, 0)), 1)
  chi2_per_dof = ((counts - draws / n) ** 2 / (draws / n)).sum() / (n - 1) ** 2
  assert abs(chi2_per_dof - 1.0) < 6 * np.sqrt(2.0) / (n - 1)
  pos = np.argsort(perms, axis=1)              # [draws, n] position of each item
  mb = pos // (n // 4)
  # ...neighbours in the data are not kept together: two items share one of four
  # minibatches with probability q = (n / 4 - 1) / (n - 1) (0.2 at n = 16), and the
  # z-scores of the pairs' frequencies have sd ~1 and no outliers...
  q = (n // 4 - 1) / (n - 1)
  pairs = [(0, 1), (0, n - 1), (1, 2), (3, 7), (n // 2, n // 2 + 1), (5, n // 4 + 5)]
  z = np.array([(np.mean(mb[:, a] == mb[:, b]) - q) / np.sqrt(q * (1 - q) / draws)
                for a, b in pairs])
  assert np.abs(z).max() < 4.5
  # ...and one item comes before another half the time, whichever order they started in.
  z_order = np.array([(np.mean(pos[:, a] < pos[:, b]) - 0.5) / np.sqrt(0.25 / draws)
                      for a, b in pairs])
  assert np.abs(z_order).max() < 4.5


def test_leave_one_out_mean_matches_a_loop():
  x = jnp.array([[1.0, 2.0, 4.0, 8.0]])
  mask = jnp.array([[True, True, False, True]])
  out = reinforce.leave_one_out_mean(x, mask)
  np.testing.assert_allclose(out, [[5.0, 4.5, 11.0 / 3.0, 1.5]], rtol=1e-6)


def test_grpo_aggregations_by_hand():
  x = jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])[:, None, :]   # [T=3, N=1, K=2]
  valid = jnp.array([[True, True], [True, True], [False, True]])[:, None, :]
  # Valid terms: episode 0 has 1, 3; episode 1 has 2, 4, 6.
  assert grpo.aggregate(x, valid, "token_mean") == pytest.approx(16.0 / 5.0)
  assert grpo.aggregate(x, valid, "sequence_mean") == pytest.approx((2.0 + 4.0) / 2.0)
  assert grpo.aggregate(x, valid, "constant") == pytest.approx(16.0 / 6.0)


def test_ppo_advantages_bootstrap_truncation_from_final_obs():
  # One env, 3 steps: step 0 truncated (bootstraps from final_obs), step 1 terminated
  # (no bootstrap), step 2 continues into next_obs. value_fn(obs) = obs[..., 0].
  obs = jnp.array([[1.0], [2.0], [3.0]])[:, None]          # [T, B=1, 1]
  final_obs = jnp.array([[10.0], [20.0], [30.0]])[:, None]
  traj = Trajectory(obs=obs, actions=jnp.zeros((3, 1), jnp.int32),
                    rewards=jnp.array([[1.0], [1.0], [1.0]]),
                    terminated=jnp.array([[False], [True], [False]]),
                    truncated=jnp.array([[True], [False], [False]]),
                    log_probs=jnp.zeros((3, 1)), final_obs=final_obs,
                    valid=jnp.ones((3, 1), bool), extras={}, info={})
  adv, values = ppo_agent.advantages_with_boundaries(lambda o: o[..., 0], traj,
                                               jnp.array([[7.0]]), 0.5, 0.9)
  np.testing.assert_allclose(values, obs[..., 0])
  expected_t2 = 1.0 + 0.5 * 7.0 - 3.0
  expected_t1 = 1.0 - 2.0
  expected_t0 = 1.0 + 0.5 * 10.0 - 1.0
  np.testing.assert_allclose(adv[:, 0], [expected_t0, expected_t1, expected_t2],
                             rtol=1e-6)


def test_ppo_advantages_with_a_truncation_bound_match_the_full_value_pass():
  # CartPole with a time limit of 12: 48 steps of 16 fresh envs truncate at steps 11, 23,
  # 35 and 47 unless the pole falls (then an episode ends terminated).
  env, params = envs.make("CartPole-v1", max_steps_in_episode=12)
  obs, state = rollout.reset(env, params, jax.random.key(0), 16)
  traj, (_, next_obs) = rollout.collect(env, params, rollout.uniform_random_policy(2),
                                        None, jax.random.key(1), state, obs, 48)
  bound = rollout.max_truncations(env, params, 48)
  assert bound == 4 and int(traj.truncated.sum(axis=0).max()) == 4
  assert 0 < int(traj.terminated.sum())
  value_fn = lambda o: jnp.tanh(o @ jnp.array([0.3, -1.0, 2.0, 0.5])) + o[..., 0] ** 2
  full, v_full = ppo_agent.advantages_with_boundaries(value_fn, traj, next_obs, 0.9, 0.8)
  bounded, v_b = ppo_agent.advantages_with_boundaries(value_fn, traj, next_obs, 0.9, 0.8,
                                                max_truncations=bound)
  np.testing.assert_allclose(bounded, full, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(v_b, v_full, rtol=1e-6)
  # A bound that is too small poisons exactly the columns that exceed it.
  low, _ = ppo_agent.advantages_with_boundaries(value_fn, traj, next_obs, 0.9, 0.8,
                                          max_truncations=3)
  over = np.asarray(traj.truncated.sum(axis=0)) > 3
  assert over.any() and not over.all()
  assert np.isnan(np.asarray(low)[:, over]).all()
  np.testing.assert_allclose(np.asarray(low)[:, ~over], np.asarray(full)[:, ~over],
                             rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="max_truncations"):
    ppo_agent.advantages_with_boundaries(value_fn, traj, next_obs, 0.9, 0.8, max_truncations=-1)


# --- whole recipes, tiny shapes -----------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_train():
  return algos.make_train(tiny_reinforce())


@pytest.fixture(scope="module")
def tiny_run(tiny_train):
  return jax.jit(tiny_train.run, static_argnums=2)


def test_chunked_run_equals_one_run(tiny_train, tiny_run):
  state = tiny_train.init(jax.random.PRNGKey(3))
  hp = tiny_train.default_hparams
  s4, m4 = tiny_run(state, hp, 4)
  s2, m_a = tiny_run(state, hp, 2)
  s2, m_b = tiny_run(s2, hp, 2)
  for k in m4:
    np.testing.assert_array_equal(m4[k], np.concatenate([m_a[k], m_b[k]]), err_msg=k)
  jax.tree.map(np.testing.assert_array_equal, s4, s2)


def test_hparams_sweep_is_a_vmap_without_recompiling(tiny_train):
  sweep = jax.jit(jax.vmap(tiny_train))
  keys = jnp.stack([jax.random.PRNGKey(0)] * 2)
  hp = {k: jnp.stack([v, v]) for k, v in tiny_train.default_hparams.items()}
  hp["lr"] = jnp.array([0.0, 1e-2])
  states, m = sweep(keys, hp)
  hp2 = dict(hp, lr=jnp.array([1e-3, 3e-2]), gamma=jnp.array([0.9, 0.5]))
  sweep(keys, hp2)
  assert sweep._cache_size() == 1  # pylint: disable=protected-access
  assert m["loss"].shape == (2, 4)
  init = tiny_train.init(jax.random.PRNGKey(0))
  # lr = 0 leaves the parameters where they started; lr > 0 moves them.
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(a[0], b), states.params,
               init.params)
  moved = jax.tree.map(lambda a, b: np.abs(a[1] - b).max(), states.params, init.params)
  assert max(jax.tree.leaves(moved)) > 0
  with pytest.raises(ValueError, match="exactly the keys"):
    tiny_train.init(jax.random.PRNGKey(0), {"lr": 1.0})


@pytest.mark.parametrize("credit,baseline", [("terminal", "none"), ("gae", "value"),
                                             ("rtg", "value")])
def test_reinforce_credit_and_baseline_choices_run(credit, baseline):
  train = algos.make_train(tiny_reinforce(credit=credit, baseline=baseline))
  _, m = jax.jit(train)(jax.random.PRNGKey(1))
  for k, v in m.items():
    assert v.shape == (4,) and np.all(np.isfinite(v)), k
  assert np.all(m["value_loss"] > 0) if baseline == "value" else True


@pytest.mark.parametrize("advantage,aggregation,kl,window", [
    ("rloo", "sequence_mean", True, 0), ("drgrpo", "constant", False, 2)])
def test_grpo_variants_run_and_report_degenerate_groups(advantage, aggregation, kl,
                                                        window):
  c = tiny_grpo(advantage=advantage, loss_aggregation=aggregation, use_reference_kl=kl,
                kl_coef=0.1, ent_coef=0.01, history_window=window)
  c.env_kwargs.cue_delay = window // 2  # the history variant needs memory of one step
  train = algos.make_train(c)
  state, m = jax.jit(train)(jax.random.PRNGKey(2))
  assert m["degenerate_frac"].shape == (3,)
  assert np.all((m["degenerate_frac"] >= 0) & (m["degenerate_frac"] <= 1))
  assert np.all(np.isfinite(m["loss"]))
  assert ("ref_params" in state.aux) == kl
  if kl:
    assert m["kl_ref"][0] < 1e-2  # the first update starts at the reference
    assert np.all(m["kl_ref"] >= 0)


def test_ppo_reports_success_where_the_env_has_it():
  c = load_config("ppo_cartpole", "small")
  assert not episodes.has_success(c)
  c.env_name, c.env_kwargs = "KeyChain-v0", {"horizon": 4, "num_pivotal": 1,
                                             "num_actions": 2}
  c.num_envs, c.num_steps, c.total_timesteps = 2, 8, 32
  c.update_epochs, c.num_minibatches = 1, 1
  c.network.hidden_sizes = (8,)
  assert episodes.has_success(c)
  train = algos.make_train(c)
  assert train.headline[0] == "success"
  _, m = jax.jit(train)(jax.random.PRNGKey(0))
  # 2 envs x 8 steps = 4 episodes of 4 steps per update; a random policy solves half.
  assert m["success"].shape == (2,) and np.all(np.isin(m["success"], np.arange(5) / 4))
  # KeyChain's return is its success (reward 1 iff solved).
  np.testing.assert_array_equal(m["success"], m["return"])


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
  # lr = 1e38: the first update is finite, the second overflows the parameters.
  c = tiny_reinforce(lr=1e38, num_updates=6)
  with pytest.raises(runner.NonFiniteLossError, match=r"update 2 \(seed 0\).*update 1"):
    runner.train_and_evaluate(c, str(tmp_path), log=lambda _: None)
  records = metrics.read_jsonl(str(tmp_path / metrics.METRICS_FILE))
  assert [r["update"] for r in records] == [1]
  with checkpoint.Checkpointer(str(tmp_path / runner.CHECKPOINT_DIR)) as ck:
    assert ck.all_steps() == [1]
    train = algos.make_train(c)
    init, _ = runner.make_run_fns(train)
    keys = jax.random.split(jax.random.PRNGKey(c.seed), 1)
    state = ck.restore(1, jax.eval_shape(init, keys, train.default_hparams))
  assert int(state.update[0]) == 1
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(state.params))


# --- learning tests -----------------------------------------------------------------------

def test_grpo_learns_keychain_t50_k3_a4():
  c = load_config("grpo_keychain")
  c.num_updates = 40
  assert (c.env_kwargs.horizon, c.env_kwargs.num_pivotal, c.env_kwargs.num_actions) == \
      (50, 3, 4)
  train = algos.make_train(c)
  _, m = jax.jit(train)(jax.random.PRNGKey(0))
  success = np.asarray(m["success"])
  print(f"GRPO KeyChain success: first 5 updates {success[:5].mean():.3f}, "
        f"last 5 {success[-5:].mean():.3f}")
  assert success[:5].mean() < 0.2   # it starts near random (1.6%)...
  assert success[-5:].mean() >= 0.9  # ...and learns the task


@pytest.mark.slow
def test_ppo_learns_cartpole_within_5e5_steps():
  c = load_config("ppo_cartpole")
  assert c.total_timesteps == 500_000
  train = algos.make_train(c)
  _, m = jax.jit(train)(jax.random.PRNGKey(0))
  returns = np.asarray(m["return"])
  print(f"PPO CartPole: mean return of the last 10 updates {returns[-10:].mean():.1f}")
  assert returns[-10:].mean() >= 450.0
