"""PRM shaping hooks: per-step difference credit, best-of-N reranking,
Monte-Carlo retraining labels from the current policy, GRPO's and PPO's hooks."""
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import credit_jax as cj
from credit_jax.addons import prm
from credit_jax.experiments.prm import study as prm_study


def test_step_deltas_hand_cases():
  p = jnp.array([[0.9, 0.5], [0.2, 0.5], [0.3, 0.1]])            # [T=3, B=2]
  valid = jnp.array([[True, True], [True, True], [True, False]])
  np.testing.assert_allclose(prm.step_deltas(p, valid),
                             [[-0.1, -0.5], [-0.7, 0.0], [0.1, 0.0]], atol=1e-6)
  # PPO: an episode starts at t = 2; the rollout's first step continues one whose
  # last score was 0.5.
  p = jnp.array([[0.9], [0.8], [0.1], [0.7]])
  starts = jnp.array([[False], [False], [True], [False]])
  got = prm.step_deltas(p, jnp.ones_like(starts), starts=starts,
                        first_prev=jnp.array([0.5]))
  np.testing.assert_allclose(got[:, 0], [0.4, -0.1, -0.9, 0.6], atol=1e-6)
  with pytest.raises(ValueError):
    prm.step_deltas(p, jnp.ones((3, 1), bool))


def test_step_deltas_telescope_so_padding_earns_nothing():
  # A right claim restated (padding, p ~ 1) earns 0; the sum over an episode is p_last - 1.
  p = jnp.array([[1.0], [1.0], [1.0], [0.0], [0.0]])
  d = prm.step_deltas(p, jnp.ones_like(p, bool))
  np.testing.assert_allclose(d[:, 0], [0, 0, 0, -1, 0], atol=1e-6)
  assert float(d.sum()) == pytest.approx(float(p[-1, 0]) - 1.0)


def test_rerank_hand_case():
  scores = jnp.array([[0.1, 0.9, 0.5, 0.9], [0.3, 0.2, 0.8, 0.1]])
  success = jnp.array([[0, 0, 1, 1], [1, 0, 1, 0]])
  np.testing.assert_array_equal(prm_study.rerank(scores, success, 1), [0, 1])
  np.testing.assert_array_equal(prm_study.rerank(scores, success, 2), [0, 1])   # picks 0.9, 0.3
  np.testing.assert_array_equal(prm_study.rerank(scores, success, 4), [0, 1])   # tie: first 0.9
  np.testing.assert_array_equal(prm_study.rerank(success, success, 4), [1, 1])  # the verifier
  with pytest.raises(ValueError):
    prm_study.rerank(scores, success, 5)


class _Uniform:
  """A 'policy network' with constant logits: the uniform policy."""
  def __init__(self, num_actions):
    self.num_actions = num_actions

  def apply(self, params, obs):
    return jnp.zeros(obs.shape[:-1] + (self.num_actions,)), None


def test_policy_mc_labels_match_analytic_uniform_success():
  m, n, horizon = 2, 2, 5
  env, params = cj.envs.make("RunningSum-v0", num_terms=n, modulus=m, horizon=horizon)
  _, states = jax.vmap(env.reset_env, in_axes=(0, None))(
      jax.random.split(jax.random.PRNGKey(0), 3), params)
  out, post = prm.run_episodes(env, params, prm.uniform_policy(env.num_actions),
                               jax.random.PRNGKey(1), states, horizon)
  traj = types.SimpleNamespace(obs=out["obs"], actions=out["actions"],
                               rewards=out["rewards"], info={"post_state": post})
  for t, b in ((0, 0), (1, 2)):
    valid = jnp.zeros(out["valid"].shape, bool).at[t, b].set(True)
    data, hard, soft = jax.jit(lambda k, v: prm.policy_mc_labels(
        env, params, _Uniform(env.num_actions), None, traj, v, k, 500, 8)
    )(jax.random.PRNGKey(2 + t), valid)
    assert data["obs"].shape == (500, env.obs_shape[0]) and hard.shape == (500,)
    np.testing.assert_array_equal(np.asarray(data["actions"]), int(out["actions"][t, b]))
    s = jax.tree.map(lambda x: int(x[t, b]) if x[t, b].ndim == 0 else x[t, b], post)
    if s.pointer >= n:   # the step ended the episode: labelled by its reward
      want = float(out["rewards"][t, b] > 0)
    else:
      want = prm.analytic_uniform_success(n - s.pointer, horizon - s.time, m,
                                          s.claimed == s.true_sum)
    tol = 4 * np.sqrt(max(want * (1 - want), 1e-12) / 4000) + 1e-6
    assert abs(float(soft.mean()) - want) < tol, (t, b, float(soft.mean()), want)
    want_hard = 1 - (1 - want) ** 8
    assert abs(float(hard.mean()) - want_hard) < 4 * np.sqrt(
        max(want_hard * (1 - want_hard), 1e-12) / 500) + 1e-6


