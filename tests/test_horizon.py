"""Tests for the horizon study (credit_jax/experiments/horizon/study.py and its two helpers):
the censored steps-to-level logic and the slope interval against hand values, the
method names, config validation, and a tiny end-to-end run that is killed after its
first cell and resumed (the finished cell skipped, not recomputed)."""
import json
import os

import numpy as np
import pytest

from credit_jax.algos import ConfigError
from credit_jax.experiments import horizon, methods as horizon_methods, report
from credit_jax.experiments.horizon import report as horizon_report
from config_files import load_config


def study_config(variant):
  return load_config("horizon_study", variant)


# --- censoring and statistics against hand values -----------------------------------------

def test_updates_to_level_against_hand_values():
  success = np.array([[0.0, 0.5, 0.9],
                      [0.95, 0.9, 0.1],
                      [0.5, 1.0, 0.2],
                      [1.0, 0.4, 0.3]])                  # [U=4, S=3]
  upd, cen = horizon.updates_to_level(success, 0.9, smooth=1)
  np.testing.assert_array_equal(upd, [2, 2, 1])
  np.testing.assert_array_equal(cen, [False, False, False])
  # Trailing means over 2 updates: seed 0 [0, .475, .725, .75]: never (censored at U=4);
  # seed 1 [.5, .7, .95, .7]: update 3; seed 2 [.9, .5, .15, .25]: update 1 (one value).
  upd, cen = horizon.updates_to_level(success, 0.9, smooth=2)
  np.testing.assert_array_equal(upd, [4, 3, 1])
  np.testing.assert_array_equal(cen, [True, False, False])
  with pytest.raises(ValueError, match="success must be"):
    horizon.updates_to_level(np.zeros(3), 0.9, 1)


def test_cell_result_censors_at_the_budget_not_at_an_early_stop():
  config = horizon.default_config()
  config.smooth = 1
  out = {"success": np.array([[0.2, 0.95], [0.3, 0.95]]), "lr": np.array([1e-3, 1e-3]),
         "env_steps_per_update": 640, "compile_s": 1.0, "run_s": 2.0}
  res = horizon.cell_result("grpo_k8", 10, out, config, budget=50)
  assert res["updates_to_level"] == [50, 1]
  assert res["censored"] == [True, False]
  assert res["env_steps_to_level"] == [50 * 640, 640]
  assert res["budget_env_steps"] == 50 * 640 and res["updates_run"] == 2
  np.testing.assert_allclose(res["final_success"], [0.3, 0.95])


def test_cell_budget_is_the_tighter_of_updates_and_env_steps():
  config = horizon.default_config()
  config.episodes, config.budget_updates, config.budget_env_steps = 10, 100, 50_000
  assert horizon.cell_budget(config, 10) == 100       # 100 * 100 steps < 50k
  assert horizon.cell_budget(config, 1000) == 5       # 50k // (10 * 1000)
  assert horizon.cell_budget(config, 10**6) == 1      # at least one update


def test_slope_interval_against_hand_values():
  # Exactly updates = 3 T^0.5: slope 0.5, no spread.
  t = np.array([10, 10, 100, 100, 1000])
  r = horizon_report.slope_interval(t, 3 * t ** 0.5)
  assert r["slope"] == pytest.approx(0.5) and r["half"] == pytest.approx(0.0, abs=1e-9)
  assert r["horizons"] == [10, 100, 1000]
  # Points log-symmetric about the line: slope of least squares and its t-interval.
  x, y = np.log([10, 10, 100, 100]), np.log([2, 8, 20, 80])
  r = horizon_report.slope_interval([10, 10, 100, 100], [2, 8, 20, 80])
  b, a = np.polyfit(x, y, 1)
  resid = y - (a + b * x)
  se = np.sqrt(resid @ resid / 2 / np.sum((x - x.mean()) ** 2))
  assert r["slope"] == pytest.approx(b) == pytest.approx(1.0)
  assert r["half"] == pytest.approx(4.302652729911275 * se)   # t(0.975, 2)
  assert np.isnan(horizon_report.slope_interval([10, 10], [1, 2])["slope"])


# --- methods and config --------------------------------------------------------------------

def test_method_names_build_their_recipes():
  config = horizon.default_config()
  c = horizon_methods.recipe_config("grpo_k32", 100, config, 1e-3, 7)
  assert (c.algo, c.group_size, c.num_tasks, c.horizon) == ("grpo", 32, 2, 100)
  assert c.group_size * c.num_tasks == config.episodes and c.num_updates == 7
  c = horizon_methods.recipe_config("ppo_mlp_g0.99_l0.95", 300, config, 1e-3, 7)
  assert (c.algo, c.num_steps, c.num_envs) == ("ppo", 300, config.episodes)
  assert (c.gamma, c.gae_lambda, c.network.kind) == (0.99, 0.95, "mlp")
  assert c.total_timesteps // (c.num_envs * c.num_steps) == 7
  c = horizon_methods.recipe_config("ppo_gru_g1_l1", 30, config, 1e-3, 2)
  assert c.network.kind == "gru" and c.env_kwargs.horizon == 30
  c = horizon_methods.recipe_config("reinforce", 30, config, 2e-3, 3)
  assert (c.credit, c.baseline, c.num_envs, c.lr) == ("terminal", "mean", 64, 2e-3)
  for bad in ("ppo_foo_g1_l1", "grpo_k1", "sac", "ppo_mlp_g2_l1"):
    with pytest.raises(ConfigError, match="config.methods"):
      horizon_methods.parse(bad)


