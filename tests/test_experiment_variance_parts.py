"""Experiment 1's split of the gradient variance (trace, pivotal parameters, along the
exact gradient): exact.gradient_variance_parts against NumPy, the pivotal mask
against the exact gradient, and the summary.json structure of a tiny run."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import diagnostics as dg
from credit_jax.experiments.grpo_degradation import degenerate_groups
from credit_jax.experiments.variance_scaling import exact
from credit_jax.runtime import metrics
from credit_jax.experiments import report, variance_scaling

from test_experiments import check_png, load_config


def _numpy_parts(grads, true, mask):
  g = np.asarray(grads, np.float64)
  u = np.asarray(true, np.float64) / np.linalg.norm(true)
  proj = g @ u
  along = np.sum((proj - proj.mean()) ** 2) / (len(proj) - 1)
  per = np.array([np.sum((g[:, j] - g[:, j].mean()) ** 2) / (len(g) - 1)
                  for j in range(g.shape[1])])
  return {"variance_along": along, "variance_masked": per[mask].sum(),
          "variance_unmasked": per[~mask].sum(),
          "snr_along": np.sum(np.asarray(true, np.float64) ** 2) / along}


def test_variance_parts_against_numpy():
  grads = jax.random.normal(jax.random.key(3), (50, 6)) * jnp.arange(1.0, 7.0)
  true = jnp.array([0.5, -1.0, 0.0, 2.0, 0.0, 0.0])
  mask = np.array([True, True, False, True, False, False])
  got = exact.gradient_variance_parts(grads, true, jnp.asarray(mask))
  ref = _numpy_parts(grads, true, mask)
  for k, v in ref.items():
    np.testing.assert_allclose(float(got[k]), v, rtol=1e-5, err_msg=k)
  # The two parts add up to gradient_stats' trace.
  trace = dg.gradient_stats(grads, true)["variance"]
  np.testing.assert_allclose(float(got["variance_masked"] + got["variance_unmasked"]),
                             float(trace), rtol=1e-5)
  # jit and vmap (over independent batches) give the same numbers.
  jitted = jax.jit(exact.gradient_variance_parts)(grads, true, jnp.asarray(mask))
  np.testing.assert_allclose(float(jitted["variance_along"]), ref["variance_along"],
                             rtol=1e-5)
  batched = jax.vmap(exact.gradient_variance_parts, in_axes=(0, None, None))(
      jnp.stack([grads, 2.0 * grads]), true, jnp.asarray(mask))
  np.testing.assert_allclose(np.asarray(batched["variance_along"]),
                             [ref["variance_along"], 4.0 * ref["variance_along"]], rtol=1e-5)


def test_variance_parts_hand_case_and_errors():
  # Two estimates differing only along x: Var along x = 2 (ddof 1), 0 along y.
  grads = jnp.array([[1.0, 5.0], [3.0, 5.0]])
  out = exact.gradient_variance_parts(grads, jnp.array([2.0, 0.0]), jnp.array([True, False]))
  assert float(out["variance_along"]) == 2.0 and float(out["variance_masked"]) == 2.0
  assert float(out["variance_unmasked"]) == 0.0 and float(out["snr_along"]) == 2.0
  out = exact.gradient_variance_parts(grads, jnp.array([0.0, 1.0]), jnp.array([False, True]))
  assert float(out["variance_along"]) == 0.0 and float(out["variance_unmasked"]) == 2.0
  zero = exact.gradient_variance_parts(grads, jnp.zeros(2), jnp.array([True, True]))
  assert np.isnan(float(zero["variance_along"]))
  with pytest.raises(ValueError, match="mask"):
    exact.gradient_variance_parts(grads, jnp.ones(2), jnp.ones(3, bool))
  with pytest.raises(ValueError, match="N >= 2"):
    exact.gradient_variance_parts(grads[:1], jnp.ones(2), jnp.ones(2, bool))


@pytest.mark.parametrize("reward", ["terminal", "partial"])
def test_pivotal_mask_holds_all_of_the_exact_gradient(reward):
  mask = np.asarray(exact.keychain_pivotal_mask(4))
  assert mask.shape == (5, 4) and not mask[0].any() and mask[1:].all()
  for logits in (jnp.zeros((5, 4)), degenerate_groups.biased_logits(4, 0.6)):
    true = np.asarray(exact.keychain_true_gradient(logits, 2, reward))
    assert np.all(true[~mask] == 0.0) and np.abs(true[mask]).sum() > 0


def test_tiny_run_summary_structure(tmp_path):
  config = load_config("variance_scaling", "smoke")
  config.num_trajectories, config.num_fit_trajectories, config.seeds = 8, 4, 2
  summary = variance_scaling.run(config, str(tmp_path), log=lambda _: None)
  assert report.read_summary(str(tmp_path))["slope_by_view"] == summary["slope_by_view"]
  names = variance_scaling.scheme_names(config.discounts)
  for mode in variance_scaling.REWARD_MODES:
    assert set(summary["slope_by_view"][mode]) == {"trace", "pivotal", "along"}
    for view in ("trace", "pivotal", "along"):
      assert set(summary["slope_by_view"][mode][view]) == set(names)
    assert summary["slope_by_view"][mode]["trace"] == summary[
        "slope" if mode == "terminal" else "slope_partial_reward"]
    by_t = summary["terminal_estimator_by_T"][mode]
    assert by_t["horizon"] == list(config.horizons)
    for key in ("variance", "variance_pivotal", "variance_distractor", "variance_along",
                "variance_along_se", "snr_along"):
      assert len(by_t[key]) == len(config.horizons) and all(x > 0 for x in by_t[key])
  records = metrics.read_jsonl(os.path.join(str(tmp_path), metrics.METRICS_FILE))
  for r in records:
    # Seed means of the two parts add up to the seed mean of the trace.
    np.testing.assert_allclose(r["variance_pivotal"] + r["variance_distractor"],
                               r["variance"], rtol=1e-4)
    assert r["variance_along"] <= r["variance_pivotal"] * (1 + 1e-5)  # u lies in the mask
  check_png(os.path.join(str(tmp_path), "variance_vs_horizon.png"))
  text = (tmp_path / "summary.md").read_text()
  assert "## Where the variance lies" in text and "learning speed" in text
