"""Tests for credit_jax.experiments: the shared report helpers, the two measurement
experiments (variance scaling, GRPO degradation) run in-process on their smoke configs,
and every experiment script's thin main run as a user runs it.

The experiments' scientific targets are measured by their full configs (README); these
check that the outputs are there, consistent and match independent references.
"""
import importlib
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax.experiments.grpo_degradation import degenerate_groups
from credit_jax.runtime import metrics
from credit_jax.algos import ConfigError
from credit_jax import experiments
from credit_jax.experiments import grpo_degradation, report, variance_scaling
from config_files import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def check_png(path, min_bytes=10_000):
  with open(path, "rb") as f:
    assert f.read(8) == PNG_MAGIC, path
  assert os.path.getsize(path) > min_bytes, path


# --- the experiment contract -------------------------------------------------------------

@pytest.mark.parametrize("name", experiments.EXPERIMENTS)
def test_every_experiment_has_the_contract_and_a_config_file(name):
  module = experiments.module(name)
  for fn in ("default_config", "validate_config", "num_seeds", "run"):
    assert callable(getattr(module, fn)), (name, fn)
  default = module.default_config()
  module.validate_config(default)
  assert module.num_seeds(default) >= 1
  # configs/<name>.py starts from it: its default variant is the same config.
  assert load_config(name).to_dict() == default.to_dict()
  with open(os.path.join(ROOT, "scripts", f"{name}.py")) as f:
    script = f.read()
  # the script's one call, naming the module by its own name or the experiment's
  assert (f"cli.main({experiments.EXPERIMENTS[name].rsplit('.', 1)[1]})" in script
          or f"cli.main({name})" in script), name


# --- report ------------------------------------------------------------------------------

def test_table_lines_and_row_check():
  assert report.table(("a", "b"), [(1, "x"), ("2", 3.5)]) == [
      "| a | b |", "|---|---|", "| 1 | x |", "| 2 | 3.5 |"]
  with pytest.raises(ValueError, match="row 1 has 1 cells, the header 2"):
    report.table(("a", "b"), [(1, 2), (3,)])


def test_t_interval_against_hand_computed_values_over_an_axis():
  # Seeds on axis 1; t(0.975, df=2) = 4.302653, sd of (1, 2, 3) = 1.
  mean, half = report.t_interval(np.array([[1.0, 2.0, 3.0], [2.0, 2.0, 2.0]]), axis=1)
  np.testing.assert_allclose(mean, [2.0, 2.0])
  np.testing.assert_allclose(half, [4.302653 / np.sqrt(3), 0.0], rtol=1e-6)
  mean, half = report.t_interval([5.0])
  assert mean == 5.0 and np.isnan(half)


def test_write_summary_round_trips_numpy_values(tmp_path):
  summary = {"slope": np.float32(0.5), "curve": np.arange(3), "n": np.int64(7), "ok": True}
  out = report.write_summary(str(tmp_path / "w"), summary, "# title")
  assert out is summary
  assert report.read_summary(str(tmp_path / "w")) == {
      "slope": 0.5, "curve": [0, 1, 2], "n": 7, "ok": True}
  assert (tmp_path / "w" / "summary.md").read_text() == "# title\n"
  with pytest.raises(ValueError, match="summary must be a dict"):
    report.write_summary(str(tmp_path), [1], "")
  with pytest.raises(TypeError, match="not JSON serialisable"):
    report.write_summary(str(tmp_path), {"x": object()}, "")


def test_figure_writes_a_png_without_pyplot(tmp_path):
  fig, axes = report.figure(2, 3, figsize=(6, 4))
  assert axes.shape == (2, 3)
  axes[1, 2].plot([1, 2, 3], [3, 1, 2])
  path = report.save_figure(fig, str(tmp_path), "f.png", dpi=50)
  assert path == str(tmp_path / "f.png")
  check_png(path, min_bytes=1_000)


def test_compile_and_run_matches_jit_and_times_both_parts():
  fn = lambda x, y: (x * y, jnp.sum(x))  # noqa: E731
  x, y = jnp.arange(4.0), jnp.float32(3.0)
  (prod, total), compile_s, run_s = report.compile_and_run(fn, x, y)
  assert isinstance(prod, np.ndarray)    # on the host
  np.testing.assert_array_equal(prod, [0.0, 3.0, 6.0, 9.0])
  assert float(total) == 6.0
  assert compile_s > 0.0 and run_s >= 0.0
  watch = report.Stopwatch()
  first = watch.lap()
  assert 0.0 <= first <= watch.seconds()
  assert report.wall_time(3725.4) == "Wall time 1:02:05."


