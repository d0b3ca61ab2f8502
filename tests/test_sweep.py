"""The sweep runner (credit_jax/sweep, scripts/sweep.py): grouping of cells into compiled
calls, bad grids stopped before any compile, results tables against hand-computed values,
resume after a SIGKILL mid-sweep, refusal of a changed sweep, shards and two processes."""
import csv
import math
import os
import signal
import socket
import subprocess
import sys
import textwrap

import ml_collections
import numpy as np
import pytest

from credit_jax import sweep
from credit_jax.algos import ConfigError
from credit_jax.sweep import execute, grid, results

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)

# REINFORCE on a 6-step KeyChain: 4 updates, a checkpoint after each.
_TINY_OVERRIDES = {"env_kwargs.horizon": 6, "horizon": 6, "env_kwargs.num_pivotal": 1,
                   "num_envs": 8, "num_updates": 4, "network.hidden_sizes": (16,),
                   "chunk_updates": 1, "checkpoint_every": 1}


def _tiny(axes, seeds=2, **extra):
  c = ml_collections.ConfigDict()
  c.base = "configs/reinforce_keychain.py:small"
  c.experiment = ""
  c.overrides = ml_collections.ConfigDict()
  for field, value in _TINY_OVERRIDES.items():
    node = c.overrides
    *parents, last = field.split(".")
    for p in parents:
      if p not in node:
        node[p] = ml_collections.ConfigDict()
      node = node[p]
    node[last] = value
  c.axes = ml_collections.ConfigDict(axes)
  c.seeds = seeds
  c.metric = "return"
  c.metrics = ("return", "success", "loss")
  c.thresholds = ml_collections.ConfigDict({"success": (0.5,)})
  c.minimize = ("loss",)
  c.final_window = 2
  c.cells_per_call = 0
  c.memory_limit_gb = 0.0
  for k, v in extra.items():
    c[k] = v
  return c


def test_grouping_traced_axes_share_a_compile():
  # lr and gamma are REINFORCE hparams (vmapped); num_actions and num_envs change shapes.
  p = sweep.plan(_tiny({"lr": (1e-3, 3e-3, 1e-2), "gamma": (0.9, 1.0),
                        "num_envs": (8, 16),
                        "env_kwargs": {"num_actions": (2, 4)}}))
  assert p.traced == ("gamma", "lr")
  assert p.static == ("env_kwargs.num_actions", "num_envs")
  assert len(p.cells) == 24 and len(p.calls) == 4
  for call in p.calls:
    assert len(call.cells) == 6     # 3 lr x 2 gamma in one call
    assert len({(c.values["num_envs"], c.values["env_kwargs.num_actions"])
                for c in call.cells}) == 1
    assert len({(c.values["lr"], c.values["gamma"]) for c in call.cells}) == 6
  assert "24 cells x 2 seeds = 48 runs in 4 compiled call(s), 4 compile(s)" in p.describe()
  # Each cell's config holds its values; the sweep's seeds replace the base's.
  cell = p.cells[-1]
  assert cell.config.lr == 1e-2 and cell.config.env_kwargs.num_actions == 4
  assert cell.config.seeds == 2 and cell.config.horizon == 6
  # Hyperparameters stacked per run: cells x seeds, seed i of a cell is train.py's seed i.
  keys, hp = execute._call_inputs(p.calls[0], 2)
  assert keys.shape == (12, 2) and hp["lr"].shape == (12,)
  np.testing.assert_allclose(hp["lr"][:4], [1e-3, 1e-3, 3e-3, 3e-3], rtol=1e-6)
  np.testing.assert_array_equal(keys[0], keys[2])   # same seed 0 in two cells

  split = sweep.plan(_tiny({"lr": (1e-3, 3e-3, 1e-2)}, cells_per_call=2))
  assert [len(c.cells) for c in split.calls] == [2, 1]


