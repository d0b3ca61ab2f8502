"""A run through the runtime validates its config once and makes its environment once
(issue 45): `credit_jax/runtime/run.py` validates, and the recipe builds its `Train` on
the `Checked` config (`credit_jax/algos/train.py`) with the environment the validation
made. Counted for PPO, GRPO and REINFORCE, on a fresh run and on a second run of the same
config (whose compiled functions the runner keeps)."""
import collections

import ml_collections
import pytest

from credit_jax import algos, envs
from credit_jax.algos import train as train_lib
from credit_jax.runtime import run as runner


def _tiny(algo):
  c = algos.RECIPES[algo].default_config()
  c.env_name = "KeyChain-v0"
  c.env_kwargs = ml_collections.ConfigDict({"horizon": 6, "num_pivotal": 1,
                                            "num_actions": 2})
  if algo == "ppo":
    c.num_envs, c.num_steps, c.total_timesteps = 2, 6, 2 * 6
    c.num_minibatches, c.update_epochs = 1, 1
  else:
    c.horizon, c.num_updates = 6, 1
    if algo == "grpo":
      c.num_tasks, c.group_size, c.num_minibatches, c.update_epochs = 2, 2, 1, 1
    else:
      c.num_envs = 2
  c.network.hidden_sizes = (4,)
  c.chunk_updates, c.checkpoint_every = 1, 0
  return c


@pytest.fixture
def counts(monkeypatch):
  """Calls of `envs.make` and `train.validate` (every recipe's validation) while the test
  runs; the runner's kept functions start empty."""
  seen = collections.Counter()
  make, validate = envs.make, train_lib.validate

  def counted_make(*args, **kwargs):
    seen["envs.make"] += 1
    return make(*args, **kwargs)

  def counted_validate(*args, **kwargs):
    seen["validate"] += 1
    return validate(*args, **kwargs)

  monkeypatch.setattr(envs, "make", counted_make)
  monkeypatch.setattr(train_lib, "validate", counted_validate)
  monkeypatch.setattr(runner, "_SHARED", collections.OrderedDict())
  return seen


@pytest.mark.parametrize("algo", ["ppo", "grpo", "reinforce"])
def test_a_run_validates_once_and_makes_its_environment_once(algo, counts, tmp_path):
  c = _tiny(algo)
  runner.train_and_evaluate(c, str(tmp_path / "a"), log=lambda _: None)
  assert dict(counts) == {"envs.make": 1, "validate": 1}
  counts.clear()   # the same config again: the runner's Train is reused, still validated
  runner.train_and_evaluate(c, str(tmp_path / "b"), log=lambda _: None)
  assert dict(counts) == {"envs.make": 1, "validate": 1}


def test_make_train_builds_on_a_checked_config_without_validating_again(counts):
  c = _tiny("ppo")
  checked = algos.validate_config(c)
  assert isinstance(checked, train_lib.Checked) and checked.config is c
  assert dict(counts) == {"envs.make": 1, "validate": 1}
  train = algos.make_train(checked)
  assert dict(counts) == {"envs.make": 1, "validate": 1}
  assert train.config is c
  algos.make_train(c)   # a plain config: validated (and its environment made) here
  assert dict(counts) == {"envs.make": 2, "validate": 2}
  with pytest.raises(ValueError, match="^features: a Checked config"):
    algos.make_train(checked, features=(object(),))
