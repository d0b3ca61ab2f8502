"""The horizon study's noise-along-the-gradient table (credit_jax/experiments/horizon/report.py)
against hand-built cells whose noise follows a known power of T."""
import numpy as np
import pytest

from credit_jax.experiments.horizon import report as horizon_report
from config_files import load_config


def _cell(method, horizon, trace, along, true_norm=0.5, last=None):
  """A cell as horizon.cell_result writes it, with GAE-gradient points at updates 0 and 10."""
  last = last or (trace, along)
  seeds = len(trace)
  return {
      "method": method, "horizon": horizon, "lr": 0.01, "censored": [False] * seeds,
      "updates_to_level": [5.0] * seeds, "env_steps_to_level": [5.0 * horizon] * seeds,
      "env_steps_per_update": horizon, "final_success": [1.0] * seeds,
      "budget_updates": 10, "budget_env_steps": 10 * horizon, "updates_run": 10,
      "compile_s": 1.0, "run_s": 1.0,
      "gae_grad": {
          "gae_grad_variance": [(0, list(trace)), (10, list(last[0]))],
          "gae_grad_variance_along": [(0, list(along)), (10, list(last[1]))],
          "gae_grad_true_norm": [(0, [true_norm] * seeds), (10, [true_norm] * seeds)]}}


def test_noise_slopes_recover_the_power_of_t():
  # trace = 2 T^0.8 * seed factor, along = 0.1 T^-0.3 * seed factor: the least-squares
  # slopes over (seed, T) points are exactly 0.8 and -0.3 (a seed factor is a shift in
  # log space shared by every T, so it leaves the slope alone).
  f = np.array([1.0, 1.5, 0.7])
  cells = [_cell("m", t, 2 * t ** 0.8 * f, 0.1 * t ** -0.3 * f) for t in (10, 100, 1000)]
  out = horizon_report.noise_slopes(cells)
  assert out["variance"]["slope"] == pytest.approx(0.8, abs=1e-9)
  assert out["variance_along"]["slope"] == pytest.approx(-0.3, abs=1e-9)
  assert out["variance"]["horizons"] == [10, 100, 1000]
  assert out["variance"]["points"] == 9


def test_noise_slopes_need_update_0_and_two_horizons():
  one_t = [_cell("m", 10, [1.0, 2.0], [0.1, 0.2])]
  assert horizon_report.noise_slopes(one_t) == {}
  late = _cell("m", 100, [1.0, 2.0], [0.1, 0.2])
  for name in ("gae_grad_variance", "gae_grad_variance_along"):
    late["gae_grad"][name] = late["gae_grad"][name][1:]          # first point at update 10
  assert horizon_report.noise_slopes(one_t + [late]) == {}


def test_noise_table_values_and_order():
  config = load_config("horizon_study", "smoke")
  cells = [_cell("m", 300, [4.0, 4.0], [0.5, 0.5], last=([8.0, 8.0], [0.25, 0.25])),
           _cell("m", 30, [2.0, 2.0], [0.25, 0.25])]
  summary = horizon_report.summarize(cells, None, {"chosen": {}}, config)
  lines = horizon_report.noise_table(summary)
  rows = [l for l in lines if l.startswith("| m |") and l.count("|") == 12]
  assert [r.split("|")[2].strip() for r in rows] == ["30", "300"]     # numeric T order
  cols = [c.split("±")[0].strip() for c in rows[1].split("|")[1:-1]]   # seed means
  # T = 300: along/trace 0.5 / 4 = 0.125 first, 0.25 / 8 last; SNR |grad J|^2 / along
  # = 0.25 / 0.5 first, 0.25 / 0.25 last.
  assert cols[3:11] == ["4", "0.5", "0.125", "0.5", "8", "0.25", "0.0312", "1"]
  slope = summary["methods"]["m"]["noise_slopes_at_update_0"]
  assert slope["variance"]["slope"] == pytest.approx(np.log(2) / np.log(10))
  assert slope["variance_along"]["slope"] == pytest.approx(np.log(2) / np.log(10))
  assert any("Log-log slope" in l for l in lines)
  assert horizon_report.noise_table(horizon_report.summarize(
      [dict(cells[0], gae_grad={})], None, {"chosen": {}}, config)) == []