@pytest.mark.parametrize("axes,extra,message", [
    ({"nope": (1, 2)}, {}, "sweep.axes.nope: unknown field 'nope'"),
    ({"env_kwargs": {"nope": (1,)}}, {}, "sweep.axes.env_kwargs.nope: unknown field"),
    ({"network": {"width": (1,)}}, {}, "sweep.axes.network.width"),
    ({"lr": ()}, {}, "sweep.axes.lr: empty axis"),
    ({"lr": 0.1}, {}, "sweep.axes.lr: must be a tuple"),
    ({"lr": (1e-3, -1.0)}, {}, r"sweep.axes.lr=-1\): config.lr: learning rate must be >= 0"),
    ({"env_kwargs": {"num_pivotal": (1, 9)}}, {}, "sweep.axes.env_kwargs.num_pivotal=9"),
    ({"lr": (1e-3, 3e-3)}, {"memory_limit_gb": 1e-6},
     r"sweep.seeds / sweep.axes: .* 2 cells x 2 seeds = 4 runs.*sweep.axes.lr, sweep.seeds"),
    ({"lr": (1e-3,)}, {"seeds": 0}, "sweep.seeds: must be >= 1"),
])
def test_bad_grids_stop_before_compiling(tmp_path, axes, extra, message):
  with pytest.raises(ConfigError, match=message):
    sweep.run_sweep(_tiny(axes, **extra), str(tmp_path / "w"), log=lambda _: None)
  assert not (tmp_path / "w" / "calls").exists()   # nothing ran


def test_unknown_override_and_base():
  c = _tiny({"lr": (1e-3,)})
  c.overrides.bogus = 1
  with pytest.raises(ConfigError, match="sweep.overrides.bogus: unknown field"):
    sweep.plan(c)
  c = _tiny({"lr": (1e-3,)}, base="configs/nothing_here.py")
  with pytest.raises(ConfigError, match="sweep.base: no config file"):
    sweep.plan(c)


def test_rows_and_tables_against_hand_computed_values(tmp_path):
  cell = grid.Cell(0, "c000-lr=0.1", {"lr": 0.1}, None)
  per_seed = [[0.0, 0.2], [0.6, 0.4], [0.7, 0.9], [0.2, 1.0]]   # [U, S] success
  records = [{"update": u + 1, "env_steps": 10 * (u + 1), "success": float(np.mean(s)),
              "loss": 5.0 - u, "per_seed": {"success": s, "loss": [5.0 - u] * 2}}
             for u, s in enumerate(per_seed)]
  rows = results.recipe_rows(records, cell, 2, ["success", "loss"],
                             {"success": (0.5, 0.95)}, ("loss",), 2,
                             {"compile_s": 1.5, "run_s": 0.25})
  assert [r["seed"] for r in rows] == [0, 1]
  assert rows[0]["final_success"] == pytest.approx((0.7 + 0.2) / 2)
  assert rows[1]["final_success"] == pytest.approx((0.9 + 1.0) / 2)
  assert rows[0]["best_success"] == 0.7 and rows[1]["best_success"] == 1.0
  assert rows[0]["best_loss"] == 2.0                         # minimised
  assert rows[0]["steps_to_success_0.5"] == 20 and rows[1]["steps_to_success_0.5"] == 30
  assert rows[0]["steps_to_success_0.95"] == "" and rows[1]["steps_to_success_0.95"] == 40
  assert rows[0]["env_steps"] == 40 and rows[0]["compile_s"] == 1.5

  mean, half = results.t_interval([1.0, 2.0, 3.0])
  # t_{0.975, 2} = 4.302652729911275; sd = 1
  assert mean == 2.0 and half == pytest.approx(4.302652729911275 / math.sqrt(3))
  assert math.isnan(results.t_interval([4.0])[1])
  rows2 = [dict(r, cell="c001-lr=0.2", lr=0.2) for r in rows]
  out = results.write_tables(rows + rows2, ["lr"], "success", str(tmp_path), "t")
  table = open(out["md"]).read()
  assert "| c000 | 0.1 | 2 |" in table and "0.7 [" in table
  assert [os.path.basename(f) for f in out["figures"]] == ["success_vs_lr.png"]
  with open(out["csv"]) as f:
    assert len(list(csv.DictReader(f))) == 4


