"""Tests for credit_jax/runtime/launch.py: the optional XLA flags from the parsed config (only
where safe, once, and only while no JAX backend has started: never a re-execution), and
environment options from the command line (`--config.env_kwargs.NAME=VALUE`, checked
against the env's options)."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import ml_collections
import pytest

from credit_jax.runtime import launch
from credit_jax.algos import ConfigError
from credit_jax.algos import train as train_lib

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
SCHEDULER = "xla_cpu_enable_concurrency_optimized_scheduler"
EIGEN = "xla_cpu_multi_thread_eigen"
FLAGS_0_10 = [f"--{SCHEDULER}=false", f"--{EIGEN}=false"]   # launch._CPU_FLAGS[(0, 10)]


# --- XLA flags -----------------------------------------------------------------------------

def test_flags_added_once_for_multi_seed_runs_on_known_jaxlib():
  env = {"XLA_FLAGS": "--xla_dump_to=/tmp/x"}
  added = launch.configure_process(16, environ=env, version=(0, 10))
  assert added == FLAGS_0_10
  assert env["XLA_FLAGS"].split() == ["--xla_dump_to=/tmp/x"] + FLAGS_0_10
  assert launch.configure_process(16, environ=env, version=(0, 10)) == []   # no duplicate
  assert env["XLA_FLAGS"].count(SCHEDULER) == 1
  assert env["XLA_FLAGS"].count(EIGEN) == 1


@pytest.mark.parametrize("seeds,version", [(1, (0, 10)), (16, (0, 11)), (16, (0, 12)),
                                           (16, None)])
def test_flags_left_out_for_one_seed_or_unknown_jaxlib(seeds, version, monkeypatch):
  if version is None:   # jaxlib not installed / unreadable
    monkeypatch.setattr(launch, "jaxlib_version", lambda: None)
  env = {}
  assert launch.configure_process(seeds, environ=env, version=version) == []
  assert SCHEDULER not in env.get("XLA_FLAGS", "")


def test_user_setting_is_respected_and_bad_seeds_rejected():
  env = {"XLA_FLAGS": f"--{SCHEDULER}=true"}
  # The user's scheduler setting is kept; only the flag they did not name is added.
  assert launch.configure_process(16, environ=env, version=(0, 10)) == [f"--{EIGEN}=false"]
  assert env["XLA_FLAGS"] == f"--{SCHEDULER}=true --{EIGEN}=false"
  env = {"XLA_FLAGS": f"--{SCHEDULER}=true --{EIGEN}=true"}
  assert launch.configure_process(16, environ=env, version=(0, 10)) == []
  assert env["XLA_FLAGS"] == f"--{SCHEDULER}=true --{EIGEN}=true"
  for bad in (0, -2, 2.0, True, "4"):
    with pytest.raises(ValueError, match="num_seeds"):
      launch.xla_flags_for(bad, (0, 10))


def test_hang_advice_names_the_missing_setting_or_says_it_is_set():
  for flag in FLAGS_0_10:
    assert flag in launch.hang_advice((0, 10), {"XLA_FLAGS": ""})
  assert "credit_jax.nets.orthogonal" in launch.hang_advice((0, 10), {"XLA_FLAGS": ""})
  assert "already holds" in launch.hang_advice((0, 10), {"XLA_FLAGS": " ".join(FLAGS_0_10)})
  assert "knows no XLA setting" in launch.hang_advice((0, 99), {})


def test_module_imports_no_jax():
  code = textwrap.dedent(f"""
      import importlib.util, sys
      spec = importlib.util.spec_from_file_location(
          "launch", {os.path.join(REPO, "credit_jax", "runtime", "launch.py")!r})
      m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
      m.jaxlib_version(); m.xla_flags_for(4); m.split_env_overrides(["x"])
      print("jax" in sys.modules)""")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True)
  assert out.stdout.strip() == "False"


def test_started_backend_leaves_xla_flags_alone():
  # This test process has started JAX: the flags could no longer apply, and the setting
  # is optional, so the call changes nothing (no error, no re-execution).
  import jax   # pylint: disable=g-import-not-at-top
  jax.numpy.zeros(()).block_until_ready()
  saved = os.environ.copy()
  try:
    os.environ.pop("XLA_FLAGS", None)
    assert launch.configure_process(4, version=(0, 10)) == []
    assert "XLA_FLAGS" not in os.environ
  finally:
    os.environ.clear()
    os.environ.update(saved)


def _tiny_config_file(tmp_path, body):
  path = tmp_path / "tiny.py"
  path.write_text(textwrap.dedent(f"""
      import importlib.util
      import ml_collections
      import credit_jax   # as recipe configs do: JAX has started once the file is loaded
      _spec = importlib.util.spec_from_file_location(
          "base", {os.path.join(REPO, "configs", "reinforce_keychain.py")!r})
      _base = importlib.util.module_from_spec(_spec)
      _spec.loader.exec_module(_base)

      def get_config():
        c = _base.get_config("small")
        c.network.hidden_sizes = (8,)
        c.num_envs, c.num_updates, c.chunk_updates, c.checkpoint_every = 4, 2, 1, 1
      """) + textwrap.indent(textwrap.dedent(body), "  ") + "  return c\n")
  return str(path)


@pytest.fixture(scope="module")
def file_config_run(tmp_path_factory):
  """train.py with a config FILE that sets seeds=4 and an env with empty env_kwargs
  (UmbrellaChain-bsuite), the env's chain_length set on the command line."""
  tmp = tmp_path_factory.mktemp("file_config")
  config = _tiny_config_file(tmp, """
      c.seeds = 4
      c.env_name = "UmbrellaChain-bsuite"
      c.env_kwargs = ml_collections.ConfigDict()
      c.horizon = 30
      """)
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env["JAX_PLATFORMS"] = "cpu"
  workdir = tmp / "run"
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "scripts", "train.py"), f"--config={config}",
       f"--workdir={workdir}", "--config.env_kwargs.chain_length=30"],
      cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return workdir, proc


