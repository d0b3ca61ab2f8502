"""The horizon study's re-analysis against hand-computed cases."""
import json
import math
import os

import pytest

from credit_jax import survival
from credit_jax.experiments.horizon import reanalysis as ra


def test_rmst_of_a_cell_censored_at_the_budget_is_its_censored_mean():
  # Two seeds reach at 12 and 30, two are censored at 150. By hand: S = 1 on [0, 12),
  # 3/4 on [12, 30), 1/2 on [30, 150]: 12 + 0.75 * 18 + 0.5 * 120 = 85.5, which is also
  # the mean of (12, 30, 150, 150).
  times, events = [12.0, 30.0, 150.0, 150.0], [True, True, False, False]
  assert survival.restricted_mean(times, events, 150.0) == pytest.approx(85.5)
  c = ("m", 100, 0.01, 2, 85.5, 0.0, 0.5, 0.0, 150)
  assert ra.check_cell(c, seeds=4, budget=150) == pytest.approx(85.5)


def test_check_cell_rejects_impossible_aggregates():
  with pytest.raises(ValueError, match="impossible"):   # 2 censored already give 75
    ra.check_cell(("m", 100, 0.01, 2, 70.0, 1.0, 0.5, 0.1, 150), seeds=4, budget=150)
  with pytest.raises(ValueError, match="updates run"):   # censored but stopped early
    ra.check_cell(("m", 100, 0.01, 3, 60.0, 1.0, 0.5, 0.1, 80), seeds=4, budget=150)
  with pytest.raises(ValueError, match="half-width"):
    ra.check_cell(("m", 100, 0.01, 0, 150.0, 2.0, 0.1, 0.1, 150), seeds=4, budget=150)


def test_every_transcribed_cell_is_possible():
  for c in ra.CELLS:
    ra.check_cell(c)
  assert len(ra.cell_table()) == len(ra.CELLS) + 2
  pivot = ra.cell_pivot()
  row = [r for r in pivot if r.startswith("| ppo_oracle_g1_l0.95 ")][0]
  assert "**5/8** · 86.2 · final 0.73 A" in row and "8/8 · 10.9 ± 1.2 A" in row
  assert "**0/8** · ≥ 150" in [r for r in pivot if r.startswith("| ppo_mlp_g1_l0.95 ")][0]
  assert "8/8 · 14.9 ± 0.7 S" in [r for r in pivot if r.startswith("| grpo_k8 ")][0]


def test_local_slope_by_hand():
  s, h = ra.local_slope(10, 10.0, 1.0, 100, 20.0, 4.0)
  assert s == pytest.approx(math.log10(2))                    # 0.30103
  assert h == pytest.approx((0.1 + 0.2) / math.log(10))        # 0.13029
  rows = ra.log_slopes([(10, 10.0, 1.0), (100, 20.0, 4.0), (1000, 20.0, 2.0)])
  assert [r[:2] for r in rows] == [(10, 100), (100, 1000)]
  assert rows[1][2] == pytest.approx(0.0)
  with pytest.raises(ValueError):
    ra.local_slope(100, 1.0, 0.1, 10, 2.0, 0.1)


def test_grpo_slopes_are_the_printed_means_ratios():
  row = [r for r in ra.slope_table(("grpo_k8",)) if r.startswith("| grpo_k8")][0]
  # log(43.6 / 21.6) / log(1000 / 300) = 0.583
  assert "300→1000: 0.58 ±" in row and "10→30: 0.04 ±" in row


def test_fisher_and_wilson_by_hand():
  # 0/8 vs 5/8: hypergeometric P(0) = P(5) = C(8,5) / C(16,5) = 56 / 4368; every other
  # table is more likely, so the two-sided p is 112 / 4368 = 0.02564.
  assert survival.fisher_exact(5, 8, 0, 8) == pytest.approx(112 / 4368)
  row = [r for r in ra.comparison_table() if "T=1000: oracle" in r][0]
  assert "| 0.026 |" in row
  # Wilson 0/8: centre = half = (z^2 / 16) / (1 + z^2 / 8) = 0.1622, so [0, 0.3244].
  assert "0/8 [0.00, 0.32]" in row


def test_tuning_marks():
  assert ra.tuning("grpo_k8", 100) == "S"
  assert ra.tuning("grpo_k8", 300) == "T"
  assert ra.tuning("grpo_k32", 100) == "A"
  assert ra.tuning("ppo_oracle_g1_l0.95", 1000) == "A"
  assert ra.tuning("reinforce_lr0.01", 300) == "R"


def test_probe_counts_on_hand_built_cells(tmp_path):
  os.makedirs(tmp_path / "cells")
  per_seed = {"grpo_k8": [1.0, 0.95, 0.2], "ppo_l1": [0.9, 0.92, 0.97],
              "ppo_l0.95": [0.1, 0.0, 0.89]}
  for m, v in per_seed.items():
    with open(tmp_path / "cells" / f"{m}.json", "w") as f:
      json.dump({"cell": f"keychain/default/T100/{m}", "seeds": 3, "updates": 7,
                 "success_per_seed": v}, f)
  rows = ra.probe_counts(str(tmp_path))
  # 3/3 vs 0/3: p = 2 / C(6,3) = 0.1
  assert rows[2] == "| keychain/default/T100 | 7 | 2/3 | 3/3 | 0/3 | 0.1 |"
  with pytest.raises(ValueError):
    ra.probe_counts(str(tmp_path / "nothing"))
