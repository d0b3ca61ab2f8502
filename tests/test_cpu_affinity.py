"""Tests for scripts/cpu_affinity.py: which cores a benchmark process keeps."""
import os
import subprocess
import sys

import pytest

from config_files import load_file

PATH = os.path.join(os.path.dirname(__file__), os.pardir, "scripts", "cpu_affinity.py")
cpu_affinity = load_file(PATH, "cpu_affinity")


class FakeAffinity:
  """Stands in for os.sched_{get,set}affinity on a machine with `cores`."""

  def __init__(self, cores):
    self.cores = set(cores)
    self.calls = []

  def get(self, pid):
    assert pid == 0
    return set(self.cores)

  def set(self, pid, cores):
    assert pid == 0
    self.calls.append(set(cores))
    self.cores = set(cores)


def test_keeps_the_first_cores_it_may_use():
  fake = FakeAffinity({2, 5, 7, 9})
  assert cpu_affinity.restrict_to_cores(2, fake.get, fake.set) == {2, 5}
  assert fake.cores == {2, 5} and fake.calls == [{2, 5}]


@pytest.mark.parametrize("num_cores", [0, 4, 8])
def test_no_change_for_zero_or_enough_cores(num_cores):
  fake = FakeAffinity({0, 1, 2, 3})
  assert cpu_affinity.restrict_to_cores(num_cores, fake.get, fake.set) is None
  assert fake.calls == [] and fake.cores == {0, 1, 2, 3}


@pytest.mark.parametrize("bad", [-1, 1.5, "1"])
def test_bad_core_counts_are_rejected(bad):
  with pytest.raises(ValueError, match="num_cores"):
    cpu_affinity.restrict_to_cores(bad, FakeAffinity({0, 1}).get, FakeAffinity({0, 1}).set)


def test_accelerator_detection_follows_jax_platforms(monkeypatch):
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  assert not cpu_affinity.accelerator_present()
  monkeypatch.setenv("JAX_PLATFORMS", "cuda,cpu")
  assert cpu_affinity.accelerator_present()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux affinity API")
def test_restricts_a_real_process_without_importing_jax():
  code = (f"import importlib.util, os, sys; s = importlib.util.spec_from_file_location('m', "
          f"{PATH!r}); m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
          "before = len(os.sched_getaffinity(0)); kept = m.restrict_to_cores(1); "
          "after = os.sched_getaffinity(0); assert len(after) == 1, after; "
          "assert kept == (after if before > 1 else None), (kept, after); "
          "assert 'jax' not in sys.modules; print('ok')")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=False)
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == "ok"


@pytest.mark.parametrize("argv,default,kept", [
    (["bench.py", "--cpu_cores=2"], 1, {0, 1}), (["bench.py", "--cpu_cores", "0"], 1, None),
    (["bench.py", "--seeds=16"], 3, {0, 1, 2})])
def test_argv_flag_or_default_decides(monkeypatch, argv, default, kept):
  fake = FakeAffinity({0, 1, 2, 3})
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  monkeypatch.setattr(cpu_affinity.os, "sched_getaffinity", fake.get, raising=False)
  monkeypatch.setattr(cpu_affinity.os, "sched_setaffinity", fake.set, raising=False)
  assert cpu_affinity.restrict_from_argv(argv, default) == kept
  assert fake.cores == (kept or {0, 1, 2, 3})
  monkeypatch.setenv("JAX_PLATFORMS", "cuda")
  assert cpu_affinity.restrict_from_argv(["bench.py", "--cpu_cores=1"], 1) is None