def test_config_file_that_starts_jax_runs_its_seeds_without_a_reexecution(file_config_run):
  # The config file imports the library (JAX starts): the optional flags cannot apply, and
  # the run goes on without them, saying nothing about it.
  workdir, proc = file_config_run
  with open(workdir / "summary.json") as f:
    summary = json.load(f)
  assert summary["seeds"] == 4
  assert summary["xla_flags"] == ""   # what the process ran with
  assert "re-executing" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr


def test_env_option_set_on_the_command_line_reaches_the_run(file_config_run):
  workdir, _ = file_config_run
  with open(workdir / "checkpoints" / "config.json") as f:
    assert json.load(f)["env_kwargs"] == {"chain_length": 30}


# --- environment options from the command line -----------------------------------------

def test_split_env_overrides():
  rest, found = launch.split_env_overrides(
      ["train.py", "--config=c.py", "--config.env_kwargs.chain_length=30",
       "--config.lr=1", "--config.env_kwargs.n_distractor", "2",
       "--config.env_kwargs.chain_length=31"])
  assert rest == ["train.py", "--config=c.py", "--config.lr=1"]
  assert found == {"chain_length": "31", "n_distractor": "2"}
  with pytest.raises(ValueError, match="needs a value"):
    launch.split_env_overrides(["t", "--config.env_kwargs.chain_length"])
  assert launch.split_env_overrides(["t", "--cfg.env_kwargs.a=1"], "cfg")[1] == {"a": "1"}


def _umbrella_config():
  c = ml_collections.ConfigDict({"env_name": "UmbrellaChain-bsuite", "history_window": 0})
  c.env_kwargs = ml_collections.ConfigDict()
  c.lock()   # as config_flags hands it over
  return c


def test_env_option_override_on_an_empty_env_kwargs_reaches_the_env():
  c = launch.apply_env_overrides(_umbrella_config(),
                                 {"chain_length": "30", "n_distractor": "2"})
  assert c.env_kwargs.chain_length == 30 and isinstance(c.env_kwargs.chain_length, int)
  env, params = train_lib.make_env(c)
  assert params.chain_length == 30
  assert env.n_distractor == 2


@pytest.mark.parametrize("overrides,match", [
    ({"chain": "3"}, r"^config\.env_kwargs\.chain: UmbrellaChain-bsuite has no option "
                     r"'chain'; constructor options: n_distractor; params fields: "
                     r"max_steps_in_episode, chain_length$"),
    ({"chain_length": "abc"}, r"^config\.env_kwargs\.chain_length='abc': expected an "
                              r"integer; UmbrellaChain-bsuite accepts .*chain_length$"),
])
def test_unknown_or_bad_env_option_is_one_line_listing_what_is_accepted(overrides, match):
  with pytest.raises(ConfigError, match=match):
    launch.apply_env_overrides(_umbrella_config(), overrides)


def test_env_option_values_take_the_type_of_the_default():
  c = ml_collections.ConfigDict({"env_name": "CartPole-v1",
                                 "env_kwargs": ml_collections.ConfigDict()})
  launch.apply_env_overrides(c, {"gravity": "10", "max_steps_in_episode": "7"})
  assert c.env_kwargs.gravity == 10.0 and isinstance(c.env_kwargs.gravity, float)
  assert c.env_kwargs.max_steps_in_episode == 7
  with pytest.raises(ConfigError, match="expected a number"):
    launch.apply_env_overrides(c, {"gravity": "strong"})


def test_train_script_refuses_an_unknown_env_option_in_one_line(tmp_path):
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "scripts", "train.py"),
       "--config=configs/ppo_cartpole.py:small", f"--workdir={tmp_path}",
       "--config.env_name=UmbrellaChain-bsuite", "--config.env_kwargs.chain=30"],
      cwd=REPO, env=dict(os.environ, JAX_PLATFORMS="cpu"), capture_output=True,
      text=True, timeout=600)
  assert proc.returncode == 2, proc.stderr[-3000:]
  errors = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
  assert errors == ["error: config.env_kwargs.chain: UmbrellaChain-bsuite has no option "
                    "'chain'; constructor options: n_distractor; params fields: "
                    "max_steps_in_episode, chain_length"], proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr
  assert not os.listdir(tmp_path)   # refused before anything was written


def test_distributed_loads_launch_without_the_package():
  sys.path.insert(0, os.path.join(REPO, "scripts"))
  try:
    spec = importlib.util.spec_from_file_location(
        "distributed_for_test", os.path.join(REPO, "scripts", "distributed.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
  finally:
    sys.path.pop(0)
  standalone = module._launch_module()   # pylint: disable=protected-access
  assert standalone.xla_flags_for(4, (0, 10)) == launch.xla_flags_for(4, (0, 10))
