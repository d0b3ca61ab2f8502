"""Faults injected into runs of credit_jax/runtime/run.py, and what each run keeps (BUILD.md has the
table): a second writer, a stale lock, a damaged newest checkpoint, SIGTERM, a stalled
chunk. Runs in this process share one compiled tiny config; a subprocess is used where the
fault needs a process of its own."""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from credit_jax.runtime import checkpoint, interrupts, metrics, run, watchdog, workdir
from config_files import load_config

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
TRAIN = os.path.join(REPO, "scripts", "train.py")
# REINFORCE on a 6-step KeyChain, one seed, 8 updates of one chunk each; the same for
# train.py on the command line and `tiny_config()` in this process.
TOTAL = 8
TINY_FLAGS = ("--config=configs/reinforce_keychain.py:small",
              "--config.env_kwargs.horizon=6", "--config.horizon=6",
              "--config.env_kwargs.num_pivotal=1", "--config.env_kwargs.num_actions=2",
              "--config.num_envs=8", f"--config.num_updates={TOTAL}",
              "--config.network.hidden_sizes=(16,)", "--config.chunk_updates=1",
              "--config.checkpoint_every=1")


def tiny_config(**overrides):
  c = load_config("reinforce_keychain", "small")
  c.env_kwargs.horizon, c.env_kwargs.num_pivotal, c.env_kwargs.num_actions = 6, 1, 2
  c.horizon, c.num_envs, c.num_updates = 6, 8, TOTAL
  c.network.hidden_sizes = (16,)
  c.chunk_updates, c.checkpoint_every = 1, 1
  c.update(overrides)
  return c


def _train(workdir_, **kwargs):
  lines = []
  run.train_and_evaluate(tiny_config(**kwargs.pop("config", {})), str(workdir_),
                         log=lines.append, **kwargs)
  return lines


def _records(workdir_):
  return metrics.read_jsonl(os.path.join(str(workdir_), metrics.METRICS_FILE))


def _steps(workdir_):
  with checkpoint.Checkpointer(os.path.join(str(workdir_), run.CHECKPOINT_DIR)) as ck:
    return ck.all_steps()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """An uninterrupted run of the tiny config: its metrics records."""
  path = tmp_path_factory.mktemp("reference")
  _train(path)
  records = _records(path)
  assert [r["update"] for r in records] == list(range(1, TOTAL + 1))
  return records


@pytest.fixture(scope="module")
def partial(tmp_path_factory, reference):
  """A workdir whose run stopped after update 3 (checkpoints 1-3)."""
  del reference   # compiles the tiny config first
  path = tmp_path_factory.mktemp("partial")

  def stop_at_3(done):
    if done == 3:
      raise RuntimeError("stopped by the test")
  with pytest.raises(RuntimeError, match="stopped by the test"):
    _train(path, on_chunk=stop_at_3)
  assert _steps(path) == [1, 2, 3]
  return path


# --- one writer per workdir ------------------------------------------------------------

def test_second_process_is_refused_before_compiling_naming_the_holder(tmp_path):
  with workdir.WorkdirLock(str(tmp_path)):
    proc = subprocess.run([sys.executable, TRAIN, f"--workdir={tmp_path}", *TINY_FLAGS],
                          cwd=REPO, env=dict(os.environ, JAX_PLATFORMS="cpu"),
                          capture_output=True, text=True, timeout=600)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert f"is in use by pid {os.getpid()} on host " in proc.stderr, proc.stderr[-3000:]
  assert "compiled" not in proc.stdout
  assert sorted(os.listdir(tmp_path)) == [workdir.LOCK_FILE]   # nothing else written


