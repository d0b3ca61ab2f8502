"""Tests for scripts/xla_cpu_flags.py: the XLA flag is added only where it is safe."""
import importlib.util
import os
import subprocess
import sys

import pytest

PATH = os.path.join(os.path.dirname(__file__), os.pardir, "scripts", "xla_cpu_flags.py")
spec = importlib.util.spec_from_file_location("xla_cpu_flags", PATH)
xla_cpu_flags = importlib.util.module_from_spec(spec)
spec.loader.exec_module(xla_cpu_flags)


def test_flag_added_once_for_multi_seed_runs_on_known_jaxlib():
  env = {"XLA_FLAGS": "--xla_dump_to=/tmp/x"}
  assert xla_cpu_flags.disable_concurrency_scheduler(16, env, (0, 10))
  assert env["XLA_FLAGS"].split() == ["--xla_dump_to=/tmp/x", xla_cpu_flags.FLAG]
  assert not xla_cpu_flags.disable_concurrency_scheduler(16, env, (0, 10))  # no duplicate
  assert env["XLA_FLAGS"].count(xla_cpu_flags.FLAG_NAME) == 1


@pytest.mark.parametrize("seeds,version", [(1, (0, 10)), (16, (0, 11)), (16, (0, 12))])
def test_flag_left_out_for_one_seed_or_unknown_jaxlib(seeds, version):
  env = {}
  assert not xla_cpu_flags.disable_concurrency_scheduler(seeds, env, version)
  assert "XLA_FLAGS" not in env or xla_cpu_flags.FLAG_NAME not in env["XLA_FLAGS"]


def test_user_setting_is_respected_and_bad_seeds_rejected():
  env = {"XLA_FLAGS": f"--{xla_cpu_flags.FLAG_NAME}=true"}
  assert not xla_cpu_flags.disable_concurrency_scheduler(16, env, (0, 10))
  assert env["XLA_FLAGS"] == f"--{xla_cpu_flags.FLAG_NAME}=true"
  with pytest.raises(ValueError, match="num_seeds"):
    xla_cpu_flags.disable_concurrency_scheduler(0, {}, (0, 10))


def test_module_does_not_import_jax():
  code = (f"import importlib.util, sys; s = importlib.util.spec_from_file_location('m', "
          f"{PATH!r}); m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
          "m.jaxlib_version(); print('jax' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True)
  assert out.stdout.strip() == "False"