def _smoke_grpo():
  from configs import prm as prm_configs
  return prm_configs.get_config("smoke").grpo


def test_grpo_mc_retraining_relabels_with_the_current_policy():
  c = _smoke_grpo()
  c.num_updates = 4
  c.prm.retrain_every = 2
  c.prm.retrain_labels = "mc_soft"
  c.prm.retrain_mc_states = 8
  c.prm.retrain_steps = 5
  train = cj.algos.make_train(c)
  state0 = jax.jit(train.init)(jax.random.PRNGKey(0))   # one compile, not one per op
  update = jax.jit(train.update)
  state, params = state0, [state0.aux["prm_params"]]
  fired = []
  for _ in range(4):
    state, m = update(state)
    fired.append(float(m["prm_retrained"]))
    params.append(state.aux["prm_params"])
  assert fired == [0.0, 0.0, 1.0, 0.0]     # update index 2 (update > 0, 2 % 2 == 0)
  same = lambda a, b: all(bool(jnp.all(x == y)) for x, y in zip(
      jax.tree.leaves(a), jax.tree.leaves(b)))
  assert same(params[0], params[1]) and same(params[1], params[2])
  assert not same(params[2], params[3]) and same(params[3], params[4])
  c.prm.retrain_labels = "sometimes"
  with pytest.raises(cj.algos.ConfigError, match="prm.retrain_labels"):
    cj.algos.validate_config(c)


def test_grpo_step_form_adds_per_step_credit():
  c = _smoke_grpo()
  c.prm.form = "step"
  c.prm.weight = 0.3
  train = cj.algos.make_train(c)
  _, m = jax.jit(train)(jax.random.PRNGKey(0))
  assert bool(jnp.all(jnp.isfinite(m["loss"]))) and m["prm_score"].shape == (3,)
  # The hook alone: the episode scores are the outcome, the bonus w * (p_t - p_{t-1}).
  env, params = cj.envs.make(c.env_name, **dict(c.env_kwargs))
  shaper = prm.make_shaper(c, env, params)
  from credit_jax import nets, rollout
  net, obs_shape = cj.algos.train.make_network(c, env, params, value_head=False)
  hp = {"prm.weight": 0.3, "prm.outcome_weight": 1.0}

  @jax.jit   # one compile for the hook's inputs and outputs
  def hook():
    aux = shaper.init(jax.random.PRNGKey(1))
    pparams = cj.algos.train.init_params(net, jax.random.PRNGKey(2), obs_shape)
    traj = rollout.collect_groups(env, params, nets.make_policy_fn(net), pparams,
                                  jax.random.PRNGKey(3), 2, 2, c.horizon)
    returns = jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), 0)
    scores, _, _, bonus = shaper.shape(aux, traj, returns, hp, jax.random.PRNGKey(4), 0)
    return (scores, returns, bonus, traj.valid,
            shaper.probs(aux["prm_params"], traj.obs, traj.actions))
  scores, returns, bonus, valid, p = hook()
  np.testing.assert_allclose(scores, returns)
  p, valid = np.asarray(p), np.asarray(valid)
  want = np.zeros_like(p)
  for i in range(p.shape[1]):
    for k in range(p.shape[2]):
      prev = 1.0
      for t in range(p.shape[0]):
        if valid[t, i, k]:
          want[t, i, k] = 0.3 * (p[t, i, k] - prev)
        prev = p[t, i, k]
  np.testing.assert_allclose(np.asarray(bonus), want, atol=1e-6)


def _ppo_small():
  from configs import ppo_prm
  c = ppo_prm.get_config("small")
  c.prm.retrain_labels = "mc_soft"   # PPO's Monte-Carlo retraining path
  c.num_envs, c.num_steps, c.num_minibatches = 4, 8, 2
  c.total_timesteps = 4 * 8 * 4     # 4 updates
  c.chunk_updates, c.checkpoint_every = 4, 4
  return c