# --- whole sweeps through scripts/sweep.py (subprocesses) -------------------------------

def _write_config(path, axes, seeds=2):
  """A sweep config file for the tiny REINFORCE grid with `axes`."""
  path.write_text(textwrap.dedent(f"""
      import ml_collections
      def get_config(arg=None):
        c = ml_collections.ConfigDict()
        c.base = "configs/reinforce_keychain.py:small"
        c.experiment = ""
        c.overrides = ml_collections.ConfigDict({{
            "env_kwargs": {{"horizon": 6, "num_pivotal": 1}}, "horizon": 6, "num_envs": 8,
            "num_updates": 4, "network": {{"hidden_sizes": (16,)}}, "chunk_updates": 1,
            "checkpoint_every": 1}})
        c.axes = ml_collections.ConfigDict({axes!r})
        c.seeds = {seeds}
        c.metric = "return"
        c.metrics = ("return", "success", "loss")
        c.thresholds = ml_collections.ConfigDict({{"success": (0.5,)}})
        c.minimize = ("loss",)
        c.final_window = 2
        c.cells_per_call = 0
        c.memory_limit_gb = 0.0
        return c
      """))
  return str(path)


_AXES = {"lr": (3e-3, 1e-2), "env_kwargs": {"num_actions": (2, 4)}}


def _sweep(config, workdir, *extra, env=None, check=True):
  out = subprocess.run(
      [sys.executable, os.path.join(REPO, "scripts", "sweep.py"), f"--config={config}",
       f"--workdir={workdir}", *extra], capture_output=True, text=True, cwd=REPO,
      env=dict(os.environ, JAX_PLATFORMS="cpu", **(env or {})), timeout=900)
  if check:
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
  return out


def _table(workdir, drop=("compile_s", "run_s")):
  with open(os.path.join(workdir, "results.csv")) as f:
    return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


def _assert_tables_close(a, b):
  assert len(a) == len(b) == 8 and [r["cell"] for r in a] == [r["cell"] for r in b]
  for ra, rb in zip(a, b):
    assert ra.keys() == rb.keys()
    for k in ra:
      try:
        np.testing.assert_allclose(float(ra[k]), float(rb[k]), rtol=1e-5, atol=1e-6,
                                   err_msg=k)
      except ValueError:
        assert ra[k] == rb[k], k


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """The uninterrupted one-process sweep: 2 num_actions x 2 lr cells, 2 seeds, 2 calls."""
  root = tmp_path_factory.mktemp("sweep")
  config = _write_config(root / "tiny_sweep.py", _AXES)
  out = _sweep(config, root / "ref")
  assert "4 cells x 2 seeds = 8 runs in 2 compiled call(s), 2 compile(s)" in out.stdout, out.stdout
  assert "cells 0/4 done | call k000" in out.stdout and "env steps/s | ETA" in out.stdout
  return root, config, _table(root / "ref")


