"""Part A of the horizon answer (credit_jax/experiments/horizon_answer): every estimator's
expectation against the exact DP gradient on tiny probes, GAE's predicted bias, the
statistics against plain NumPy, env-step accounting, and a resumed run."""
import json
import os

import jax
import numpy as np
import pytest

from credit_jax.experiments import horizon_answer
from credit_jax.experiments.horizon_answer import anatomy, pages

LAMBDAS = (1.0, 0.9, 0.5)
EPISODES = 32768


def _z(x, target):
  """Largest |mean - target| / standard error over the components of x [n, ...]."""
  x = x.reshape(len(x), -1).astype(np.float64)
  se = x.std(axis=0, ddof=1) / np.sqrt(len(x))
  live = se > 1e-6    # components no episode moves (0 up to float32 rounding)
  assert np.allclose(x.mean(0)[~live], target.ravel()[~live], atol=1e-5)
  return float(np.max(np.abs(x.mean(0) - target.ravel())[live] / se[live]))


@pytest.fixture(scope="module", params=[("probe", 6, 0.0), ("probe", 6, 0.5),
                                        ("control", 6, 0.0), ("corridor", 6, 0.0)],
                ids=["probe", "probe_noise", "control", "corridor"])
def sampled(request):
  family, horizon, sigma = request.param
  probe = anatomy.make_probe(family, horizon, sigma, num_pivotal=2, num_actions=4)
  beta, _ = anatomy.tune_policy(probe, 0.4)
  w = anatomy.policy_at(probe, beta)
  # Asymmetric logits, so no component of the gradient is zero by symmetry.
  w = w + 0.3 * np.asarray(jax.random.normal(jax.random.key(1), w.shape))
  grads = anatomy.episode_gradients(probe, w, jax.random.key(2), EPISODES, LAMBDAS,
                                    loo_batch=16, group_size=4)
  return probe, w, grads


def test_unbiased_estimators_match_the_exact_gradient(sampled):
  probe, w, grads = sampled
  _, g = anatomy.exact_gradient(probe, w)
  unbiased = ["reinforce_loo", "gae_obs_1", "cocoa_exact", "rloo"]
  unbiased += [f"gae_oracle_{lam:g}" for lam in LAMBDAS]
  if probe.family == "probe":      # HCA's pi / h is bounded here (see the control test)
    unbiased.append("hca_exact")
  for name in unbiased:
    assert _z(grads[name], g) < 4.5, name
  # The sampled success rate is the exact one.
  j = float(anatomy.success_of(probe)(w))
  assert abs(grads["success"].mean() - j) < 4 * np.sqrt(j * (1 - j) / (2 * EPISODES))


def test_gae_observation_critic_matches_its_prediction(sampled):
  probe, w, grads = sampled
  _, g = anatomy.exact_gradient(probe, w)
  for lam in LAMBDAS:
    predicted, scalar = anatomy.gae_prediction(probe, w, lam)
    assert _z(grads[f"gae_obs_{lam:g}"], predicted) < 4.5, lam
    if probe.family == "corridor":
      np.testing.assert_allclose(predicted, g, rtol=1e-5, atol=1e-7)
      assert scalar == 0.0
    elif lam < 1:
      # A real bias, not noise: the prediction is far from g* in standard errors.
      assert _z(grads[f"gae_obs_{lam:g}"], g) > 8.0, lam
      assert 0.0 < scalar < 1.0


def test_hca_is_biased_where_an_outcome_rules_an_action_out():
  """The control flags its pivotal steps: a wrong answer there cannot succeed, so
  h(wrong | o, U = 1) = 0 and pi / h is never sampled where it is infinite. The expected
  estimate is the exact gradient with each pivotal row's part scaled by 1 - pi(right)."""
  probe = anatomy.make_probe("control", 6, 0.0, num_pivotal=2, num_actions=4)
  w = anatomy.policy_at(probe, 1.0)
  grads = anatomy.episode_gradients(probe, w, jax.random.key(3), 16384, (1.0,),
                                    loo_batch=16, group_size=4)
  _, g = anatomy.exact_gradient(probe, w)
  right = anatomy.right_answers(probe)
  p_right = np.zeros(probe.R)
  rows = right >= 0
  probs = np.exp(w) / np.exp(w).sum(-1, keepdims=True)
  p_right[rows] = probs[rows, right[rows]]
  assert _z(grads["hca_exact"], g * (1.0 - p_right)[:, None]) < 4.5
  assert _z(grads["hca_exact"], g) > 8.0


