"""Experiment 2's task pool and training-run measurements (credit_jax/experiments/
grpo_pool.py): the pool formula against integration and hand values, the first-success
and window bookkeeping against hand-made curves, and the summary.json structure of a
tiny run of the whole experiment."""
import math

import ml_collections
import numpy as np
import pytest

from credit_jax.experiments import grpo_degradation, report
from credit_jax.experiments.grpo_degradation import pool as grpo_pool

from test_experiments import check_png, load_config


def _beta_fn(a, b):
  return math.exp(math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))


@pytest.mark.parametrize("a,b,size", [(0.5, 4.5, 8), (0.5, 4.5, 4), (2.0, 2.0, 3),
                                      (1.0, 1.0, 2)])
def test_pool_formula_against_integration(a, b, size):
  from scipy import integrate
  density = lambda p: p ** (a - 1) * (1 - p) ** (b - 1) / _beta_fn(a, b)  # noqa: E731
  ref, _ = integrate.quad(lambda p: (p ** size + (1 - p) ** size) * density(p), 0, 1,
                          limit=200)
  np.testing.assert_allclose(grpo_pool.pool_analytic(a, b, size), ref, rtol=1e-6)


def test_pool_formula_hand_values():
  # Uniform p, K = 2: E[p^2] + E[(1-p)^2] = 1/3 + 1/3.
  np.testing.assert_allclose(grpo_pool.pool_analytic(1.0, 1.0, 2), 2 / 3, rtol=1e-12)
  # The figure: Beta(0.5, 4.5) (mean 0.1), K = 8 -> 0.59, not 0.9^8 + 0.1^8 = 0.43.
  np.testing.assert_allclose(grpo_pool.pool_analytic(0.5, 4.5, 8), 0.58985595703125,
                             rtol=1e-9)
  with pytest.raises(ValueError):
    grpo_pool.pool_analytic(0.0, 1.0, 2)


def test_pool_records_against_hand_values():
  config = ml_collections.ConfigDict(dict(pool_beta=(1.0, 1.0), group_sizes=(2,),
                                          seeds=2, num_tasks=8))
  out = {"2": {"degenerate": np.array([0.5, 0.75]), "conditional": np.array([0.6, 0.7]),
               "mean_p": np.array([0.4, 0.6])}}
  (rec,) = grpo_pool.pool_records(out, config)
  assert rec["group_size"] == 2 and rec["groups"] == 16 and rec["mean_p"] == 0.5
  assert rec["degenerate_measured"] == 0.625 and rec["mean_p_drawn"] == 0.5
  np.testing.assert_allclose(rec["degenerate_given_draws"], 0.65)
  np.testing.assert_allclose(rec["degenerate_pool_analytic"], 2 / 3)
  np.testing.assert_allclose(rec["degenerate_at_mean_p"], 0.5)        # 0.25 + 0.25
  se = math.sqrt((2 / 3) * (1 / 3) / 16)
  np.testing.assert_allclose(rec["se"], se)
  np.testing.assert_allclose(rec["z"], (0.625 - 2 / 3) / se)