def test_lock_of_a_killed_run_is_taken_over(tmp_path, reference):
  dead = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  dead.kill()
  dead.wait()
  (tmp_path / workdir.LOCK_FILE).write_text(
      f'{{"host": "{os.uname().nodename}", "pid": {dead.pid}, "started": "then", '
      f'"command": "train.py"}}')
  lines = _train(tmp_path)
  assert f"took over the lock of a run that is gone: pid {dead.pid} on host " in \
      lines[0], lines
  assert _records(tmp_path) == reference
  assert (tmp_path / workdir.LOCK_FILE).read_text() == ""   # released at the end


@pytest.mark.parametrize("use_flock", [True, False])
def test_lock_refuses_a_live_holder_and_takes_a_dead_ones(tmp_path, use_flock):
  dead = subprocess.Popen([sys.executable, "-c", "pass"])
  dead.wait()
  holder = workdir.WorkdirLock(str(tmp_path), use_flock=use_flock).acquire()
  if not use_flock:   # judged from the file: make the holder another, live process
    info = {"host": os.uname().nodename, "pid": os.getppid(), "started": "s",
            "command": "c"}
    (tmp_path / workdir.LOCK_FILE).write_text(str(info).replace("'", '"'))
  with pytest.raises(workdir.WorkdirBusyError, match="is in use by pid"):
    workdir.WorkdirLock(str(tmp_path), use_flock=use_flock).acquire()
  holder.release()
  (tmp_path / workdir.LOCK_FILE).write_text(
      f'{{"host": "{os.uname().nodename}", "pid": {dead.pid}}}')
  logged = []
  with workdir.WorkdirLock(str(tmp_path), log=logged.append, use_flock=use_flock):
    assert f'"pid": {os.getpid()}' in (tmp_path / workdir.LOCK_FILE).read_text()
  assert logged and f"pid {dead.pid}" in logged[0]


def test_lock_of_another_host_is_not_presumed_stale_without_flock(tmp_path):
  (tmp_path / workdir.LOCK_FILE).write_text('{"host": "elsewhere", "pid": 1}')
  with pytest.raises(workdir.WorkdirBusyError, match="on host elsewhere"):
    workdir.WorkdirLock(str(tmp_path), use_flock=False).acquire()


# --- a damaged newest checkpoint -----------------------------------------------------------

def test_truncated_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, reference):
  _train(tmp_path)
  assert _steps(tmp_path) == [6, 7, 8]
  newest = tmp_path / run.CHECKPOINT_DIR / "8"
  for path in glob.glob(str(newest / "**"), recursive=True):
    if os.path.isfile(path):
      with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
  lines = _train(tmp_path)
  assert lines[0].startswith("checkpoint at update 8 does not restore ("), lines
  assert lines[0].endswith(f"moved it to {tmp_path}/checkpoints_corrupt/8"), lines
  assert lines[1].startswith("resumed from checkpoint at update 7/8"), lines
  assert os.path.isdir(tmp_path / "checkpoints_corrupt" / "8" / "state")   # kept
  assert _steps(tmp_path) == [6, 7, 8]   # update 8 trained and saved again
  assert _records(tmp_path) == reference


def test_no_restorable_checkpoint_is_an_error_that_moves_nothing(tmp_path, partial):
  shutil.copytree(partial, tmp_path, dirs_exist_ok=True)
  for step in (1, 2, 3):
    for path in glob.glob(str(tmp_path / run.CHECKPOINT_DIR / str(step) / "**"),
                          recursive=True):
      if os.path.isfile(path):
        open(path, "w").close()
  with pytest.raises(checkpoint.CheckpointError, match=r"no checkpoint .* restores: "
                     r"update 3: .*; update 2: .*; update 1: "):
    _train(tmp_path)
  assert not os.path.exists(tmp_path / "checkpoints_corrupt")


# --- interrupts ---------------------------------------------------------------------------