# --- variance scaling --------------------------------------------------------------------

@pytest.fixture(scope="module")
def variance_run(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("variance_scaling"))
  lines = []
  summary = variance_scaling.run(load_config("variance_scaling", "smoke"), workdir,
                                 log=lines.append)
  return workdir, summary, lines


def test_variance_scaling_smoke(variance_run):
  workdir, summary, lines = variance_run
  assert sum(line.startswith("horizon ") for line in lines) == 2   # one per horizon
  for png in ("variance_vs_horizon.png", "snr_vs_horizon.png",
              "credit_accuracy_vs_horizon.png"):
    check_png(os.path.join(workdir, png))
  assert report.read_summary(workdir) == json.loads(json.dumps(summary))
  schemes = ["terminal", "rtg_gamma1", "rtg_gamma0.99", "gae_zero_gamma1",
             "gae_zero_gamma0.99", "gae_fitted_gamma1", "gae_fitted_gamma0.99"]
  assert variance_scaling.scheme_names((1.0, 0.99)) == schemes
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
  # The slopes are least-squares fits of log variance on log T over the records.
  for mode, key in (("terminal", "slope"), ("partial", "slope_partial_reward")):
    rows = sorted((r for r in records if r["reward"] == mode and r["scheme"] == "terminal"),
                  key=lambda r: r["horizon"])
    t, v = (np.log([r[k] for r in rows]) for k in ("horizon", "variance"))
    np.testing.assert_allclose(summary[key]["terminal"], np.polyfit(t, v, 1)[0], rtol=1e-5)
  text = (os.path.join(workdir, "summary.md"))
  with open(text) as f:
    text = f.read()
  assert "slope" in text and "identical estimates" in text and "Wall time" in text


def test_partial_reward_pays_one_over_k_per_right_key():
  class Traj:   # the two fields step_rewards reads
    rewards = jnp.array([[0.0, 0.0], [0.0, 1.0]])
    info = {"correct": jnp.array([[True, False], [True, True]])}
  np.testing.assert_array_equal(variance_scaling.step_rewards(Traj, "terminal", 2),
                                Traj.rewards)
  np.testing.assert_array_equal(variance_scaling.step_rewards(Traj, "partial", 2),
                                [[0.5, 0.0], [0.5, 0.5]])


# --- GRPO degradation --------------------------------------------------------------------

def test_grpo_degradation_smoke(tmp_path):
  lines = []
  summary = grpo_degradation.run(load_config("grpo_degradation", "smoke"), str(tmp_path),
                                 log=lines.append)
  assert sum(line.startswith("point ") for line in lines) == 3   # one per difficulty
  check_png(str(tmp_path / "degenerate_fraction.png"))
  points = summary["points"]
  assert len(points) == 3 * len(summary["group_sizes"])
  for p in points:
    k, q = p["num_pivotal"], p["q"]
    np.testing.assert_allclose(p["success_analytic"], q ** k, rtol=1e-6)
    np.testing.assert_allclose(p["degenerate_analytic"],
                               p["success_analytic"] ** p["group_size"]
                               + (1 - p["success_analytic"]) ** p["group_size"], rtol=1e-6)
    assert 0.0 <= p["degenerate_measured"] <= 1.0 and p["se"] > 0
    # 256 groups per point: a sanity bound; the 3-SE target is the small config's.
    assert abs(p["z"]) < 4.0, p
  lo, hi = summary["informative_range"]["8"]
  assert 0.08 < lo < 0.09 and 0.91 < hi < 0.92
  assert (lo, hi) == tuple(degenerate_groups.informative_success_range(8, 0.5))
  records = metrics.read_jsonl(str(tmp_path / metrics.METRICS_FILE))
  assert len(records) == len(points)
  assert report.read_summary(str(tmp_path))["max_abs_z"] == summary["max_abs_z"]