def test_ppo_step_shaper_rewards_by_hand_across_rollouts():
  c = _ppo_small()
  c.num_envs = 2
  c.prm.retrain_every = 0
  env, params = cj.envs.make(c.env_name, **dict(c.env_kwargs))
  shaper = prm.make_step_shaper(c, env, params)
  aux = jax.jit(shaper.init)(jax.random.PRNGKey(0))
  hp = {"prm.weight": 0.5, "prm.outcome_weight": 2.0}
  from credit_jax import rollout
  net, obs_shape = cj.algos.train.make_network(c, env, params, value_head=True)
  pparams = jax.jit(lambda k: cj.algos.train.init_params(net, k, obs_shape))(
      jax.random.PRNGKey(1))
  from credit_jax import nets
  policy_fn = nets.make_policy_fn(net, value=False)
  obs, env_state = rollout.reset(env, params, jax.random.PRNGKey(2), 2)
  prev, start = np.ones(2), np.ones(2, bool)
  # Jitted, each compiled once for both rollouts (the rollout index traced, as in PPO).
  collect = jax.jit(lambda k, s, o: rollout.collect(env, params, policy_fn, pparams, k, s,
                                                    o, 7))
  shape = jax.jit(lambda a, t, r: shaper.shape(a, t, None, hp, jax.random.PRNGKey(9), r))
  probs = jax.jit(shaper.probs)
  for r in range(2):   # two rollouts of 7 steps: episodes (T=6) cross the boundary
    traj, (env_state, obs) = collect(jax.random.PRNGKey(3 + r), env_state, obs)
    rewards, aux, m, _ = shape(aux, traj, r)
    p = np.asarray(probs(aux["prm_params"], traj.obs, traj.actions))
    done = np.asarray(traj.terminated | traj.truncated)
    want = np.zeros_like(p)
    for b in range(2):
      for t in range(7):
        before = 1.0 if start[b] else prev[b]
        want[t, b] = 2.0 * float(traj.rewards[t, b]) + 0.5 * (p[t, b] - before)
        prev[b], start[b] = p[t, b], done[t, b]
    np.testing.assert_allclose(np.asarray(rewards), want, atol=1e-5)
    assert done.any() or r == 0
  c.prm.form = "sum"
  shaper = prm.make_step_shaper(c, env, params)
  rewards = jax.jit(lambda a, t: shaper.shape(a, t, None, hp, jax.random.PRNGKey(9), 0)[0])(
      aux, traj)
  np.testing.assert_allclose(np.asarray(rewards), 2.0 * np.asarray(traj.rewards) + 0.5 * p,
                             atol=1e-5)


def test_ppo_with_prm_runs_jit_and_vmap_and_validates():
  c = _ppo_small()
  train = cj.algos.make_train(c)
  assert {"prm.weight", "prm.outcome_weight"} <= set(train.default_hparams)
  # One compile: two seeds vmapped under jit (a lone seed's run is the same trace).
  n = train.num_updates
  hp = {k: jnp.stack([v, v]) for k, v in train.default_hparams.items()}
  _, m = jax.jit(jax.vmap(train))(jax.random.split(jax.random.PRNGKey(0), 2), hp)
  for k in ("loss", "success", "prm_score", "padding_frac", "prm_retrained",
            "shaped_reward"):
    assert m[k].shape == (2, n) and bool(jnp.all(jnp.isfinite(m[k]))), k
  for seed in range(2):
    np.testing.assert_array_equal(np.asarray(m["prm_retrained"][seed]),
                                  [float(u > 0 and u % 2 == 0) for u in range(n)])
  bad = ml_collections.ConfigDict(c.to_dict())
  bad.prm.form = "min"
  with pytest.raises(cj.algos.ConfigError, match="prm.form"):
    cj.algos.validate_config(bad)


def test_ppo_with_disabled_prm_is_bit_for_bit_plain_ppo():
  c = _ppo_small()
  c.prm.enabled = False
  bare = ml_collections.ConfigDict(c.to_dict())
  del bare["prm"]
  # The same program (tests/test_ppo_critics.py's check), so the same numbers bit for bit,
  # without compiling either; the outputs (metric names included) alike.
  key = jax.random.PRNGKey(0)
  program, out = jax.make_jaxpr(cj.algos.make_train(c), return_shape=True)(key)
  bare_program, bare_out = jax.make_jaxpr(cj.algos.make_train(bare),
                                          return_shape=True)(key)
  assert set(out[1]) == set(bare_out[1])
  assert jax.tree.structure(out) == jax.tree.structure(bare_out)
  assert str(program) == str(bare_program)