@pytest.mark.parametrize("field,value,match", [
    ("seeds", 0, "config.seeds"),
    ("level", 1.5, "config.level"),
    ("horizons", (2,), "config.horizons"),
    ("methods", ("reinforce", "reinforce"), "config.methods"),
    ("methods", ("grpo_k3",), "config.methods"),      # 64 episodes not K x tasks
    ("methods", ("dqn",), "config.methods"),
])
def test_config_errors_name_the_field(field, value, match):
  config = horizon.default_config()
  config[field] = value
  with pytest.raises(ConfigError, match=match):
    horizon.validate_config(config)


def test_variants_validate_and_the_default_is_small():
  assert study_config("small").to_dict() == horizon.default_config().to_dict()
  for v in ("small", "smoke", "full", "cpu"):
    horizon.validate_config(study_config(v))
  full, cpu = study_config("full"), study_config("cpu")
  assert full.seeds >= 8 and cpu.seeds >= 8 and study_config("small").seeds >= 4
  assert {"grpo_k8", "grpo_k32", "reinforce"} <= set(full.methods)
  assert set(cpu.methods) <= set(full.methods) and set(cpu.horizons) <= set(full.horizons)
  with pytest.raises(ValueError, match="unknown variant"):
    study_config("huge")


# --- end to end, killed and resumed ----------------------------------------------------------

class Killed(Exception):
  pass


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory):
  """The smoke study killed once its first cell is written, then rerun to the end."""
  workdir = str(tmp_path_factory.mktemp("horizon"))
  config = study_config("smoke")
  config.skip_after_failure = False   # run both cells even if the first reaches nothing
  first_lines = []

  def killing_log(line):
    first_lines.append(line)
    if line.startswith("cell 1/") and " done:" in line:
      raise Killed(line)
  with pytest.raises(Killed):
    horizon.run(config, workdir, log=killing_log)
  cells = sorted(os.listdir(os.path.join(workdir, "cells")))
  first_cell = os.path.join(workdir, "cells", cells[0])
  with open(first_cell) as f:
    saved = f.read()
  mtime = os.path.getmtime(first_cell)
  lines = []
  summary = horizon.run(config, workdir, log=lines.append)
  return workdir, config, cells, first_cell, saved, mtime, lines, summary


def test_killed_run_resumes_skipping_finished_cells(resumed_run):
  workdir, config, cells, first_cell, saved, mtime, lines, _ = resumed_run
  assert cells == [f"{config.methods[0]}_T{config.horizons[0]}.json"]
  assert any("cell 1/" in l and "skipped" in l for l in lines), lines
  assert any(l.startswith("learning rates from") for l in lines), lines
  assert not any(l.startswith("cell 1/") and "update" in l for l in lines)
  with open(first_cell) as f:
    assert f.read() == saved
  assert os.path.getmtime(first_cell) == mtime


def test_end_to_end_files_and_consistency(resumed_run):
  workdir, config, _, _, _, _, _, summary = resumed_run
  for name in ("results.csv", "results.md", "summary.json", "summary.md",
               "success_vs_steps.png", "steps_to_level.png", "lr_choice.json"):
    assert os.path.exists(os.path.join(workdir, name)), name
  with open(os.path.join(workdir, "results.csv")) as f:
    rows = f.read().strip().splitlines()
  n_cells = len(config.methods) * len(config.horizons)
  assert len(rows) == 1 + n_cells * config.seeds
  assert report.read_summary(workdir)["methods"].keys() == set(config.methods)
  for m, per_t in summary["cells"].items():
    for t, r in per_t.items():
      assert 0 <= r["reached"] <= r["seeds"] == config.seeds
      assert r["updates_run"] <= r["budget_updates"]
      assert 0.0 <= r["final_success"][0] <= 1.0
  with open(os.path.join(workdir, "lr_choice.json")) as f:
    lr = json.load(f)
  assert lr["chosen"]["grpo"] in config.lr_sweep.candidates
  tr = summary["transfer"]
  assert set(tr["targets"]) == {str(t) for t in config.transfer.targets}
  for r in tr["targets"].values():
    assert 0.0 <= r["success"][0] <= 1.0
  with open(os.path.join(workdir, "summary.md")) as f:
    assert f.read().startswith("# Horizon study")


def test_ppo_cell_records_the_gae_gradient_measurement(tmp_path):
  config = study_config("smoke")
  config.chunk_updates, config.gae_gradient_every = 2, 2
  cfg = horizon_methods.recipe_config("ppo_oracle_g1_l0.95", 4, config, 1e-2, 2)
  assert horizon_methods.measures_gae("ppo_oracle_g1_l0.95")
  assert not horizon_methods.measures_gae("ppo_gru_g1_l1")
  cfg.gae_gradient_every = 2
  out = horizon.train_cell(cfg, [1e-2], config, 2, lambda _: None, "t", False)
  res = horizon.cell_result("ppo_oracle_g1_l0.95", 4, out, config, 2)
  (u, vals), = res["gae_grad"]["gae_grad_cosine"]
  assert u == 0 and len(vals) == config.seeds
  assert all(-1.0 <= v <= 1.0 for v in vals)
  g = horizon_report.gae_grad_summary(res)
  assert g["bias"]["first_update"] == 0 and np.isfinite(g["bias"]["first"][0])
  assert -1.0 <= g["cosine_debiased"]["first"][0] <= 1.0
  assert 0.0 < g["objective"]["first"][0] < 1.0   # exact J of an untrained policy
  path = horizon_report.gae_figure([res], str(tmp_path))
  with open(path, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  assert horizon_report.gae_figure([dict(res, gae_grad={})], str(tmp_path)) is None
  with pytest.raises(ConfigError, match="config.gae_gradient_every"):
    config.gae_gradient_every = 3
    horizon.validate_config(config)
