"""Every entry point's failure is one line on stderr with its documented exit status
(credit_jax/runtime/cli.py), run as a user runs them: subprocesses that stop before any
compile. And the pieces behind them: write failures, flag-error lines."""
import errno
import os
import subprocess
import sys

import pytest

from credit_jax.runtime import checkpoint, cli, workdir

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
TRAIN = os.path.join(REPO, "scripts", "train.py")
GRPO = "--config=configs/grpo_keychain.py:small"


def _run(script, *args, env=None, timeout=300):
  environ = dict(os.environ, JAX_PLATFORMS="cpu")
  environ.update(env or {})
  environ = {k: v for k, v in environ.items() if v is not None}
  return subprocess.run([sys.executable, script, *args], cwd=REPO, env=environ,
                        capture_output=True, text=True, timeout=timeout)


def _one_error_line(proc) -> str:
  lines = [line for line in proc.stderr.splitlines() if line.strip()]
  assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
  return lines[0]


@pytest.fixture(scope="module")
def a_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("files") / "not_a_dir"
  path.write_text("x")
  return str(path)


@pytest.mark.parametrize("args,expected", [
    ((GRPO, "--config.lrr=0.01"),
     "error: --config.lrr=0.01: the config has no field 'lrr'; did you mean 'lr'?"),
    (("--config=configs/grpo_keychain.py:smal",),
     "error: --config=configs/grpo_keychain.py:smal: unknown variant 'smal'"),
    (("--config=configs/nope.py",), "no config file 'configs/nope.py'"),
    (("--config.seeds=2", GRPO),
     f"put --config first: python3 {TRAIN} {GRPO} --config.seeds=2 --workdir="),
])
def test_train_command_line_mistakes_are_one_line_with_exit_2(tmp_path, args, expected):
  proc = _run(TRAIN, *args, f"--workdir={tmp_path}")
  assert proc.returncode == 2
  assert expected in _one_error_line(proc)
  assert not os.listdir(tmp_path)   # stopped before anything was written


def test_a_workdir_that_is_a_file_is_one_line_with_exit_2(a_file):
  proc = _run(TRAIN, GRPO, f"--workdir={a_file}")
  assert proc.returncode == 2
  assert _one_error_line(proc) == (f"error: --workdir {a_file} is a file, not a "
                                   f"directory; pass a directory (a new one is created)")


def test_workdir_prepare_refuses_what_a_run_cannot_write(a_file, tmp_path):
  with pytest.raises(workdir.WorkdirError, match="a part of the path is a file"):
    workdir.prepare(os.path.join(a_file, "run"))
  assert workdir.prepare(str(tmp_path / "new" / "run")) == str(tmp_path / "new" / "run")
  assert os.listdir(tmp_path / "new" / "run") == []   # the probe file is gone


def test_debug_flag_shows_the_traceback(a_file):
  proc = _run(TRAIN, GRPO, f"--workdir={a_file}", "--debug")
  assert proc.returncode == 1
  assert "Traceback" in proc.stderr and "WorkdirError" in proc.stderr


def test_env_name_from_the_command_line_drops_the_file_env_options(a_file):
  # The workdir check stops the run right after the config is final.
  proc = _run(TRAIN, GRPO, "--config.env_name=MemoryChain-bsuite",
              "--config.env_kwargs.memory_length=5", f"--workdir={a_file}")
  assert proc.returncode == 2
  note, error = [line for line in proc.stderr.splitlines() if line.strip()]
  assert note == ("note: --config.env_name=MemoryChain-bsuite: the config file's "
                  "env_kwargs (cue_delay=0, horizon=50, num_actions=4, num_pivotal=3) are "
                  "options of KeyChain-v0 and were dropped; set MemoryChain-bsuite's "
                  "options with --config.env_kwargs.NAME=VALUE")
  assert error.startswith("error: --workdir")


def test_experiment_sweep_and_evaluate_scripts_fail_in_one_line(tmp_path, a_file):
  # The experiment scripts import their study (which starts JAX) before cli.main
  # configures the process; the package's warning about an unconfigured jaxlib 0.10
  # process is not for their user, so the one line is the error alone.
  proc = _run(os.path.join(REPO, "scripts", "variance_scaling.py"),
              "--config=configs/variance_scaling.py:small", f"--workdir={tmp_path}",
              "--config.horizns=3")
  assert proc.returncode == 2
  assert "did you mean 'horizons'?" in _one_error_line(proc)
  # A comma list on a tuple-of-strings field is one string to ml_collections.
  proc = _run(os.path.join(REPO, "scripts", "probes.py"), "--config=configs/probes.py:smoke",
              f"--workdir={tmp_path}", "--config.settings=default,all")
  assert proc.returncode == 2
  assert """--config.settings="('default','all')""" in _one_error_line(proc)
  # No JAX_PLATFORMS: jax then tries every backend after absl took over logging.
  proc = _run(os.path.join(REPO, "scripts", "sweep.py"),
              "--config=configs/sweeps/ppo_cartpole_lr.py:small", f"--workdir={a_file}",
              env={"JAX_PLATFORMS": None})
  assert proc.returncode == 2
  assert "is a file, not a directory" in _one_error_line(proc)   # no backend log line
  proc = _run(os.path.join(REPO, "scripts", "evaluate.py"), f"--workdir={tmp_path}")
  assert proc.returncode == 2
  assert "holds no training run" in _one_error_line(proc)


