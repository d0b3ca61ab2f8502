"""Tests for credit_jax.experiments.tree_search and search_vs_baselines: priors, exact
rates, budgets and Wilson intervals against hand-computed values, and the smoke config
run in-process (both parts; slow: a dozen compiles), whose summary.json must hold every
quantity the README quotes."""
import os

import numpy as np
import pytest

from credit_jax.algos import ConfigError
from credit_jax.experiments import report, tree_search
from credit_jax.experiments.tree_search import vs_baselines as svb

from test_experiments import check_png, load_config


def _softmax(rows):
  z = np.exp(rows - rows.max(-1, keepdims=True))
  return z / z.sum(-1, keepdims=True)


def test_prior_tables_by_hand():
  np.testing.assert_allclose(_softmax(svb.prior_table("uniform", 4)), 0.25)
  inf = _softmax(svb.prior_table("informative", 4, q=0.5))
  np.testing.assert_allclose(inf[0], 0.25, rtol=1e-6)           # distractors uniform
  np.testing.assert_allclose(inf[3], [1 / 6, 1 / 6, 0.5, 1 / 6], rtol=1e-6)   # cue 2
  adv = _softmax(svb.prior_table("adversarial", 4, q=0.5, right=0.3))
  np.testing.assert_allclose(adv[1], [0.3, 0.5, 0.1, 0.1], rtol=1e-6)  # cue 0: 1 leads
  np.testing.assert_allclose(adv[2], [0.1, 0.3, 0.5, 0.1], rtol=1e-6)  # cue 1: 2 leads
  np.testing.assert_allclose(adv[3], inf[3], rtol=1e-6)               # cue 2: informative
  with pytest.raises(ValueError, match="prior must be one of"):
    svb.prior_table("oracle", 4)


def test_right_probs_and_exact_success_by_hand():
  adv = svb.prior_table("adversarial", 4)
  np.testing.assert_allclose(svb.right_probs(adv), [0.3, 0.3, 0.5, 0.5], rtol=1e-6)
  np.testing.assert_array_equal(svb.right_probs(adv, greedy=True), [0, 0, 1, 1])
  # The uniform table's argmax is action 0: greedy is right only for cue 0.
  np.testing.assert_array_equal(svb.right_probs(svb.prior_table("uniform", 4), greedy=True),
                                [1, 0, 0, 0])
  # Temperature 0.5 squares the probabilities before renormalising: 0.25 / (0.25 + 3/36).
  inf = svb.prior_table("informative", 4)
  np.testing.assert_allclose(svb.right_probs(inf, 0.5), 0.75, rtol=1e-6)
  # Uniform cues: 1 - (1 - (1/4)^k)^m; adversarial k = 1: half the tasks at 0.3, half 0.5.
  assert svb.exact_any_success([0.25] * 4, 3, 5) == pytest.approx(1 - (1 - 4.0 ** -3) ** 5)
  assert svb.exact_any_success([0.3, 0.3, 0.5, 0.5], 1, 3) == pytest.approx(
      0.5 * (1 - 0.7 ** 3) + 0.5 * (1 - 0.5 ** 3))
  assert svb.exact_any_success([0, 0, 1, 1], 4, 1) == pytest.approx(0.5 ** 4)
  # k = 2, m = 2 by enumeration of the 16 cue pairs.
  r = np.array([0.3, 0.3, 0.5, 0.5])
  pairs = [1 - (1 - r[i] * r[j]) ** 2 for i in range(4) for j in range(4)]
  assert svb.exact_any_success(r, 2, 2) == pytest.approx(np.mean(pairs))


def test_beam_cost_and_matched_budgets_by_hand():
  # W = 5, A = 4, T = 3: live prefixes 1, 4, 5 (then 5 kept): steps 4 + 5 + 5, evals 1 + 4 + 5.
  assert svb.beam_cost(5, 4, 3) == (14, 10)
  assert svb.beam_cost(1, 4, 3) == (3, 3)
  assert svb.matched_budget("best_of_m", 1905, 1906, 4, 10) == 190
  assert svb.matched_budget("beam_dedup", 1905, 1906, 4, 10) == 47     # 4 steps per evaluation
  w = svb.matched_budget("beam", 1905, 1906, 4, 10)
  assert svb.beam_cost(w, 4, 10)[0] <= 1905 < svb.beam_cost(w + 1, 4, 10)[0]
  assert w == 260                      # 4 + 16 + 64 + 7 * 260 = 1904


