"""scripts/train.py over two processes (jax.distributed on localhost, gloo on CPU): the
seeds split over both, the numbers of a one-process run, a resume from a shared
checkpoint; and the command-line parsing of scripts/distributed.py."""
import importlib.util
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
# Loaded by file path: scripts/ on sys.path would shadow installed packages for every test
# module that runs after this one in the same worker (scripts/bsuite.py shadowed bsuite).
_SPEC = importlib.util.spec_from_file_location(
    "distributed", os.path.join(REPO, "scripts", "distributed.py"))
distributed = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(distributed)

from credit_jax.runtime import metrics

# REINFORCE on a 6-step KeyChain, 4 seeds, 4 updates, a checkpoint after each.
TINY = ("--config=configs/reinforce_keychain.py:small", "--config.seeds=4",
        "--config.env_kwargs.horizon=6", "--config.horizon=6",
        "--config.env_kwargs.num_pivotal=1", "--config.env_kwargs.num_actions=2",
        "--config.num_envs=8", "--config.num_updates=4",
        "--config.network.hidden_sizes=(16,)", "--config.chunk_updates=1",
        "--config.checkpoint_every=1")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _train(workdir, *extra):
  return [sys.executable, os.path.join(REPO, "scripts", "train.py"), *TINY,
          f"--workdir={workdir}", *extra]


def _two_processes(workdir):
  """Runs the tiny config as processes 0 and 1; returns their stdouts."""
  address = f"localhost:{_free_port()}"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  procs = [subprocess.Popen(
      _train(workdir, f"--coordinator_address={address}", "--num_processes=2",
             f"--process_id={i}"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True, env=env, cwd=REPO) for i in range(2)]
  outs = []
  for p in procs:
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-3000:]
    outs.append(out)
  return outs


@pytest.mark.slow
def test_train_over_two_processes_matches_one_process_and_resumes(tmp_path):
  two, one = tmp_path / "two", tmp_path / "one"
  out0, out1 = _two_processes(two)
  assert "seeds split over 2 devices in 2 processes, 2 per device" in out0, out0
  # Process 1 logs nothing of its own (gloo may print its connection line).
  assert not [l for l in out1.splitlines() if l.strip() and "[Gloo]" not in l], out1
  first = (two / metrics.METRICS_FILE).read_text()
  assert (two / "summary.json").exists() and (two / "learning_curve.png").exists()

  subprocess.run(_train(one), check=True, capture_output=True, cwd=REPO,
                 env=dict(os.environ, JAX_PLATFORMS="cpu"))
  split = metrics.read_jsonl(str(two / metrics.METRICS_FILE))
  plain = metrics.read_jsonl(str(one / metrics.METRICS_FILE))
  assert [r["update"] for r in split] == [r["update"] for r in plain] == [1, 2, 3, 4]
  for a, b in zip(split, plain):
    for k, v in b["per_seed"].items():
      np.testing.assert_allclose(a["per_seed"][k], v, rtol=1e-5, atol=1e-6, err_msg=k)

  # As if both were killed before the last save: both resume from update 3, sharded.
  shutil.rmtree(two / "checkpoints" / "4")
  out0, _ = _two_processes(two)
  assert "resumed from checkpoint at update 3/4" in out0, out0
  assert (two / metrics.METRICS_FILE).read_text() == first


def test_parse_argv():
  assert distributed.parse_argv(["train.py", "--config=x"]) is None
  assert distributed.parse_argv(["train.py", "--distributed"]) == {}
  assert distributed.parse_argv(["train.py", "--distributed=false"]) is None
  assert distributed.parse_argv(
      ["t", "--coordinator_address=h:1", "--num_processes", "2", "--process_id=1"]) == {
          "coordinator_address": "h:1", "num_processes": 2, "process_id": 1}
  with pytest.raises(ValueError, match="missing --process_id"):
    distributed.parse_argv(["t", "--coordinator_address=h:1", "--num_processes=2"])
  with pytest.raises(ValueError, match="integers"):
    distributed.parse_argv(["t", "--coordinator_address=h:1", "--num_processes=two",
                            "--process_id=0"])