def test_sigterm_saves_the_last_completed_update_and_the_rerun_matches(tmp_path,
                                                                       reference):
  def sigterm_at_1(done):
    if done == 1:
      os.kill(os.getpid(), signal.SIGTERM)
  before = signal.getsignal(signal.SIGTERM)
  # Checkpoints every 4 updates: the interrupt itself must save update 2.
  with pytest.raises(run.Interrupted, match=r"SIGTERM stopped the run at update 2/8: the "
                     r"checkpoint of update 2 is in .*; run the same command again") as e:
    _train(tmp_path, config={"checkpoint_every": 4}, on_chunk=sigterm_at_1)
  assert e.value.signum == signal.SIGTERM and e.value.step == 2
  assert signal.getsignal(signal.SIGTERM) is before   # handlers restored
  assert _steps(tmp_path) == [2]
  lines = _train(tmp_path, config={"checkpoint_every": 4})
  assert lines[0].startswith("resumed from checkpoint at update 2/8"), lines
  assert _records(tmp_path) == reference


def test_signal_during_the_last_chunk_lets_the_run_finish(tmp_path, reference):
  def sigint_before_last(done):
    if done == TOTAL - 1:
      os.kill(os.getpid(), signal.SIGINT)
  lines = _train(tmp_path, on_chunk=sigint_before_last)
  assert any(l.startswith("SIGINT: finishing the chunk in flight") for l in lines), lines
  assert os.path.exists(tmp_path / run.SUMMARY_FILE)
  assert _records(tmp_path) == reference


@pytest.mark.slow   # the in-process test above checks the same save and resume
def test_sigterm_to_train_script_mid_run_then_rerun_matches(tmp_path, reference):
  # --nofast_paths: train.py turns credit_jax.fast_paths on for CPU runs; the reference
  # and the in-process rerun below run with the library default (off).
  proc = subprocess.Popen([sys.executable, TRAIN, f"--workdir={tmp_path}", *TINY_FLAGS,
                           "--nofast_paths"],
                          cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env=dict(os.environ, JAX_PLATFORMS="cpu",
                                              PYTHONUNBUFFERED="1"))
  for line in proc.stdout:
    if line.startswith("update 2/8"):
      proc.send_signal(signal.SIGTERM)
      break
  out, err = proc.communicate(timeout=600)
  assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
  assert "SIGTERM: finishing the chunk in flight" in out, out
  stopped = [l for l in err.splitlines() if l.startswith("stopped: SIGTERM")]
  assert stopped and "run the same command again to resume from it" in stopped[0], err
  killed_at = max(_steps(tmp_path))
  assert 2 <= killed_at < TOTAL, "the run ended before the signal"
  assert not os.path.exists(tmp_path / run.SUMMARY_FILE)
  lines = _train(tmp_path)   # the same config, rerun here (compiled already)
  assert lines[0].startswith(f"resumed from checkpoint at update {killed_at}/8"), lines
  assert _records(tmp_path) == reference


def test_second_signal_abandons_the_chunk_in_flight():
  release = threading.Event()
  lines = []
  with interrupts.StopSignals(log=lines.append, what_next=lambda: "then saving") as stop:
    for delay in (0.2, 0.4):
      threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    with pytest.raises(interrupts.Abandoned):
      stop.wait(lambda: release.wait(60))
  release.set()
  assert time.monotonic() - t0 < 30
  assert stop.requested and stop.name == "SIGINT"
  assert lines == ["SIGINT: finishing the chunk in flight, then saving (send it again to "
                   "abandon the chunk)"]


# --- the watchdog ---------------------------------------------------------------------------

STALL = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from test_reliability import tiny_config
    from credit_jax.runtime import run, watchdog
    run.train_and_evaluate(
        tiny_config(), sys.argv[2],
        watchdog=watchdog.WatchdogOptions(first_s=float(sys.argv[3]), floor_s=1.0),
        on_chunk=lambda done: time.sleep(600))   # the stall: the chunk never ends