def test_step_accounting_and_shapes():
  probe = anatomy.make_probe("probe", 7, 0.0, num_pivotal=2, num_actions=2)
  w = anatomy.policy_at(probe, 0.5)
  keys = jax.random.split(jax.random.key(0), 8)
  out = anatomy._keychain_rollout(probe, w, keys, keys)   # pylint: disable=protected-access
  row = np.asarray(out[0])
  assert row.shape == (7, 8)            # exactly T steps per episode, every one stepped
  assert (row > 0).all()                # row 0 is the empty observation at t = T only
  names = anatomy.estimator_names(probe, LAMBDAS)
  assert names[-2:] == ["grpo", "rloo"] and "hca_exact" in names
  assert "hca_exact" not in anatomy.estimator_names(
      anatomy.make_probe("corridor", 6), LAMBDAS)
  for name in names:
    assert anatomy.steps_per_episode(probe, name) == 7
  assert anatomy.chunk_size(probe, 4096, 64, 8, chunk_steps=7 * 1000) == 512
  with pytest.raises(ValueError, match="multiple"):
    anatomy.chunk_size(probe, 100, 64, 8)


def test_tuned_policies_hit_their_targets():
  for family in ("probe", "control", "corridor"):
    probe = anatomy.make_probe(family, 30)
    for target in (0.3, 0.7):
      beta, success = anatomy.tune_policy(probe, target)
      assert beta > 0 and abs(success - target) < 1e-4
    assert anatomy.tune_policy(probe, 1e-6)[0] == 0.0


def test_unit_statistics_against_numpy():
  rng = np.random.default_rng(0)
  g_star = np.array([1.0, 2.0, -1.0])
  units = g_star * 1.1 + rng.normal(size=(500, 3))
  counts = rng.multinomial(500, np.full(500, 1 / 500), size=50)
  st = horizon_answer.unit_statistics(units, g_star, 10, counts)
  mean = units.mean(0)
  u = g_star / np.linalg.norm(g_star)
  proj = units @ u
  assert st["bias_along"] == pytest.approx(mean @ u / np.linalg.norm(g_star) - 1)
  assert st["rel_err"] == pytest.approx(np.linalg.norm(mean - g_star) /
                                        np.linalg.norm(g_star))
  assert st["var_along"] == pytest.approx(proj.var(ddof=1))
  assert st["snr_step"] == pytest.approx((proj.mean() ** 2 / proj.var(ddof=1)) / 10)
  lo, hi = st["bias_along_ci"]
  assert lo < st["bias_along"] < hi and lo < 0.1 < hi


def test_run_writes_pages_and_resumes(tmp_path, monkeypatch):
  config = horizon_answer.default_config()
  config.horizons, config.sigmas, config.control = (4, 6), (0.0,), False
  config.corridor_lengths = ()
  config.episodes, config.bootstrap, config.lambdas = 128, 20, (1.0, 0.9)
  config.loo_batch, config.group_size = 16, 4
  summary = horizon_answer.run(config, str(tmp_path), log=lambda *_: None)
  for name in ("results.md", "results.csv", "summary.json", "anatomy.png"):
    assert os.path.exists(tmp_path / name), name
  assert len(summary["cells"]) == 6                      # 2 T x 3 policies
  assert {c["verdict"] for c in summary["gae_checks"]} <= {"confirmed", "refuted"}
  slope = [s for s in summary["snr_slopes"] if s["estimator"] == "reinforce_loo"]
  assert slope == [] or "verdict" in slope[0]
  for cell in summary["cells"]:
    for name, st in cell["estimators"].items():
      per = 4 if name in ("grpo", "rloo") else 1
      assert st["steps_per_unit"] == per * cell["horizon"], name
  before = json.loads((tmp_path / "summary.json").read_text())
  monkeypatch.setattr(anatomy, "make_chunk", lambda *a, **k: pytest.fail("resampled"))
  again = horizon_answer.run(config, str(tmp_path), log=lambda *_: None)
  assert again["gae_checks"] == before["gae_checks"]
  assert pages.SLOPE_FROM == 100
