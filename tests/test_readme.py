"""Every README.md code block runs as written, and its commands print no warning.

The Python blocks run as they are, each in a fresh `python3` (no setup call, no XLA_FLAGS
of this session but the test-only optimisation level). The shell commands (```bash
blocks, and `python3 scripts/...` quoted in the text) run in order at their config's
`:small` variant, with `runs/` put under a temporary directory; the install and
test-suite commands are left out. Each must exit 0 and print no warning or re-execution
line. About 4-5 minutes of CPU in all (marked slow).
"""
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
LEVEL0 = "--xla_backend_optimization_level=0"   # test infrastructure (tests/conftest.py)
ALARMS = re.compile(r"(?i)warning|re-execut|can hang")


def blocks(language):
  """The README's ```<language> blocks, in order."""
  with open(README) as f:
    text = f.read()
  return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def commands(workdir_root):
  """The README's `python3 scripts/...` commands, in order, at their :small variant."""
  with open(README) as f:
    text = f.read()
  found = []
  for block in blocks("bash"):
    for line in block.splitlines():
      line = line.split("#")[0].strip()
      found += [part.strip() for part in line.split("&&")
                if part.strip().startswith("python3 scripts/")]
  found += re.findall(r"`(python3 scripts/[^`]+)`", text)
  out = []
  for command in found:
    command = re.sub(r"--config=(configs/[\w/]+\.py)(:\w+)?", r"--config=\1:small", command)
    out.append(command.replace("runs/", workdir_root.rstrip("/") + "/"))
  return out


def _env():
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env["XLA_FLAGS"] = LEVEL0
  env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
  env.setdefault("JAX_PLATFORMS", "cpu")
  return env


def _check(proc, what):
  output = proc.stdout + proc.stderr
  assert proc.returncode == 0, f"{what} exited {proc.returncode}:\n{output[-3000:]}"
  alarms = [line for line in output.splitlines() if ALARMS.search(line)]
  assert not alarms, f"{what} printed:\n" + "\n".join(alarms)


def test_readme_has_the_blocks_and_commands_this_test_runs():
  assert len(blocks("python")) >= 4
  found = commands("/tmp/x")
  assert any("scripts/train.py" in c for c in found)
  assert any("scripts/evaluate.py" in c for c in found)
  assert any("scripts/sweep.py" in c for c in found)
  assert all(":small" in c for c in found if "--config=" in c)
  assert not any("pip install" in c or "pytest" in c for c in found)


@pytest.mark.slow
def test_python_blocks_run_as_written(tmp_path):
  for i, block in enumerate(blocks("python")):
    path = tmp_path / f"block{i}.py"
    path.write_text(block)
    proc = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=600)
    _check(proc, f"README python block {i}:\n{block[:200]}")


@pytest.mark.slow
def test_shell_commands_run_at_small_and_print_no_warning(tmp_path):
  for command in commands(str(tmp_path / "runs")):
    proc = subprocess.run([sys.executable] + shlex.split(command)[1:], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=600)
    _check(proc, command)
