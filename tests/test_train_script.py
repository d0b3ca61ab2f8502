"""End-to-end tests of scripts/train.py as a user runs it: artifacts, multi-seed runs,
config errors, and exact resumption after SIGKILL (tests/test_reliability.py injects the
other faults)."""
import glob
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from credit_jax.runtime import metrics
from credit_jax.runtime import run

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
SCRIPT = os.path.join(REPO, "scripts", "train.py")
# PPO on CartPole, 2 vmapped seeds, 40 updates in chunks of 2, a checkpoint every chunk:
# long enough after the first checkpoint that a kill lands mid-run.
PPO_FLAGS = ("--config=configs/ppo_cartpole.py:small", "--config.total_timesteps=20480",
             "--config.chunk_updates=2", "--config.checkpoint_every=2",
             "--config.seeds=2")
TOTAL_UPDATES = 40


def _cmd(workdir, *flags):
  return [sys.executable, SCRIPT, f"--workdir={workdir}", *flags]


def _env():
  return dict(os.environ, JAX_PLATFORMS="cpu")


def _run(workdir, *flags, timeout=600):
  return subprocess.run(_cmd(workdir, *flags), cwd=REPO, env=_env(), capture_output=True,
                        text=True, timeout=timeout)


def _steps(workdir):
  ckdir = os.path.join(workdir, run.CHECKPOINT_DIR)
  if not os.path.isdir(ckdir):
    return []
  return sorted(int(d) for d in os.listdir(ckdir) if d.isdigit())


def _records(workdir):
  return metrics.read_jsonl(os.path.join(workdir, metrics.METRICS_FILE))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """An uninterrupted run of PPO_FLAGS."""
  workdir = str(tmp_path_factory.mktemp("reference"))
  proc = _run(workdir, *PPO_FLAGS)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return workdir, proc


def test_run_writes_metrics_tensorboard_checkpoints_plot_and_summary(reference):
  workdir, proc = reference
  records = _records(workdir)
  assert [r["update"] for r in records] == list(range(1, TOTAL_UPDATES + 1))
  assert records[-1]["env_steps"] == TOTAL_UPDATES * 512
  assert len(records[-1]["per_seed"]["return"]) == 2
  assert glob.glob(os.path.join(workdir, metrics.TENSORBOARD_DIR, "events.out.*"))
  assert os.path.getsize(os.path.join(workdir, run.CURVE_FILE)) > 1000
  assert os.path.exists(os.path.join(workdir, run.CHECKPOINT_DIR, "config.json"))
  assert _steps(workdir) == [36, 38, 40]  # keep_checkpoints = 3
  assert os.path.exists(os.path.join(workdir, run.SUMMARY_FILE))
  # Progress lines: updates done, throughput, ETA and the headline metric.
  assert re.search(r"update 40/40 \| [\d,]+ env steps/s \(run avg\) \| ETA 0:00:00 \| "
                   r"last update: return ",
                   proc.stdout), proc.stdout[-2000:]
  assert "compiled a chunk of 2 updates" in proc.stdout


def test_sigkilled_run_resumes_to_identical_metrics(reference, tmp_path):
  ref_dir, _ = reference
  workdir = str(tmp_path)
  proc = subprocess.Popen(_cmd(workdir, *PPO_FLAGS), cwd=REPO, env=_env(),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  while not _steps(workdir) and proc.poll() is None and time.time() < deadline:
    time.sleep(0.02)
  os.kill(proc.pid, signal.SIGKILL)
  proc.wait()
  assert proc.returncode == -signal.SIGKILL
  killed_at = max(_steps(workdir))
  assert killed_at < TOTAL_UPDATES, "the run finished before it could be killed"
  assert not os.path.exists(os.path.join(workdir, run.SUMMARY_FILE))

  resumed = _run(workdir, *PPO_FLAGS)
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f"took over the lock of a run that is gone: pid {proc.pid} on host " in \
      resumed.stdout, resumed.stdout[-2000:]
  match = re.search(r"resumed from checkpoint at update (\d+)/40", resumed.stdout)
  assert match and int(match.group(1)) >= killed_at, resumed.stdout[-2000:]
  assert _records(workdir) == _records(ref_dir)


def test_invalid_config_field_exits_with_its_name(tmp_path):
  proc = _run(str(tmp_path), "--config=configs/grpo_keychain.py:small",
              "--config.group_size=1")
  assert proc.returncode == 2
  assert "config.group_size: a group needs at least 2 rollouts" in proc.stderr
  assert not os.path.exists(os.path.join(tmp_path, metrics.METRICS_FILE))


def test_resuming_with_a_different_config_is_refused(reference):
  workdir, _ = reference
  proc = _run(workdir, *PPO_FLAGS, "--config.lr=0.1")
  assert proc.returncode == 2
  assert "holds checkpoints of a different config (lr: saved 0.00025, now 0.1)" in \
      proc.stderr


def test_run_loop_sits_above_the_recipes_it_runs():
  """credit_jax/runtime/run.py imports credit_jax.algos; nothing in credit_jax/algos imports the
  run loop or its helpers back."""
  import ast   # pylint: disable=g-import-not-at-top
  upper = {"credit_jax.runtime.run", "credit_jax.runtime.launch", "credit_jax.runtime.watchdog",
           "credit_jax.runtime.interrupts", "credit_jax.runtime.workdir"}

  def imports(path):
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
      if isinstance(node, ast.Import):
        found |= {a.name for a in node.names}
      elif isinstance(node, ast.ImportFrom) and node.module:
        found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found
  assert "credit_jax.algos" in imports(os.path.join(REPO, "credit_jax", "runtime", "run.py"))
  for path in glob.glob(os.path.join(REPO, "credit_jax", "algos", "*.py")):
    assert not imports(path) & upper, path
