"""Tests for credit_jax.experiments.tree_search: its pieces against hand-computed values,
and the smoke config run in-process (both parts; slow: four compiles)."""
import os

import numpy as np
import pytest

from credit_jax.algos import ConfigError
from credit_jax.experiments import report, tree_search

from test_experiments import check_png, load_config


def test_success_rate_of_the_tabular_policies():
  assert tree_search.success_rate(3, 0.0, 4) == 4.0 ** -3    # uniform: (1/A)^k
  assert tree_search.success_rate(3, 0.5, 4) == 0.125        # biased: q^k


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
                                         ("difficulties", ((11, 0.0),))])
def test_config_errors_name_the_field(field, value):
  config = load_config("tree_search", "smoke")
  config[field] = value
  with pytest.raises(ConfigError, match=f"config.{field}"):
    tree_search.validate_config(config)


@pytest.mark.slow
def test_smoke_run_writes_figures_and_a_consistent_summary(tmp_path):
  lines = []
  summary = tree_search.run(load_config("tree_search", "smoke"), str(tmp_path),
                            log=lines.append)
  assert sum(line.startswith("point ") for line in lines) == 2
  for png in ("search_vs_sampling.png", "training_curves.png"):
    check_png(os.path.join(tmp_path, png))
  assert report.read_summary(str(tmp_path))["points"] == summary["points"]
  for p in summary["points"]:
    assert 0.0 <= p["search_success"] <= 1.0
    assert p["compute_multiplier"] > 0 and p["matched_episodes"] >= 1
    # Exact sampling rates, and multipliers consistent with the rates they divide.
    np.testing.assert_allclose(p["sampling_success"],
                               1 - (1 - p["episode_success"]) ** p["group_size"])
    np.testing.assert_allclose(p["success_multiplier"] * p["sampling_success"],
                               p["search_success"], rtol=1e-6)
  assert set(summary["training"]["arms"]) == {"search", "grpo"}
  assert summary["training"]["arms"]["grpo"]["search_found"] == 0.0
  assert (tmp_path / "summary.md").read_text().startswith("# Exercise 5")