def test_verdicts_need_separated_intervals():
  rec = lambda m, lo, hi: {"method": m, "budget": 1, "success": (lo + hi) / 2,
                           "ci_low": lo, "ci_high": hi}
  search = rec("search", 0.5, 0.6)
  assert svb.verdict(search, [rec("a", 0.1, 0.2), rec("b", 0.3, 0.45)])["verdict"] == (
      "search better")
  v = svb.verdict(search, [rec("a", 0.1, 0.2), rec("b", 0.65, 0.7)])
  assert (v["method"], v["verdict"]) == ("b", "baseline better")
  assert svb.verdict(search, [rec("a", 0.55, 0.7)])["verdict"].startswith("not resolved")


def test_wilson_interval_against_closed_forms():
  z2 = 1.959963984540054 ** 2
  assert report.wilson_interval(0, 10) == (0.0, pytest.approx(z2 / (10 + z2)))
  assert report.wilson_interval(10, 10) == (pytest.approx(10 / (10 + z2)), 1.0)
  half = np.sqrt(z2) * np.sqrt(0.025 + z2 / 400) / (1 + z2 / 10)
  np.testing.assert_allclose(report.wilson_interval(5, 10), (0.5 - half, 0.5 + half))
  low, high = report.wilson_interval(np.array([0, 512]), np.array([1024, 1024]))
  np.testing.assert_allclose(low, [0.0, 0.5 - 0.0306], atol=2e-4)
  z90 = 1.6448536269514722
  c = (0.8 + z90 ** 2 / 20) / (1 + z90 ** 2 / 10)
  h = z90 * np.sqrt(0.016 + z90 ** 2 / 400) / (1 + z90 ** 2 / 10)
  np.testing.assert_allclose(report.wilson_interval(8, 10, 0.9), (c - h, c + h))
  with pytest.raises(ValueError, match="successes <= n"):
    report.wilson_interval(3, 2)


def _arm(success, found, ran):
  """Metrics {name: [seeds=2, updates=3]} of a fake part-B arm."""
  updates = np.ones((2, 3), np.float32)
  return {"success": np.asarray(success, np.float32),
          "greedy_success": np.asarray(success, np.float32)[::-1],
          "sample_env_steps": 10 * updates, "search_env_steps": 5 * updates,
          "search_found": np.asarray(found, np.float32),
          "search_ran": np.asarray(ran, np.float32),
          "searched_logp_step": np.full((2, 3), -1.5, np.float32)}


def test_training_summary_reduces_arms_as_documented():
  config = load_config("tree_search", "smoke")
  arms = {"search": _arm([[0, 0.5, 1], [0, 0, 1]], [[0.5, 0, 1], [0, 0, 0]],
                         [[1, 0, 1], [1, 0, 0]]),
          "grpo": _arm([[0, 0, 0], [0, 0, 0.5]], np.zeros((2, 3)), np.zeros((2, 3)))}
  t = tree_search.training_summary(config.train, arms)
  s = t["arms"]["search"]
  np.testing.assert_allclose(s["success_last5"], 2.5 / 6)
  assert s["env_steps"] == 45.0                       # 3 updates x (10 + 5)
  np.testing.assert_allclose(s["search_found"], 1.5 / 3)   # over the updates that ran
  assert s["searched_logp_step"] == -1.5
  assert s["success_curve"] == [0.0, 0.25, 1.0]
  assert t["arms"]["grpo"]["search_found"] == 0.0 == t["arms"]["grpo"]["searched_logp_step"]
  assert t["episode_success"] == 0.25 ** 2 and t["seeds"] == 2
  text = tree_search.markdown({"wall_seconds": 1.0, "training": t})
  assert "## GRPO with and without search" in text and "Sampling against" not in text


