"""Exercise 3's protocol (credit_jax/experiments/relabel/study.py): the bootstrap interval
against a plain NumPy loop, per-mode numbers against hand-made curves, and the
summary.json structure of a tiny part (b) run with its learning-rate sweep."""
import numpy as np
import pytest

from credit_jax.experiments import relabel, report

from test_experiments import check_png, load_config


def _bootstrap_loop(values, stat, num_samples, confidence, seed):
  x = np.asarray(values, np.float64)
  rng = np.random.default_rng(seed)
  idx = rng.integers(0, x.shape[0], size=(num_samples, x.shape[0]))
  stats = sorted(stat(x[row]) for row in idx)
  lo_rank = int(np.floor(0.5 * (1 - confidence) * (num_samples - 1)))
  hi_rank = int(np.ceil((1 - 0.5 * (1 - confidence)) * (num_samples - 1)))
  return stat(x), stats[lo_rank], stats[hi_rank]


@pytest.mark.parametrize("values", [
    [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0],
    [10.0, np.inf, 30.0, 20.0, np.inf, 40.0, 50.0, 60.0],
])
def test_bootstrap_interval_against_a_loop(values):
  got = relabel.bootstrap_interval(values, np.median, 500, 0.9, seed=4)
  ref = _bootstrap_loop(values, np.median, 500, 0.9, 4)
  assert got == tuple(float(x) for x in ref)
  assert got[1] <= got[0] <= got[2] and not np.isnan(got[2])


def test_bootstrap_interval_hand_cases():
  assert relabel.bootstrap_interval([7.0] * 8) == (7.0, 7.0, 7.0)
  # Every seed infinite: the statistic and both bounds stay infinite, never NaN.
  assert relabel.bootstrap_interval([np.inf] * 4) == (np.inf, np.inf, np.inf)
  # Paired columns: resampled rows keep their pairing, so a constant ratio stays exact.
  pair = np.stack([np.arange(1.0, 9.0), 2.0 * np.arange(1.0, 9.0)], 1)
  assert relabel.bootstrap_interval(pair, relabel.study._median_ratio) == (0.5, 0.5, 0.5)
  with pytest.raises(ValueError, match="values"):
    relabel.bootstrap_interval(np.zeros((0,)))


def test_mode_results_on_hand_curves():
  cfg = load_config("relabel", "small")
  cfg.smooth, cfg.success_level, cfg.bootstrap_samples = 1, 0.5, 300
  # Seeds reach 0.5 at updates 2, 3 and never; per update 10 env steps.
  success = np.array([[0.0, 0.6, 0.7, 0.8],
                      [0.0, 0.1, 0.5, 0.9],
                      [0.0, 0.0, 0.1, 0.2]])
  base = np.array([40.0, np.inf, np.inf])
  m = relabel.mode_results(success, 10, cfg, 3e-3, base)
  assert m["steps_to_level_per_seed"] == [20, 30, None] and m["seeds_reached"] == 2
  assert m["steps_to_level"] == 30.0 and m["lr"] == 3e-3 and m["seeds"] == 3
  lo, hi = m["steps_to_level_interval"]
  assert lo == 20.0 and hi is None                    # a resample of two 'never' seeds
  # Ratio of medians with every seed censored at the budget (5 updates = 50 steps):
  # median(20, 30, 50) / median(40, 50, 50) = 30 / 50, and 'none''s median is
  # 'never', so it is an upper bound.
  np.testing.assert_allclose(m["ratio_to_none"], 0.6)
  assert m["ratio_is_upper_bound"]
  rlo, rhi = m["ratio_to_none_interval"]
  assert rlo <= 0.6 <= rhi
  np.testing.assert_allclose(m["final_success_mean"], success[:, -1].mean())
  mean, half = report.t_interval(success[:, -1])
  np.testing.assert_allclose(m["final_success_interval"], half)
  np.testing.assert_allclose(m["curve_mean"], np.round(success.mean(0), 4))
  assert "ratio_to_none" not in relabel.mode_results(success, 10, cfg, 1e-3)


def test_tiny_part_b_summary_structure(tmp_path):
  config = load_config("relabel", "small")
  config.parts, config.seeds, config.bootstrap_samples = "b", 2, 100
  config.lr_grid, config.sweep_seeds, config.sweep_update_fraction = (1e-3, 1e-2), 1, 0.5
  grid = config.grpo.goalgrid
  grid.env_kwargs.size, grid.env_kwargs.max_steps_in_episode, grid.horizon = 3, 4, 4
  grid.num_tasks, grid.group_size, grid.num_updates, grid.num_minibatches = 2, 2, 6, 1
  grid.update_epochs, grid.network.hidden_sizes = 1, (8,)
  del config.grpo["textedit"]
  summary = relabel.run(config, str(tmp_path), log=lambda _: None)
  assert report.read_summary(str(tmp_path))["grpo"] == summary["grpo"]
  assert summary["seeds"] == 2 and summary["lr_grid"] == [1e-3, 1e-2]
  entry = summary["grpo"]["goalgrid"]
  sweep = entry["lr_sweep"]
  assert sweep["grid"] == [1e-3, 1e-2] and sweep["seeds"] == 1 and sweep["updates"] == 5
  for mode in config.modes:
    auc = sweep["auc"][mode]
    assert set(auc) == {"0.001", "0.01"} and all(0 <= v <= 1 for v in auc.values())
    m = entry["modes"][mode]
    # The chosen lr is the sweep's best for that mode.
    assert m["lr"] == float(max(auc, key=auc.get))
    assert len(m["steps_to_level_interval"]) == 2 and m["seeds"] == 2
    assert len(m["curve_mean"]) == len(m["curve_interval"]) == grid.num_updates
    for key in ("final_success_mean", "final_success_interval", "iw_mean"):
      assert np.isfinite(m[key]), key
  check_png(str(tmp_path / "grpo_goalgrid.png"), min_bytes=1_000)
  text = (tmp_path / "summary.md").read_text()
  assert "Learning-rate sweep" in text and "Settings measured earlier" in text
  for setting, *_ in relabel.EARLIER_SETTINGS:
    assert setting in text


def test_nulls_variant_is_the_earlier_null_setting():
  config = load_config("relabel", "nulls")
  relabel.validate_config(config)
  assert config.parts == "b" and set(config.grpo) == {"goalgrid_corners"}
  corners = config.grpo.goalgrid_corners
  assert corners.env_kwargs.to_dict() == {"size": 15, "max_steps_in_episode": 30}
  assert corners.horizon == 30 and corners.env_name == "GoalGrid-v0"
  assert any(s.startswith("GoalGrid 15x15, 4 corner goals") for s, *_ in
             relabel.EARLIER_SETTINGS)
