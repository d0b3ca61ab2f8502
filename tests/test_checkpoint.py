"""Tests for credit_jax.runtime.checkpoint: round trips, retention, the config beside it, and
resuming past a damaged checkpoint."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax.runtime.checkpoint import CONFIG_FILE, CheckpointError, Checkpointer


def _state(offset):
  return {"params": {"w": jnp.arange(6.0).reshape(2, 3) + offset},
          "key": jax.random.PRNGKey(offset),
          "update": jnp.int32(offset)}


def test_save_restore_round_trip_and_retention(tmp_path):
  with Checkpointer(str(tmp_path / "ck"), max_to_keep=2, config={"lr": 0.1}) as ck:
    assert ck.latest_step() is None
    for step in (1, 2, 3):
      ck.save(step, _state(step))
    assert ck.all_steps() == [2, 3]
    assert ck.latest_step() == 3
    target = jax.eval_shape(lambda: _state(0))
    restored = ck.restore(3, target)
    jax.tree.map(np.testing.assert_array_equal, restored, _state(3))
    assert restored["key"].dtype == jnp.uint32
    with pytest.raises(ValueError, match="no checkpoint for step 1"):
      ck.restore(1, target)
  with open(tmp_path / "ck" / CONFIG_FILE) as f:
    assert json.load(f) == {"lr": 0.1}
  # The config is also saved inside every step directory.
  assert os.path.isdir(tmp_path / "ck" / "3" / "config")


def test_reopened_manager_sees_earlier_checkpoints(tmp_path):
  with Checkpointer(str(tmp_path), max_to_keep=3, config={"a": 1}) as ck:
    ck.save(5, _state(5))
  with Checkpointer(str(tmp_path), max_to_keep=3) as ck:
    assert ck.latest_step() == 5
    assert ck.saved_config() == {"a": 1}
    restored = ck.restore(5, _state(0))
    np.testing.assert_array_equal(restored["params"]["w"], _state(5)["params"]["w"])


def test_max_to_keep_must_be_positive(tmp_path):
  with pytest.raises(ValueError, match="max_to_keep"):
    Checkpointer(str(tmp_path), max_to_keep=0)


def _truncate_files(directory):
  for root, _, files in os.walk(directory):
    for name in files:
      path = os.path.join(root, name)
      with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def test_restore_newest_skips_and_moves_aside_a_damaged_checkpoint(tmp_path):
  directory = str(tmp_path / "ck")
  with Checkpointer(directory, max_to_keep=3) as ck:
    for step in (1, 2, 3):
      ck.save(step, _state(step))
  _truncate_files(os.path.join(directory, "3"))
  logged = []
  target = jax.eval_shape(lambda: _state(0))
  with Checkpointer(directory, max_to_keep=3) as ck:
    step, restored = ck.restore_newest(target, log=logged.append)
    assert step == 2
    jax.tree.map(np.testing.assert_array_equal, restored, _state(2))
    assert ck.all_steps() == [1, 2]
    ck.save(3, _state(30))   # the step can be saved again
    assert ck.restore_newest(target)[0] == 3
  assert len(logged) == 1 and logged[0].startswith("checkpoint at update 3 does not "
                                                   "restore (")
  assert logged[0].endswith(f"moved it to {directory}_corrupt/3")
  assert os.listdir(f"{directory}_corrupt/3")   # kept, not deleted
  with Checkpointer(directory, max_to_keep=3) as ck:   # a second one at the same step
    _truncate_files(os.path.join(directory, "3"))
    assert ck.restore_newest(target, log=logged.append)[0] == 2
  assert logged[-1].endswith(f"moved it to {directory}_corrupt/3.1")


def test_restore_newest_of_nothing_and_of_only_damaged_checkpoints(tmp_path):
  target = jax.eval_shape(lambda: _state(0))
  with Checkpointer(str(tmp_path / "a")) as ck:
    assert ck.restore_newest(target) == (None, None)
    ck.save(4, _state(4))
  _truncate_files(str(tmp_path / "a" / "4"))
  with Checkpointer(str(tmp_path / "a")) as ck:
    with pytest.raises(CheckpointError, match=r"no checkpoint in .* restores: update 4: "):
      ck.restore_newest(target)
    assert ck.all_steps() == [4]   # nothing moved


def test_damaged_config_file_is_a_clear_error(tmp_path):
  with Checkpointer(str(tmp_path), config={"a": 1}) as ck:
    ck.save(1, _state(1))
  with open(tmp_path / CONFIG_FILE, "w") as f:
    f.write('{"a": ')
  with Checkpointer(str(tmp_path)) as ck:
    with pytest.raises(CheckpointError, match=r"config.json is damaged \(JSONDecodeError"):
      ck.saved_config()