def test_first_success_and_training_summary_on_hand_curves():
  success = np.array([[0.0, 0.0, 0.25, 0.6, 1.0],
                      [0.0, 0.0, 0.0, 0.0, 0.0],
                      [0.1, 0.5, 0.9, 1.0, 1.0]])
  degenerate = np.array([[1.0, 1.0, 0.75, 0.25, 1.0],
                         [1.0, 1.0, 1.0, 1.0, 1.0],
                         [0.9, 0.4, 0.5, 1.0, 1.0]])
  assert grpo_pool.first_success(success) == [3, None, 1]
  c = grpo_pool.training_config(horizon=4, num_pivotal=2, num_actions=2)
  c.num_tasks, c.group_size, c.seeds = 2, 4, 3
  out = grpo_pool.training_summary({"success": success, "degenerate_frac": degenerate,
                                    "compile_seconds": 1.0, "run_seconds": 2.0}, c)
  p = 0.25                                               # (1/A)^k
  assert out["initial_success_rate"] == p and out["episodes_per_update"] == 8
  np.testing.assert_allclose(out["expected_wait_formula"], 1 / (8 * p))
  np.testing.assert_allclose(out["expected_wait_geometric"], 1 / (1 - 0.75 ** 8))
  np.testing.assert_allclose(out["p_never_geometric"], (0.75 ** 8) ** 5)
  assert out["first_success_update"] == [3, None, 1] and out["seeds_with_success"] == 2
  assert out["first_success_mean"] == 2.0 and out["first_success_median"] == 2.0
  np.testing.assert_allclose(out["first_success_interval"], 12.706 * math.sqrt(2) / math.sqrt(2),
                             rtol=1e-3)
  assert out["half_success_update"] == [4, None, 2]
  # At most half degenerate: seed 0 at update 4 only, seed 2 at updates 2 and 3.
  assert out["informative_window"] == [[4, 4], None, [2, 3]]
  np.testing.assert_allclose(out["informative_updates_mean"], (1 + 0 + 2) / 3)
  np.testing.assert_allclose(out["min_degenerate_mean"], min(degenerate.mean(0)))


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("grpo_degradation_pool")
  config = load_config("grpo_degradation", "smoke")
  config.difficulties, config.num_tasks, config.seeds = ((1, 2, 0.0),), 16, 2
  config.parts = "pt"
  lines = []
  summary = grpo_degradation.run(config, str(workdir), log=lines.append)
  return workdir, config, summary, lines


def test_tiny_run_summary_structure(smoke_run):
  workdir, config, summary, lines = smoke_run
  assert report.read_summary(str(workdir))["pool"] == summary["pool"]
  assert [r["group_size"] for r in summary["pool"]] == list(config.group_sizes)
  for r in summary["pool"]:
    for key in ("degenerate_measured", "degenerate_pool_analytic", "degenerate_given_draws",
                "degenerate_at_mean_p"):
      assert 0.0 <= r[key] <= 1.0, key
    assert r["degenerate_pool_analytic"] > r["degenerate_at_mean_p"]    # convexity
    assert r["groups"] == config.seeds * config.num_tasks and r["se"] > 0
  t = summary["training"]
  updates, seeds = config.train.num_updates, config.train.seeds
  assert t["updates"] == updates and t["seeds"] == seeds
  assert len(t["first_success_update"]) == seeds == len(t["informative_window"])
  assert len(t["success_curve_mean"]) == updates == len(t["degenerate_curve_mean"])
  assert all(0.0 <= x <= 1.0 for x in t["degenerate_curve_mean"])
  for key in ("expected_wait_formula", "expected_wait_geometric", "final_success_mean",
              "initial_success_rate", "p_never_geometric", "informative_updates_mean"):
    assert np.isfinite(t[key]), key
  check_png(str(workdir / "grpo_training_window.png"))
  check_png(str(workdir / "degenerate_fraction.png"))
  assert any(line.startswith("pool ") for line in lines)
  assert any(line.startswith("training: ") for line in lines)
  text = (workdir / "summary.md").read_text()
  assert "## A task pool of mixed difficulty" in text and "## During GRPO training" in text


def test_parts_and_pool_config_errors():
  from credit_jax.algos import ConfigError
  config = load_config("grpo_degradation", "smoke")
  config.parts = "x"
  with pytest.raises(ConfigError, match="config.parts"):
    grpo_degradation.validate_config(config)
  config.parts, config.pool_beta = "p", (0.5, 0.0)
  with pytest.raises(ConfigError, match="config.pool_beta"):
    grpo_degradation.validate_config(config)
  config.pool_beta, config.parts, config.train.num_minibatches = (0.5, 4.5), "t", 3
  with pytest.raises(ConfigError, match="config.train.num_minibatches"):
    grpo_degradation.validate_config(config)