def test_point_records_against_hand_computed_values():
  config = load_config("grpo_degradation", "smoke")
  config.group_sizes, config.seeds, config.num_tasks = (2,), 2, 8
  out = {"success": np.array([0.5, 0.25]), "degenerate": np.array([[0.5, 0.25]])}
  (rec,) = grpo_degradation.point_records(4, 1, 2, 0.0, out, config, first_index=9)
  # q = 0: the uniform policy over A = 2, p = 1/2; K = 2: p^2 + (1-p)^2 = 1/2.
  assert rec["update"] == 9 and rec["point"] == 4 and rec["policy"] == "uniform"
  assert rec["success_analytic"] == 0.5 and rec["degenerate_analytic"] == 0.5
  assert rec["degenerate_measured"] == 0.375 and rec["success_measured"] == 0.375
  se = np.sqrt(0.5 * 0.5 / 16)
  np.testing.assert_allclose(rec["se"], se)
  np.testing.assert_allclose(rec["z"], -0.125 / se)
  np.testing.assert_allclose(rec["se_seeds"], np.std([0.5, 0.25], ddof=1) / np.sqrt(2))


@pytest.mark.parametrize("experiment,field,value", [
    (variance_scaling, "num_actions", 3),
    (variance_scaling, "seeds_per_chunk", 3),
    (grpo_degradation, "headline_group_size", 5),
    (grpo_degradation, "difficulties", ((11, 2, 0.0),)),
])
def test_config_errors_name_the_field(experiment, field, value):
  name = experiment.__name__.rsplit(".", 1)[-1]
  config = load_config(name, "smoke")
  config[field] = value
  with pytest.raises(ConfigError, match=f"config.{field}"):
    experiment.validate_config(config)


# --- the scripts, as a user runs them ----------------------------------------------------

# The smallest run of each script: its smallest variant shrunk further from the command
# line (which also checks that the thin mains pass overrides through).
SCRIPT_RUNS = {
    "variance_scaling": ("smoke", ["--config.horizons=(2,4)", "--config.min_slope_horizon=2",
                                   "--config.num_pivotal=1", "--config.num_actions=2",
                                   "--config.seeds=2", "--config.num_trajectories=8",
                                   "--config.num_fit_trajectories=4"],
                         ["variance_vs_horizon.png"]),
    "grpo_degradation": ("smoke", ["--config.difficulties=((1,2,0.0),)", "--config.seeds=2",
                                   "--config.num_tasks=8"], ["degenerate_fraction.png"]),
    "tree_search": ("smoke", ["--config.parts=a", "--config.points=(('uniform',1),)",
                              "--config.num_tasks=2", "--config.search.simulations=4"],
                    ["search_vs_baselines.png"]),
    "relabel": ("small", ["--config.parts=a", "--config.bitflip_bits=(2,)",
                            "--config.cycles_per_bit=1", "--config.seeds=1",
                            "--config.dqn.grad_steps=1"], ["bitflip.png"]),
    "horizon_study": ("smoke", ["--config.horizons=(4,)", "--config.lr_sweep.families=()",
                                "--config.lr_sweep.methods=()", "--config.transfer.method="],
                      ["success_vs_steps.png", "steps_to_level.png"]),
}


def _script(name, workdir, variant, *extra):
  return [sys.executable, os.path.join(ROOT, "scripts", f"{name}.py"),
          f"--config={os.path.join(ROOT, 'configs', name + '.py')}:{variant}",
          f"--workdir={workdir}", *extra]


def _env():
  return dict(os.environ, JAX_PLATFORMS="cpu",
              PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))


@pytest.fixture(scope="module")
def script_runs(tmp_path_factory):
  """All four scripts started at once (mostly single-threaded compiles)."""
  procs = {}
  for name, (variant, extra, _) in SCRIPT_RUNS.items():
    workdir = str(tmp_path_factory.mktemp(name))
    procs[name] = (workdir, subprocess.Popen(
        _script(name, workdir, variant, *extra), env=_env(), cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
  out = {}
  for name, (workdir, proc) in procs.items():
    log, _ = proc.communicate(timeout=600)
    out[name] = (workdir, proc.returncode, log)
  return out


@pytest.mark.parametrize("name", sorted(SCRIPT_RUNS))
def test_script_main_runs(script_runs, name):
  workdir, returncode, log = script_runs[name]
  assert returncode == 0, log
  for png in SCRIPT_RUNS[name][2]:
    check_png(os.path.join(workdir, png), min_bytes=1_000)
  summary = report.read_summary(workdir)
  assert summary["wall_seconds"] > 0
  with open(os.path.join(workdir, "summary.md")) as f:
    assert f.read().startswith("# ")


def test_script_stops_on_a_bad_config_naming_the_field(tmp_path):
  proc = subprocess.run(
      _script("variance_scaling", str(tmp_path), "smoke", "--config.num_actions=3"),
      env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2, proc.stderr
  assert "error: config.num_actions" in proc.stderr
  assert not os.path.exists(tmp_path / "summary.json")