""")


def test_watchdog_ends_a_stalled_run_with_stacks_and_the_last_checkpoint(tmp_path,
                                                                          partial):
  shutil.copytree(partial, tmp_path, dirs_exist_ok=True)
  t0 = time.monotonic()
  proc = subprocess.run(
      [sys.executable, "-c", STALL, os.path.dirname(__file__), str(tmp_path), "10"],
      cwd=REPO, env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True,
      text=True, timeout=300)
  assert proc.returncode == watchdog.EXIT_CODE, proc.stderr[-3000:]
  assert time.monotonic() - t0 < 200
  err = proc.stderr
  assert re.search(r"error: watchdog: the first chunk \(set-up and compilation included\) "
                   r"has not finished after \d+ s \(limit 10 s\): the run is presumed hung",
                   err), err[-3000:]
  assert "most recent call first" in err and "in <lambda>" in err   # the stalled frame
  assert (f"Last checkpoint: update 3 in {tmp_path}/checkpoints; rerun the same command "
          f"to resume from it.") in err, err[-3000:]
  assert "XLA" in err.splitlines()[-1]   # the setting to try (credit_jax.runtime.launch)
  assert _steps(tmp_path) == [1, 2, 3]


def test_watchdog_allows_a_multiple_of_the_slowest_chunk_then_fires(capfd):
  fired = threading.Event()
  dog = watchdog.Watchdog(watchdog.WatchdogOptions(first_s=30.0, floor_s=0.5, factor=10),
                          describe=lambda: "Last checkpoint: update 7.",
                          on_fire=fired.set)
  with dog:
    for _ in range(10):   # chunks of 0.1 s keep it quiet: limit max(10 * 0.1, 0.5) s
      time.sleep(0.1)
      dog.chunk_done(0.1)
    assert not fired.is_set()
    assert dog.limit() == pytest.approx(1.0)
    assert fired.wait(20)   # no more chunks: it fires after about 1 s
  err = capfd.readouterr().err
  assert "chunk 11 (the slowest of 10 so far took 0.1 s) has not finished" in err, err
  assert "error: watchdog: Last checkpoint: update 7." in err


def test_heartbeat_log_writes_each_line_and_counts_it_as_a_finished_chunk():
  fired, written = threading.Event(), []
  dog = watchdog.Watchdog(watchdog.WatchdogOptions(first_s=30.0, floor_s=0.5, factor=10),
                          describe=lambda: "", on_fire=fired.set)
  log = watchdog.heartbeat_log(dog, written.append)
  with dog:
    for i in range(5):
      time.sleep(0.05)
      log(f"cell {i}")
    assert written == [f"cell {i}" for i in range(5)]
    assert not fired.is_set()
    assert dog.limit() >= 0.5   # max(10 x the longest gap, 0.5 s)
    assert fired.wait(20)   # no more lines: it fires


def test_watchdog_is_off_at_zero_and_checks_its_options():
  dog = watchdog.Watchdog(watchdog.WatchdogOptions(first_s=0), describe=lambda: "")
  with dog:
    assert not dog.enabled
  with pytest.raises(ValueError, match="factor >= 1"):
    watchdog.WatchdogOptions(factor=0.5)


GIL_HANG = textwrap.dedent("""
    import ctypes, importlib.util, sys
    spec = importlib.util.spec_from_file_location("watchdog", sys.argv[1])
    watchdog = sys.modules["watchdog"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(watchdog)   # stdlib only: no JAX to import
    dog = watchdog.Watchdog(watchdog.WatchdogOptions(first_s=1.0), describe=lambda: "",
                            backstop_s=1.0).start()
    ctypes.PyDLL(None).sleep(600)   # C code that keeps the GIL: no Python thread runs
""")


def test_watchdog_backstop_ends_a_hang_that_holds_the_gil():
  t0 = time.monotonic()
  proc = subprocess.run([sys.executable, "-c", GIL_HANG, watchdog.__file__],
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert time.monotonic() - t0 < 100
  assert "Timeout (0:00:02)!" in proc.stderr and "most recent call first" in proc.stderr
