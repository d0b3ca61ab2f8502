"""credit_jax/experiments/survival.py against hand-computed Kaplan-Meier cases and brute force."""
import numpy as np
import pytest

from credit_jax.experiments import survival
from credit_jax.experiments.horizon_answer import part_b
from credit_jax.experiments.probes.credit_horizon import first_crossing

# Seeds reached the threshold at 2, 3 and 5; seeds censored at 3 and 8.
TIMES = [2.0, 3.0, 3.0, 5.0, 8.0]
EVENTS = [True, True, False, True, False]


def test_kaplan_meier_by_hand():
  t, s = survival.kaplan_meier(TIMES, EVENTS)
  # at 2: 5 at risk, 1 event -> 4/5; at 3: 4 at risk (the censored-at-3 seed counts),
  # 1 event -> 0.8 * 3/4; at 5: 2 at risk, 1 event -> 0.6 * 1/2.
  np.testing.assert_allclose(t, [2.0, 3.0, 5.0])
  np.testing.assert_allclose(s, [0.8, 0.6, 0.3])
  np.testing.assert_allclose(part_b.survival_at(TIMES, EVENTS, [0, 2, 2.5, 4, 9]),
                             [1.0, 0.8, 0.8, 0.6, 0.3])


def test_restricted_mean_and_median_by_hand():
  # area: 2 * 1 + 1 * 0.8 + 2 * 0.6 + 3 * 0.3 = 4.9
  assert survival.restricted_mean(TIMES, EVENTS, 8.0) == pytest.approx(4.9)
  assert survival.restricted_mean(TIMES, EVENTS, 2.5) == pytest.approx(2.4)
  assert survival.km_quantile(TIMES, EVENTS, 0.5) == 5.0
  assert survival.km_quantile(TIMES, EVENTS, 0.2) == 2.0
  assert survival.km_quantile([4.0, 4.0], [False, False]) == float("inf")


def test_no_censoring_is_the_plain_mean():
  t = np.array([3.0, 1.0, 7.0, 2.0])
  assert survival.restricted_mean(t, np.ones(4, bool), 10.0) == pytest.approx(t.mean())


def test_bootstrap_interval_covers_and_pairs():
  rng = np.random.default_rng(1)
  x = rng.normal(5.0, 1.0, 200)
  est, low, high = survival.bootstrap_interval(np.mean, x, num=500)
  assert low < 5.0 < high and low < est < high
  # paired: the difference of identical arms is exactly zero in every resample
  est, low, high = part_b.paired_rmst_difference(TIMES, EVENTS, TIMES, EVENTS, 8.0,
                                                   num=200)
  assert (est, low, high) == (0.0, 0.0, 0.0)
  with pytest.raises(ValueError, match="share their first axis"):
    survival.bootstrap_interval(lambda a, b: 0.0, np.ones(3), np.ones(4))


def test_first_crossing_censors_seeds_that_never_reach():
  curve = np.array([[0.1, 0.95, 0.2, 0.99], [0.1, 0.2, 0.3, 0.4]])
  steps = np.array([10, 20, 30, 40])
  t, e = first_crossing(curve, steps, 0.9)
  np.testing.assert_array_equal(t, [20, 40]); np.testing.assert_array_equal(e, [1, 0])
  t, e = first_crossing(curve, steps, 0.9, smooth=2)   # trailing mean of 2
  np.testing.assert_array_equal(t, [40, 40]); np.testing.assert_array_equal(e, [0, 0])


def test_local_slopes_recover_piecewise_powers():
  h = np.array([10.0, 100.0, 1000.0])
  v = np.array([[1.0, 1.0, 10.0], [2.0, 2.0, 20.0]])   # flat, then slope 1
  out = survival.local_slopes(h, v, num=100)
  assert out[0]["slope"] == pytest.approx(0.0) and out[1]["slope"] == pytest.approx(1.0)
  assert out[1]["low"] == pytest.approx(1.0) and out[1]["high"] == pytest.approx(1.0)


def test_fisher_exact_matches_hand_value():
  # 5/8 vs 0/8: p = 2 * C(8,5) C(8,0) / C(16,5) = 2 * 56 / 4368
  assert survival.fisher_exact(5, 8, 0, 8) == pytest.approx(2 * 56 / 4368)


def test_input_checks():
  with pytest.raises(ValueError, match="one shape"):
    survival.kaplan_meier([1.0, 2.0], [True])
  with pytest.raises(ValueError, match="tau"):
    survival.restricted_mean(TIMES, EVENTS, 0.0)
