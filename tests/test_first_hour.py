"""A new user's first hour without false alarms (issue 46): a misspelt env id gets a
"did you mean" and no unrelated note first; `--config.horizon` on PPO is answered with
what PPO's `num_steps` is; a damaged checkpoint's line carries no tensorstore spec or
pybind repr."""
import glob
import os
import subprocess
import sys

import gymnax
import jax
import numpy as np
import pytest

from credit_jax import envs
from credit_jax.runtime import checkpoint as ckpt_lib
from credit_jax.runtime import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("typed,meant", [("KeyChian-v0", "KeyChain-v0"),
                                         ("keychain-v0", "KeyChain-v0"),
                                         ("CartPole-v0", "CartPole-v1"),
                                         ("bsuite/UmbrelaChain-v0", "bsuite/UmbrellaChain-v0")])
def test_misspelt_env_id_gets_did_you_mean(typed, meant):
  with pytest.raises(ValueError, match=rf"unknown environment '{typed}' \(did you mean "
                                       rf"[^)]*'{meant}'"):
    envs.make(typed)


def test_unrelated_id_gets_no_suggestion_and_the_bsuite_ids_are_explained():
  with pytest.raises(ValueError) as e:
    envs.make("Zzz-v9")
  assert "did you mean" not in str(e.value)
  assert "bsuite's tasks as bsuite defines them are the bsuite/ ids" in str(e.value)


def test_gymnax_bsuite_chains_are_listed_as_variants_of_the_bsuite_ids():
  """One documented id per bsuite chain (the bsuite/ one); gymnax's *-bsuite ids are
  other environments, and every listing says which to use and how they differ."""
  with pytest.raises(ValueError) as e:
    envs.make("Zzz-v9")
  for gymnax_id, (task, _) in envs.GYMNAX_VARIANTS.items():
    assert gymnax_id in gymnax.registered_envs and task in envs.registered_envs()
    assert f"{gymnax_id} (gymnax's variant, not bsuite's task {task}: " in str(e.value)
    assert envs.describe_env(task) == task
  assert envs.describe_env("KeyChain-v0") == "KeyChain-v0"
  # A config naming an unknown id is refused with the same "did you mean".
  from credit_jax.algos import grpo   # pylint: disable=g-import-not-at-top
  c = grpo.default_config()
  c.env_name = "bsuite/UmbrelaChain-v0"
  with pytest.raises(ValueError, match=r"^config\.env_name: unknown environment "
                                       r"'bsuite/UmbrelaChain-v0' \(did you mean "
                                       r"'bsuite/UmbrellaChain-v0'"):
    grpo.validate_config(c)


@pytest.mark.parametrize("gymnax_id", sorted(envs.GYMNAX_VARIANTS))
def test_gymnax_variant_differs_from_the_bsuite_task(gymnax_id):
  """What GYMNAX_VARIANTS says, checked: bsuite's task reports info["success"] and its
  episodes terminate; gymnax's version does neither where the note says so."""
  task, note = envs.GYMNAX_VARIANTS[gymnax_id]
  rows = {}
  for name in (task, gymnax_id):
    env, params = envs.make(name)
    key = jax.random.PRNGKey(0)
    _, state = env.reset(key, params)
    ended = []
    for t in range(130):
      key, k = jax.random.split(key)
      _, state, _, term, trunc, info = env.step(k, state, t % env.num_actions, params)
      ended.append((bool(term), bool(trunc)))
    rows[name] = (env, "success" in info, ended)
  assert rows[task][1] and not rows[gymnax_id][1] and "no info['success']" in note
  assert not any(trunc for _, trunc in rows[task][2])
  if gymnax_id == "UmbrellaChain-bsuite":   # 20 distractor bits against 0
    assert rows[task][0].obs_shape == (23,)
    assert rows[gymnax_id][0].observation_space(None).shape == (3,)
  if gymnax_id == "DiscountingChain-bsuite":   # bsuite's ends by termination at 100
    assert rows[task][2][99] == (True, False) and rows[gymnax_id][2][99] == (False, True)


def _train(*args):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "train.py"), *args],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_misspelt_env_id_on_the_command_line_is_one_line_without_a_note_first(tmp_path):
  proc = _train("--config=configs/grpo_keychain.py:small", f"--workdir={tmp_path}",
                "--config.env_name=KeyChian-v0")
  assert proc.returncode == 2
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and "note:" not in proc.stderr, proc.stderr
  assert "unknown environment 'KeyChian-v0' (did you mean 'KeyChain-v0'?)" in lines[0]


def test_horizon_on_ppo_points_at_num_steps():
  line = cli.flag_error_line(AttributeError("'horizon'"),
                             ["train.py", "--config=c.py", "--config.horizon=10"])
  assert line.startswith("--config.horizon=10: the config has no field 'horizon'; PPO ")
  assert "config.num_steps" in line and "across episode boundaries" in line
  # A typo of a field that exists keeps its own hint.
  other = cli.flag_error_line(AttributeError("'lrr'"), ["t", "--config.lrr=1"])
  assert other == "--config.lrr=1: the config has no field 'lrr'"


def test_damaged_checkpoint_line_has_no_spec_or_repr(tmp_path):
  spec = ('OUT_OF_RANGE: Error opening "zarr" driver: Error reading "update/.zarray" in '
          'OCDBT database at local file "/x/2/state/": Error reading Byte range [0, 291) '
          'of local file "/x/2/state/d/63e4": Requested byte range [0, 291) is not valid '
          'for value of size 145 [tensorstore_spec=\'{"context":{"cache_pool":{}}}\']')
  assert ckpt_lib._reason(ValueError(spec)) == (   # pylint: disable=protected-access
      "ValueError: OUT_OF_RANGE: ...: Requested byte range [0, 291) is not valid for "
      "value of size 145")
  obj = "<tensorstore.Future object at 0x7f3a2c1b9e30>"
  assert ckpt_lib._reason(RuntimeError(f"read failed: {obj}")) == (  # pylint: disable=protected-access
      "RuntimeError: read failed: Future")
  # The real thing: the newest checkpoint's array files cut in half.
  directory = str(tmp_path / "ck")
  state = {"w": np.arange(64, dtype=np.float32)}
  with ckpt_lib.Checkpointer(directory, max_to_keep=3) as ck:
    ck.save(1, state)
    ck.save(2, {"w": state["w"] + 1})
  for path in glob.glob(os.path.join(directory, "2", "state", "**", "d", "*"),
                        recursive=True):
    with open(path, "r+b") as f:
      f.truncate(os.path.getsize(path) // 2)
  logged = []
  with ckpt_lib.Checkpointer(directory, max_to_keep=3) as ck:
    step, _ = ck.restore_newest(jax.eval_shape(lambda: state), log=logged.append)
  assert step == 1 and len(logged) == 1, logged
  assert "tensorstore_spec" not in logged[0] and " object at 0x" not in logged[0]
  assert logged[0].startswith("checkpoint at update 2 does not restore (")