# --- the pieces (in process) ------------------------------------------------------------

ORBAX_ENOSPC = ("RESOURCE_EXHAUSTED: Error writing \"params.Dense_1.bias/0.0\" in OCDBT "
                "database at local file \"/w/checkpoints/5.orbax-checkpoint-tmp/\": Failed "
                "to write 2859 bytes to file 22: No space left on device "
                "[os_error_code='28']")


def test_a_full_disk_while_saving_is_one_line_and_exit_5(tmp_path, monkeypatch):
  ck = checkpoint.Checkpointer(str(tmp_path / "ck"), config={"a": 1})

  def full(*args, **kwargs):
    raise ValueError(ORBAX_ENOSPC)   # what orbax raised on a full tmpfs (issue's case)
  monkeypatch.setattr(ck._manager, "save", full)
  with pytest.raises(checkpoint.CheckpointSaveError) as info:
    ck.save(5, {"x": 1.0})
  assert str(info.value) == (
      f"could not save the checkpoint of update 5 in {ck.directory} (No space left on "
      f"device); none was saved before: free space and rerun the same command to resume")
  assert cli.exit_code_of(info.value) == cli.EXIT_WRITE
  assert cli.exit_code_of(OSError(errno.ENOSPC, "No space left on device")) == 5
  assert "what was saved before is intact" in cli.message_of(
      OSError(errno.ENOSPC, "No space left on device"))
  # Not a write failure: the original error, which the guard calls a bug (exit 1).
  monkeypatch.setattr(ck._manager, "save", lambda *a, **k: (_ for _ in ()).throw(
      TypeError("bad pytree")))
  with pytest.raises(TypeError):
    ck.save(6, {"x": 1.0})
  assert cli.exit_code_of(TypeError("bad pytree")) == cli.EXIT_BUG
  ck.close()


def test_flag_error_lines_without_a_subprocess():
  argv = ["scripts/train.py", GRPO, "--config.network.hiden_sizes=3"]
  err = AttributeError("'\\'hiden_sizes\\'\\nDid you mean \"hidden_sizes\" instead of "
                       "\"hiden_sizes\"?'")
  assert cli.flag_error_line(err, argv) == (
      "--config.network.hiden_sizes=3: the config has no field 'hiden_sizes'; did you "
      "mean 'hidden_sizes'?")


def test_comma_string_tuple_error_only_for_a_single_comma_string():
  import ml_collections  # pylint: disable=g-import-not-at-top
  c = ml_collections.ConfigDict({"methods": ("a,b",), "lengths": (1, 2), "name": "x,y",
                                 "sub": {"names": ("p", "q")}})
  line = cli.comma_string_tuple_error(c, ["prog", "--config.methods=a,b"])
  assert line.startswith("error: config.methods:") and "\"('a','b')\"" in line
  assert cli.comma_string_tuple_error(c, ["prog", "--config.lengths=1,2"]) is None
  assert cli.comma_string_tuple_error(c, ["prog", "--config.name=x,y"]) is None
  assert cli.comma_string_tuple_error(c, ["prog", "--config.sub.names=p"]) is None
  assert cli.comma_string_tuple_error(c, ["prog", "--config.missing=a,b"]) is None


def test_exit_codes_follow_the_class_names_along_the_mro():
  from credit_jax.config import ConfigError
  from credit_jax.runtime import run
  assert cli.exit_code_of(ConfigError("config.x: y")) == 2
  assert cli.exit_code_of(workdir.WorkdirError("w")) == 2
  assert cli.exit_code_of(workdir.WorkdirBusyError("w")) == 2
  assert cli.exit_code_of(run.NonFiniteLossError("nan")) == 3
  assert cli.exit_code_of(checkpoint.CheckpointError("none")) == 3
  assert cli.message_of(KeyError("k")).startswith("unexpected KeyError: 'k' (a bug")


def test_debug_is_read_from_argv_and_the_environment(monkeypatch):
  monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
  assert cli.debug_enabled(["x", "--debug"]) and not cli.debug_enabled(["x"])
  assert not cli.debug_enabled(["x", "--debug", "--nodebug"])
  monkeypatch.setenv(cli.DEBUG_ENV, "1")
  assert cli.debug_enabled(["x"])
