"""No hang from Python: the library used as the README tells a user to use it finishes.

jaxlib 0.10's XLA CPU runtime wedges for good on vmapped programs that batch a LAPACK
kernel (the GRU's orthogonal initialiser under `jax.vmap` over seeds), unless the
concurrency-optimised thunk scheduler is off (BUILD.md "No hang from Python": 5 of 5
runs of scripts/repro/direct_gru_ppo.py hung without the setting on 2 cores).
`cj.configure_process()` sets it. These tests run the README's block and the direct-API
script in fresh subprocesses WITHOUT the XLA_FLAGS the test session has (tests/conftest.py
sets them for the pytest process), so each script must set them itself with its one
call. A run that stops using CPU (scripts/soak.py's watchdog) is killed and fails the test:
it never hangs CI. Without the call the direct-API run below hung 3 of 3 times.
"""
import os
import subprocess
import sys
import warnings

import pytest

from credit_jax.runtime import launch

from config_files import load_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPRO = os.path.join(ROOT, "scripts", "repro")
# A wedged run uses no CPU at all: one with no CPU for IDLE_S seconds is hung (killed, the
# test fails), whatever the machine's load; TIMEOUT_S only bounds a run that crawls.
IDLE_S, TIMEOUT_S = 60, 600
# Test infrastructure only (tests/conftest.py): halves the compile time of the scripts.
LEVEL0 = "--xla_backend_optimization_level=0"


def _clean_env():
  """The environment of a fresh `python3 script.py`: no XLA_FLAGS from this session."""
  env = {k: v for k, v in os.environ.items()
         if k not in ("XLA_FLAGS", launch._REEXEC_MARK)}
  env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
  env.setdefault("JAX_PLATFORMS", "cpu")
  return env


@pytest.mark.slow
def test_readme_block_and_direct_api_script_finish_every_time(tmp_path, monkeypatch):
  soak = load_script("soak")   # its watchdog: CPU idleness read from /proc, then a kill
  env = _clean_env()    # run_once replaces XLA_FLAGS; the rest comes from os.environ
  monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])
  monkeypatch.setenv("JAX_PLATFORMS", env["JAX_PLATFORMS"])
  monkeypatch.delenv(launch._REEXEC_MARK, raising=False)
  runs = [("README block", ["readme_library.py"], "readme block done")] + [
      (f"direct-API GRU PPO script, run {i + 1}", ["direct_gru_ppo.py", "--steps=4096"],
       "env steps/s") for i in range(2)]
  for i, (what, args, done) in enumerate(runs):
    out_path = str(tmp_path / f"run{i}.out")
    # XLA_FLAGS holds only LEVEL0: the script's own cj.configure_process() adds the rest.
    r = soak.run_once([sys.executable, os.path.join(REPRO, args[0])] + args[1:], LEVEL0,
                      TIMEOUT_S, IDLE_S, 0.2, out_path)
    with open(out_path) as f:
      out = f.read()
    assert r["status"] != "hung", f"{what} hung ({r['reason']}); output:\n{out[-3000:]}"
    assert r["status"] == "finished", f"{what} failed ({r['reason']}):\n{out[-3000:]}"
    assert done in out and "re-executing" not in out, out[-3000:]


def test_import_starts_no_backend_so_the_call_applies_in_process():
  code = ("import os, credit_jax as cj\n"
          "from jax._src import xla_bridge\n"
          "assert not xla_bridge.backends_are_initialized(), 'import started a backend'\n"
          "added = cj.configure_process()\n"
          "import jax.numpy as jnp\n"
          "float(jnp.ones(3).sum())\n"
          "print('ADDED', added, 'FLAGS', os.environ.get('XLA_FLAGS', ''))\n")
  proc = subprocess.run([sys.executable, "-c", code], env=_clean_env(), cwd=ROOT,
                        capture_output=True, text=True, timeout=TIMEOUT_S)
  assert proc.returncode == 0, proc.stderr[-3000:]
  expected = launch.xla_flags_for(None)
  for flag in expected:
    assert flag in proc.stdout
  assert "re-executing" not in proc.stderr
  assert "RuntimeWarning" not in proc.stderr   # configured: no warning


def test_first_use_without_the_call_warns_on_an_affected_jaxlib():
  code = "import credit_jax as cj\ncj.gae\ncj.envs\nprint('used')\n"
  proc = subprocess.run([sys.executable, "-c", code], env=_clean_env(), cwd=ROOT,
                        capture_output=True, text=True, timeout=TIMEOUT_S)
  assert proc.returncode == 0, proc.stderr[-3000:]
  warned = [line for line in proc.stderr.splitlines() if "configure_process()" in line]
  assert len(warned) == (1 if launch.xla_flags_for(None) else 0), proc.stderr


def test_study_entry_points_do_not_tell_their_user_to_configure():
  # scripts/<study>.py imports experiments.cli, then its study (which starts JAX through
  # gymnax); cli.main configures the process itself, so the warning is not for its user.
  code = "from credit_jax.experiments import cli, probes\nprint('imported')\n"
  proc = subprocess.run([sys.executable, "-c", code], env=_clean_env(), cwd=ROOT,
                        capture_output=True, text=True, timeout=TIMEOUT_S)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "configure_process()" not in proc.stderr, proc.stderr


def test_default_call_sets_the_flags_for_any_program_on_affected_jaxlib():
  env = {}
  added = launch.configure_process(environ=env, version=(0, 10))
  assert added and all(f in env["XLA_FLAGS"] for f in added)
  assert "--xla_cpu_enable_concurrency_optimized_scheduler=false" in added
  assert launch.configure_process(environ={}, version=(0, 99)) == []
  # Entry points still say how many seeds they vmap; one seed gets no flag.
  assert launch.configure_process(num_seeds=1, environ={}, version=(0, 10)) == []


def test_affected_jaxlib_without_the_setting_warns_once_in_one_line(monkeypatch):
  monkeypatch.setattr(launch, "_WARNED", False)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    launch.warn_if_unconfigured(environ={}, version=(0, 10))
    launch.warn_if_unconfigured(environ={}, version=(0, 10))
  assert len(caught) == 1
  message = str(caught[0].message)
  assert "\n" not in message and "configure_process()" in message
  monkeypatch.setattr(launch, "_WARNED", False)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    launch.warn_if_unconfigured(environ={"XLA_FLAGS": " ".join(
        launch.xla_flags_for(None, (0, 10)))}, version=(0, 10))
    launch.warn_if_unconfigured(environ={}, version=(0, 99))
  assert not caught