@pytest.mark.slow
def test_resume_after_sigkill_equals_uninterrupted(reference):
  root, config, ref = reference
  work = root / "killed"
  # Killed (SIGKILL) after the 6th checkpoint: call k000 finished (4), k001 at update 2.
  out = _sweep(config, work, env={execute.KILL_AFTER_CHUNKS_ENV: "6"}, check=False)
  assert out.returncode == -signal.SIGKILL, out.stderr[-2000:]
  assert not (work / "results.csv").exists()
  done_cells = sorted(p.name for p in (work / "cells").iterdir()
                      if (p / execute.ROWS_FILE).exists())
  assert len(done_cells) == 2
  finished = work / "cells" / done_cells[0] / "metrics.jsonl"
  before = (finished.stat().st_mtime_ns, finished.read_text())

  out = _sweep(config, work)
  assert "1 finished call(s) skipped; 1 to run" in out.stdout, out.stdout
  assert "call k001" in out.stdout and "compiled a chunk" in out.stdout
  assert "call k000-" not in out.stdout   # no progress line of the finished call
  assert "resumed from its checkpoint at update 2/4" in out.stdout, out.stdout
  assert (finished.stat().st_mtime_ns, finished.read_text()) == before   # not rerun
  _assert_tables_close(_table(work), ref)
  for cell in (root / "ref" / "cells").iterdir():   # per-update logs equal too
    a = (cell / "metrics.jsonl").read_text().splitlines()
    b = (work / "cells" / cell.name / "metrics.jsonl").read_text().splitlines()
    assert len(a) == len(b) == 4

  # A changed sweep in this workdir is refused, naming the fields.
  changed = _write_config(root / "changed.py", {"lr": (3e-3, 2e-2),
                                                "env_kwargs": {"num_actions": (2, 4)}},
                          seeds=3)
  out = _sweep(changed, work, check=False)
  assert out.returncode == 2
  assert "holds a different sweep" in out.stderr
  assert "sweep.axes.lr: saved [0.003, 0.01], now [0.003, 0.02]" in out.stderr, out.stderr
  assert "sweep.seeds: saved 2, now 3" in out.stderr


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_and_shards_equal_one_process(reference):
  root, config, ref = reference
  two = root / "two"
  address = f"localhost:{_free_port()}"
  procs = [subprocess.Popen(
      [sys.executable, os.path.join(REPO, "scripts", "sweep.py"), f"--config={config}",
       f"--workdir={two}", f"--coordinator_address={address}", "--num_processes=2",
       f"--process_id={i}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      cwd=REPO, env=dict(os.environ, JAX_PLATFORMS="cpu")) for i in range(2)]
  outs = []
  for p in procs:
    out, err = p.communicate(timeout=900)
    assert p.returncode == 0, err[-3000:]
    outs.append(out)
  assert "seeds split over 2 devices in 2 processes, 2 per device" in outs[0], outs[0]
  _assert_tables_close(_table(two), ref)

  # Two independent shards (a SLURM array), one after the other in one workdir.
  shards = root / "shards"
  first = _sweep(config, shards, "--shard=0/2")
  assert "2 cell(s) not finished yet (other shards)" in first.stdout, first.stdout
  second = _sweep(config, shards, "--shard=1/2")
  assert "not finished yet" not in second.stdout
  _assert_tables_close(_table(shards), ref)


@pytest.mark.slow
def test_experiment_cells_run_through_the_adapter(tmp_path):
  c = ml_collections.ConfigDict()
  c.base = "configs/variance_scaling.py:smoke"
  c.experiment = "variance_scaling"
  c.overrides = ml_collections.ConfigDict({"horizons": (10, 20), "seeds": 2})
  c.axes = ml_collections.ConfigDict({"num_pivotal": (1,)})
  c.seeds = 1
  c.metric = "slope.terminal"
  c.metrics = ("slope.terminal",)
  c.thresholds = ml_collections.ConfigDict()
  c.minimize = ()
  c.final_window = 1
  c.cells_per_call = 0
  c.memory_limit_gb = 0.0
  if grid._experiment_module("variance_scaling") is not None:   # else the script checks
    bad = c.copy_and_resolve_references()
    bad.axes.num_actions = (3,)
    with pytest.raises(ConfigError, match="sweep.axes.num_actions=3"):
      sweep.plan(bad)
  out = sweep.run_sweep(c, str(tmp_path), log=lambda _: None)
  rows = _table(tmp_path, drop=())
  assert out["cells"] == 1 and len(rows) == 1
  summary = __import__("json").load(open(tmp_path / "cells" / rows[0]["cell"] / "seed0" /
                                         "summary.json"))
  assert float(rows[0]["final_slope.terminal"]) == pytest.approx(summary["slope"]["terminal"])
  assert summary["num_pivotal"] == 1 and summary["horizons"] == [10, 20]
  # A rerun reads the finished run back without running it again.
  again = sweep.run_sweep(c, str(tmp_path), log=lambda _: None)
  assert again["ran"] == 0 and _table(tmp_path, drop=()) == rows