@pytest.mark.parametrize("field,value", [("parts", "c"), ("num_actions", 3),
                                         ("points", (("uniform", 11),)),
                                         ("points", (("oracle", 2),)),
                                         ("adversarial_right", 0.6),
                                         ("temperatures", (1.0, 0.0))])
def test_config_errors_name_the_field(field, value):
  config = load_config("tree_search", "smoke")
  config[field] = value
  with pytest.raises(ConfigError, match=f"config.{field}"):
    tree_search.validate_config(config)


RECORD_KEYS = {"method", "budget", "solved", "success", "ci_low", "ci_high", "exact",
               "env_steps", "policy_evals", "wall_ms_per_task"}
BASELINES = {"greedy", "swor", "beam", "beam_dedup"}


def check_points_structure(summary):
  """Every part-A quantity the README and summary.md quote, by structure (not value)."""
  for key in ("horizon", "num_actions", "num_tasks", "simulations", "load_average",
              "temperatures", "prior_q", "adversarial_right"):
    assert key in summary
  for p in summary["points"]:
    assert p["prior"] in svb.PRIORS and p["tasks"] == summary["num_tasks"]
    assert 0 < p["episode_success"] <= 1 and 0 < p["sampling_at_group_size"] <= 1
    records = [p["search"]] + [r for m in svb.MATCHINGS for r in p["matched"][m]]
    for r in records:
      assert set(r) == RECORD_KEYS
      assert r["ci_low"] <= r["success"] <= r["ci_high"]
      assert r["success"] == r["solved"] / p["tasks"]
      assert r["env_steps"] > 0 and r["policy_evals"] > 0 and r["wall_ms_per_task"] > 0
    assert p["search"]["policy_evals"] == p["search"]["env_steps"] + 1
    for m in svb.MATCHINGS:
      methods = {r["method"] for r in p["matched"][m]}
      assert methods == BASELINES | {f"best_of_m@{t:g}" for t in summary["temperatures"]}
      sequence = [r for r in p["matched"][m] if r["method"] not in svb.STATE_METHODS]
      for best, recs in ((p["best"][m], p["matched"][m]), (p["best_sequence"][m], sequence)):
        assert best["success"] == max(r["success"] for r in recs)
        assert best["verdict"] in ("search better", "baseline better",
                                   "not resolved (intervals overlap)")
    # Matched on compute: no baseline spends more env steps or evaluations than search.
    for r in p["matched"]["steps_and_evals"]:
      assert r["env_steps"] <= p["search"]["env_steps"] + 1e-6
      assert r["policy_evals"] <= p["search"]["policy_evals"] + 1e-6
      if r["exact"] is not None:   # greedy and best-of-M: exact inside a 99.9% interval
        low, high = report.wilson_interval(r["solved"], p["tasks"], 0.999)
        assert low <= r["exact"] <= high, r


@pytest.mark.slow
def test_smoke_run_writes_figures_and_a_consistent_summary(tmp_path):
  lines = []
  summary = tree_search.run(load_config("tree_search", "smoke"), str(tmp_path),
                            log=lines.append)
  assert sum(line.startswith("point ") for line in lines) == 1
  for png in ("search_vs_baselines.png", "training_curves.png"):
    check_png(os.path.join(tmp_path, png))
  read = report.read_summary(str(tmp_path))
  assert read["points"] == summary["points"]
  check_points_structure(read)
  assert set(read["training"]["arms"]) == {"search", "grpo"}
  for arm in read["training"]["arms"].values():
    for key in ("success_last5", "greedy_success_last5", "env_steps", "search_found"):
      assert isinstance(arm[key], float)
  assert read["training"]["arms"]["grpo"]["search_found"] == 0.0
  text = (tmp_path / "summary.md").read_text()
  assert text.startswith("# Exercise 5")
  assert "Matched on wall time" in text and "load average" in text
  assert "### Where search stands" in text and "against the best sequence-level" in text
