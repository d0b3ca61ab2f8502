"""Smoke tests of the experiment scripts: each runs its smallest variant into a tmp dir.

Both scripts start at once (they are mostly single-threaded compiles), so the pair costs
about as long as the slower one. The checks are about the outputs being there and sane;
the experiments' scientific targets are measured by their full configs.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from credit_jax import diagnostics as dg
from credit_jax import metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = {"variance": "variance_scaling", "grpo": "grpo_degradation"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _command(name, workdir, *extra):
  return [sys.executable, os.path.join(ROOT, "scripts", f"{name}.py"),
          f"--config={os.path.join(ROOT, 'configs', name + '.py')}:smoke",
          f"--workdir={workdir}", *extra]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  procs = {}
  for key, name in SCRIPTS.items():
    workdir = str(tmp_path_factory.mktemp(name))
    procs[key] = (workdir, subprocess.Popen(_command(name, workdir), env=env, cwd=ROOT,
                                            stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True))
  out = {}
  for key, (workdir, proc) in procs.items():
    log, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, log
    out[key] = (workdir, log)
  return out


def _check_png(path):
  with open(path, "rb") as f:
    assert f.read(8) == PNG_MAGIC, path
  assert os.path.getsize(path) > 10_000, path


def test_variance_scaling_smoke(runs):
  workdir, log = runs["variance"]
  assert log.count("horizon ") >= 2   # a progress line per horizon
  for png in ("variance_vs_horizon.png", "snr_vs_horizon.png",
              "credit_accuracy_vs_horizon.png"):
    _check_png(os.path.join(workdir, png))
  with open(os.path.join(workdir, "summary.json")) as f:
    summary = json.load(f)
  schemes = ["terminal", "rtg_gamma1", "rtg_gamma0.99", "gae_zero_gamma1",
             "gae_zero_gamma0.99", "gae_fitted_gamma1", "gae_fitted_gamma0.99"]
  assert sorted(summary["slope"]) == sorted(schemes)
  assert all(np.isfinite(v) for v in summary["slope"].values())
  # With the terminal-only reward and gamma = 1 the two estimators are the same numbers.
  assert summary["slope"]["terminal"] == summary["slope"]["rtg_gamma1"]
  assert summary["targets"]["terminal_equals_rtg_gamma1_terminal_reward"]["met"]
  records = metrics.read_jsonl(os.path.join(workdir, metrics.METRICS_FILE))
  assert len(records) == len(summary["horizons"]) * 2 * len(schemes)
  for r in records:
    assert r["variance"] > 0 and r["snr"] > 0 and np.isfinite(r["cosine"])
    assert r["true_norm_sq"] > 0 and 0 <= r["credit_accuracy"] <= 1
  # Spread evenly, the terminal reward credits pivotal steps exactly k/T of the time.
  for r in records:
    if r["scheme"] == "terminal":
      np.testing.assert_allclose(r["credit_accuracy"],
                                 summary["num_pivotal"] / r["horizon"], rtol=1e-5)
  with open(os.path.join(workdir, "summary.md")) as f:
    text = f.read()
  assert "slope" in text and "identical estimates" in text


def test_grpo_degradation_smoke(runs):
  workdir, log = runs["grpo"]
  assert log.count("point ") >= 3   # a progress line per difficulty point
  _check_png(os.path.join(workdir, "degenerate_fraction.png"))
  with open(os.path.join(workdir, "summary.json")) as f:
    summary = json.load(f)
  points = summary["points"]
  assert len(points) == 3 * len(summary["group_sizes"])
  for p in points:
    k, a, q = p["num_pivotal"], p["num_actions"], p["q"]
    np.testing.assert_allclose(p["success_analytic"], q ** k, rtol=1e-6)
    np.testing.assert_allclose(
        p["degenerate_analytic"],
        float(dg.analytic_degenerate_fraction(q ** k, p["group_size"])), rtol=1e-6)
    assert 0.0 <= p["degenerate_measured"] <= 1.0 and p["se"] > 0
    # 256 groups per point: a sanity bound; the 3-SE target is the small config's.
    assert abs(p["z"]) < 4.0, p
  lo, hi = summary["informative_range"]["8"]
  assert 0.08 < lo < 0.09 and 0.91 < hi < 0.92
  records = metrics.read_jsonl(os.path.join(workdir, metrics.METRICS_FILE))
  assert len(records) == len(points)


def test_bad_config_fails_with_the_field_named(tmp_path):
  proc = subprocess.run(
      _command("variance_scaling", str(tmp_path), "--config.num_actions=3"),
      env=dict(os.environ, JAX_PLATFORMS="cpu"), cwd=ROOT, capture_output=True,
      text=True, timeout=120)
  assert proc.returncode != 0
  assert "config.num_actions" in proc.stderr
