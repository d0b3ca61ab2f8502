"""RunningSum-v0's step checker, PRM labels/training/calibration, and PRM shaping."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credit_jax as cj
from credit_jax.addons import prm
from credit_jax.experiments.prm import study as prm_study
from credit_jax.envs import runningsum


def _ref_check(terms, pointer, claimed, true_sum, action, m):
  """Plain-Python step checker."""
  if not 0 <= action < 2 * (m + 1):
    return dict(correct=False, padding=True, surface=False, progress=False,
                pointer=pointer, claimed=claimed, true_sum=true_sum)
  u, style = action % (m + 1), action // (m + 1)
  if u < m and pointer < len(terms):
    nt = (true_sum + terms[pointer]) % m
    return dict(correct=u == nt, padding=False, surface=style == 1, progress=True,
                pointer=pointer + 1, claimed=u, true_sum=nt)
  return dict(correct=claimed == true_sum, padding=True, surface=style == 1,
              progress=False, pointer=pointer, claimed=claimed, true_sum=true_sum)


def test_step_checker_matches_python_reference():
  rng = np.random.default_rng(0)
  m, n = 5, 4
  check = jax.jit(lambda *a: runningsum.check_step(*a, modulus=m))
  for _ in range(300):
    terms = rng.integers(0, m, n)
    pointer = int(rng.integers(0, n + 1))
    true_sum = int(terms[:pointer].sum() % m)
    claimed = int(rng.integers(0, m)) if rng.random() < 0.5 else true_sum
    action = int(rng.integers(-1, 2 * (m + 1) + 1))
    got = check(jnp.asarray(terms, jnp.int32), jnp.int32(pointer), jnp.int32(claimed),
                jnp.int32(true_sum), jnp.int32(action))
    want = _ref_check(list(terms), pointer, claimed, true_sum, action, m)
    for k, v in want.items():
      assert int(got[k]) == int(v), (k, terms, pointer, claimed, true_sum, action)


@pytest.mark.parametrize("time_limit_terminates", [False, True])
def test_episode_reward_and_info_match_python_simulation(time_limit_terminates):
  m, n, horizon = 3, 3, 6
  env, params = cj.envs.make("RunningSum-v0", num_terms=n, modulus=m, horizon=horizon,
                             time_limit_terminates=time_limit_terminates)
  rng = np.random.default_rng(1)
  step = jax.jit(env.step)
  for ep in range(20):
    key = jax.random.PRNGKey(ep)
    obs, state = env.reset(key, params)
    terms = [int(x) for x in state.terms]
    ptr, claimed, true_sum = 0, 0, 0
    for t in range(horizon):
      a = int(rng.integers(0, 2 * (m + 1)))
      assert obs.shape == (2 * m + 2,)
      obs, state, r, term, trunc, info = step(key, state, a, params)
      ref = _ref_check(terms, ptr, claimed, true_sum, a, m)
      ptr, claimed, true_sum = ref["pointer"], ref["claimed"], ref["true_sum"]
      assert bool(info["step_correct"]) == ref["correct"]
      assert bool(info["padding"]) == ref["padding"]
      answered, out_of_time = ptr >= n, t + 1 >= horizon
      assert float(r) == float(answered and claimed == true_sum)
      if time_limit_terminates:   # the time limit ends the episode as a termination
        assert bool(term) == (answered or out_of_time) and not bool(trunc)
      else:
        assert bool(term) == answered
        assert bool(trunc) == (not answered and out_of_time)
      if bool(term) or bool(trunc):
        break


@pytest.mark.parametrize("pointer,time,claimed_right", [(0, 0, True), (1, 2, True),
                                                        (2, 3, False), (2, 3, True)])
def test_mc_labels_match_analytic_uniform_success(pointer, time, claimed_right):
  m, n, horizon = 2, 2, 5
  env, params = cj.envs.make("RunningSum-v0", num_terms=n, modulus=m, horizon=horizon)
  terms = jnp.array([1, 1], jnp.int32)
  true_sum = int(np.sum(terms[:pointer]) % m)
  claimed = true_sum if claimed_right else (true_sum + 1) % m
  state = runningsum.RunningSumState(
      terms=terms, pointer=jnp.int32(pointer), claimed=jnp.int32(claimed),
      true_sum=jnp.int32(true_sum), time=jnp.int32(time))
  states = jax.tree.map(lambda x: jnp.stack([x, x]), state)   # B = 2 copies
  num = 4000
  hard, soft = jax.jit(lambda k: prm.mc_labels(
      env, params, prm.uniform_policy(env.num_actions), states, k, num, horizon,
      step_rewards=jnp.full((2,), float(claimed_right)))   # used only if terminal
  )(jax.random.PRNGKey(3))
  p = prm.analytic_uniform_success(n - pointer, horizon - time, m, claimed_right)
  tol = 4 * np.sqrt(max(p * (1 - p), 1e-12) / num) + 1e-6
  np.testing.assert_allclose(np.asarray(soft), p, atol=tol)
  np.testing.assert_array_equal(np.asarray(hard), (np.asarray(soft) > 0).astype(float))


def test_mc_hard_label_rate_matches_one_minus_failure_power():
  # Hard label with N completions: P(label = 1) = 1 - (1 - p)^N.
  m, n, horizon, completions = 2, 2, 4, 3
  env, params = cj.envs.make("RunningSum-v0", num_terms=n, modulus=m, horizon=horizon)
  _, state = env.reset_env(jax.random.PRNGKey(0), params)
  states = jax.tree.map(lambda x: jnp.repeat(x[None], 3000, 0), state)
  hard, _ = prm.mc_labels(env, params, prm.uniform_policy(env.num_actions), states,
                          jax.random.PRNGKey(1), completions, horizon)
  p = prm.analytic_uniform_success(n, horizon, m, True)
  want = 1 - (1 - p) ** completions
  assert abs(float(hard.mean()) - want) < 4 * np.sqrt(want * (1 - want) / 3000)


@functools.lru_cache
def _small_data(seed, mc=False, episodes=96):
  """Demonstrator data from PRNGKey(`seed`), with Monte-Carlo labels if `mc` (every other
  kind of label is computed either way); built once per module, in one compile."""
  env, params = cj.envs.make("RunningSum-v0", num_terms=3, modulus=3, horizon=6)
  pc = prm.default_config()
  pc.labels = "mc_soft" if mc else "truth"
  pc.mc_rollouts = 4
  data = jax.jit(lambda k: prm.demo_data(env, params, pc, k, episodes))(
      jax.random.PRNGKey(seed))
  return env, data


@pytest.mark.parametrize("labels", ["truth", "mc_soft", "outcome"])
def test_prm_training_reduces_held_out_loss(labels):
  env, train = _small_data(0, mc=labels.startswith("mc"))
  _, held = _small_data(1)
  net = prm.PRM(num_actions=env.num_actions, hidden_sizes=(16,))
  params0 = jax.jit(lambda k: prm.init_prm(net, k, env.obs_shape[0]))(jax.random.PRNGKey(2))
  fit = jax.jit(lambda p, k: prm.train_prm(net, p, train, train[labels], k, 200, 64, 1e-2))
  params, losses = fit(params0, jax.random.PRNGKey(3))
  assert losses.shape == (200,)
  ev = jax.jit(lambda p: prm.evaluate(net, p, held["obs"], held["actions"], held["truth"],
                                      held["valid"]))
  before, after = ev(params0), ev(params)
  if labels == "outcome":   # outcome labels: the PRM fits outcomes, not steps
    assert float(losses[-20:].mean()) < float(losses[:20].mean())
  else:
    assert float(after["bce"]) < float(before["bce"]) - 0.05
    assert float(after["accuracy"]) > max(float(after["base_rate"]),
                                          1 - float(after["base_rate"]))


def test_evaluate_calibration_hand_case():
  class Const:   # a "network" returning fixed logits
    def apply(self, params, obs, actions):
      return params
  logits = jnp.log(jnp.array([0.2, 0.2, 0.8, 0.8]) / (1 - jnp.array([0.2, 0.2, 0.8, 0.8])))
  truth = jnp.array([0.0, 1.0, 1.0, 1.0])
  ev = prm.evaluate(Const(), logits, None, None, truth, jnp.ones(4, bool))
  # bin 0.2: mean prob 0.2, truth 0.5 (gap 0.3 x 2 steps); bin 0.8: 0.8 vs 1.0 (0.2 x 2)
  np.testing.assert_allclose(float(ev["ece"]), (0.3 * 2 + 0.2 * 2) / 4, atol=1e-5)
  np.testing.assert_allclose(float(ev["accuracy"]), 0.75)


def test_aggregation_against_hand_computed_returns():
  p = jnp.array([[0.9, 0.5], [0.2, 0.5], [0.7, 0.1]])          # [T=3, B=2]
  valid = jnp.array([[True, True], [True, True], [True, False]])
  np.testing.assert_allclose(prm.aggregate(p, valid, "sum"), [1.8, 1.0], atol=1e-6)
  tau = 0.1
  w = np.exp(-np.array([0.9, 0.2, 0.7]) / tau)
  want0 = float((w * [0.9, 0.2, 0.7]).sum() / w.sum())
  got = prm.aggregate(p, valid, "min", tau)
  np.testing.assert_allclose(got, [want0, 0.5], atol=1e-6)
  np.testing.assert_allclose(prm.aggregate(p, valid, "min", 1e-4), [0.2, 0.5], atol=1e-4)
  scores = prm.shaped_scores(jnp.array([1.0, 0.0]), p, valid, 0.5, 1.0, "sum")
  np.testing.assert_allclose(scores, [1.0 + 0.5 * 1.8, 0.5 * 1.0], atol=1e-6)
  # padding two more 0.9-rated steps raises the sum form, not the min form
  p2 = jnp.concatenate([p, jnp.full((2, 2), 0.9)])
  v2 = jnp.concatenate([valid, jnp.ones((2, 2), bool)])
  assert float(prm.aggregate(p2, v2, "sum")[0]) > 1.8 + 1.7
  assert float(prm.aggregate(p2, v2, "min", 1e-3)[0]) == pytest.approx(0.2, abs=1e-3)
  with pytest.raises(ValueError):
    prm.aggregate(p, valid[:2], "sum")


def test_compounding_hand_case():
  ok = jnp.array([[True, True, False], [True, False, True]])   # [T=2, B=3]
  a, whole = prm_study.compounding(ok, jnp.ones_like(ok))
  assert float(a) == pytest.approx(4 / 6)
  assert float(whole) == pytest.approx(1 / 3)


def _smoke_config():
  from configs import prm as prm_configs
  return prm_configs.get_config("smoke").grpo


def test_grpo_with_prm_runs_jit_and_vmap_and_validates():
  c = _smoke_config()
  train = cj.algos.make_train(c)
  assert {"prm.weight", "prm.outcome_weight"} <= set(train.default_hparams)
  # One compile: two seeds vmapped under jit (a lone seed's run is the same trace).
  hp = {k: jnp.stack([v, v]) for k, v in train.default_hparams.items()}
  states, m = jax.jit(jax.vmap(train))(jax.random.split(jax.random.PRNGKey(0), 2), hp)
  for k in ("loss", "success", "prm_score", "prm_gap", "padding_frac", "surface_frac"):
    assert m[k].shape == (2, c.num_updates) and bool(jnp.all(jnp.isfinite(m[k]))), k
  assert "prm_params" in states.aux
  c.prm.form = "max"
  with pytest.raises(cj.algos.ConfigError, match="prm.form"):
    cj.algos.validate_config(c)


@pytest.mark.slow
def test_sum_form_shaping_learns_to_pad():
  # Seeded learning test: a heavily weighted sum-form PRM pays for padding, and GRPO
  # finds it (the gaming route the environment is built to expose).
  from configs import prm as prm_configs
  c = prm_configs.get_config("small").grpo
  c.env_kwargs = dict(num_terms=4, modulus=5, horizon=16)   # the setting it was seeded on
  c.horizon = 16
  c.num_updates = 15
  c.prm.weight = 0.5
  _, m = jax.jit(cj.algos.make_train(c))(jax.random.PRNGKey(0))
  assert float(m["padding_frac"][-3:].mean()) > float(m["padding_frac"][:3].mean()) + 0.3
  assert float(m["success"][-3:].mean()) < float(m["success"][:3].mean())


# The experiment's smoke run in two halves (each well under a minute; they run in
# parallel under xdist): GRPO arms and best-of-N, then labels, compounding and PPO.
def test_experiment_smoke_grpo_arms_and_rerank(tmp_path):
  from configs import prm as prm_configs
  from credit_jax.experiments import prm as prm_exp
  config = prm_configs.get_config("smoke")
  config.parts = "AD"
  summary = prm_exp.run(config, str(tmp_path), log=lambda *_: None)
  for f in ("prm_training.png", "prm_rerank.png", "summary.md", "summary.json"):
    assert (tmp_path / f).exists(), f
  assert set(summary["final"]) == {a[0] for a in prm_exp.arms(config)}
  assert summary["ppo"] == {} and summary["compounding"]["rows"] == []
  # Part D: the verifier's pick succeeds at least as often as the random one, and the
  # features read at the pick are fractions where they should be.
  d = summary["rerank"]
  assert d["verifier"]["mean"][-1] >= d["random"]["mean"][-1] - 1e-6
  for r in d.values():
    for f in ("success", "answered", "padding", "surface", "step_accuracy"):
      assert all(0.0 <= x <= 1.0 for x in r["features"][f]["mean"]), f
  config.parts = "D"   # part D reranks part A's policies
  with pytest.raises(cj.algos.ConfigError, match="parts"):
    prm_exp.validate_config(config)


def test_experiment_smoke_labels_compounding_and_ppo(tmp_path):
  from configs import prm as prm_configs
  from credit_jax.experiments import prm as prm_exp
  config = prm_configs.get_config("smoke")
  config.parts = "BCE"
  summary = prm_exp.run(config, str(tmp_path), log=lambda *_: None)
  for f in ("prm_labels.png", "prm_compounding.png", "prm_ppo.png", "summary.md",
            "summary.json"):
    assert (tmp_path / f).exists(), f
  assert summary["final"] == {} and not (tmp_path / "prm_training.png").exists()
  rows = summary["compounding"]["rows"]
  assert rows[0]["T"] == 1 and rows[0]["measured"] == pytest.approx(rows[0]["a"], abs=0.2)
  assert set(summary["labels"]["kinds"]) == {"truth", "mc_hard", "mc_soft", "outcome"}
  assert [r["N"] for r in summary["labels"]["mc"]] == list(config.mc_N)
  # Part E: PPO outcome-only and per-step arms, each with a success curve per seed.
  e = summary["ppo"]
  assert list(e["final"]) == ["PPO outcome", "PPO step w=0.3 retrain truth"]
  assert e["steps_per_update"] == 32 and e["budget_env_steps"] == 96
