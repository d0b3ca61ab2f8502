"""A user's own environment: `cj.envs.register` and "pkg.module:Class" ids, trained through
scripts/train.py; and what `success` means on gymnax's own ids."""
import json
import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest

import credit_jax as cj
from credit_jax import episodes, envs
from credit_jax.envs import success
from config_files import load_config
import toy_env

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
TESTS = os.path.dirname(os.path.abspath(__file__))


def test_register_validates_and_make_builds_it():
  envs.register("Guess-test-v0", toy_env.Guess)
  envs.register("Guess-test-v0", toy_env.Guess)          # the same factory again: fine
  assert "Guess-test-v0" in envs.registered_envs()
  env, params = envs.make("Guess-test-v0", num_actions=3, max_steps_in_episode=1)
  assert env.num_actions == 3 and params.max_steps_in_episode == 1
  assert envs.overrides_of("Guess-test-v0") == (("num_actions",), ("max_steps_in_episode",))
  with pytest.raises(ValueError, match="is registered already"):
    envs.register("Guess-test-v0", lambda: toy_env.Guess(2))
  with pytest.raises(ValueError, match="'CartPole-v1' is a gymnax id"):
    envs.register("CartPole-v1", toy_env.Guess)
  with pytest.raises(ValueError, match="has no option size"):
    envs.make("Guess-test-v0", size=3)


def test_import_path_ids_resolve_or_say_why_not():
  env, _ = envs.make("toy_env:Guess", num_actions=5)
  assert isinstance(env, toy_env.Guess) and env.num_actions == 5
  assert "toy_env:Guess" in envs.registered_envs()
  with pytest.raises(ValueError, match=r"cannot import 'no_such_module' .*PYTHONPATH"):
    envs.make("no_such_module:Env")
  with pytest.raises(ValueError, match="module 'toy_env' has no 'Missing'"):
    envs.make("toy_env:Missing")
  with pytest.raises(ValueError, match="unknown environment 'Nope-v0'.*register your own"):
    envs.make("Nope-v0")


def test_a_registered_env_trains_through_the_train_script(tmp_path):
  config = tmp_path / "guess.py"
  config.write_text(textwrap.dedent("""
      import credit_jax as cj
      from credit_jax.algos import ppo
      import toy_env

      cj.envs.register("Guess-v0", toy_env.Guess)

      def get_config(arg=None):
        c = ppo.default_config()
        c.env_name = "Guess-v0"
        c.total_timesteps = 4 * 128 * 20     # 20 updates
        c.chunk_updates = c.checkpoint_every = 10
        c.network.hidden_sizes = (16,)
        c.lr = 3e-3                          # PPO's 2.5e-4 needs more updates
        return c
      """))
  environ = dict(os.environ, JAX_PLATFORMS="cpu",
                 PYTHONPATH=os.pathsep.join([TESTS, REPO, os.environ.get("PYTHONPATH", "")]))
  proc = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "train.py"),
                         f"--config={config}", f"--workdir={tmp_path / 'run'}"],
                        cwd=REPO, env=environ, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  summary = json.load(open(tmp_path / "run" / "summary.json"))
  assert summary["env_name"] == "Guess-v0"
  # A CreditEnv reports success; random guessing among 4 succeeds 1/4 of the time.
  assert summary["final"]["success"] >= 0.5, summary


def test_success_rules_of_gymnax_ids():
  c = load_config("grpo_keychain", "small")
  with c.unlocked():
    c.env_kwargs = {}
  for name, expected in [("MemoryChain-bsuite", True), ("Catch-bsuite", True),
                         ("UmbrellaChain-bsuite", False), ("CartPole-v1", False)]:
    c.env_name = name
    assert episodes.has_success(c) is expected, name
  assert not success.RULES["UmbrellaChain-bsuite"].recipes_agree
  # [T = 4, B = 4]: terminated on +1 / on -1 after a +1 distractor / truncated on +1 /
  # terminated at t = 1 on +1, then the next episode's -1.
  rewards = jnp.array([[0., 1., 0., 0.], [0., 0., 0., 1.], [0., 0., 0., -1.],
                       [1., -1., 1., 0.]])
  terminated = jnp.array([[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0], [1, 1, 0, 0]], bool)
  valid = jnp.array([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0]], bool)
  out = success.final_reward_success(rewards, terminated, valid)
  np.testing.assert_array_equal(out, [True, False, False, True])
  env, _ = envs.make("UmbrellaChain-bsuite")
  np.testing.assert_array_equal(success.episode_success(
      "UmbrellaChain-bsuite", env, rewards, terminated, valid, {}), out)
  assert success.episode_success("CartPole-v1", envs.make("CartPole-v1")[0], rewards,
                                 terminated, valid, {}) is None
  keychain, _ = envs.make("KeyChain-v0")     # a CreditEnv: a positive return
  np.testing.assert_array_equal(success.episode_success(
      "KeyChain-v0", keychain, rewards, terminated, valid, {}), [True, False, True, True])


def test_success_follows_every_wrapper_to_the_credit_env():
  """Two nested wrappers (and three) around a CreditEnv: a positive return, as for the
  bare env; wrappers around a gymnax env with no rule: no success."""
  rewards = jnp.array([[0., 1.], [1., -1.]])
  terminated = jnp.array([[0, 0], [1, 1]], bool)
  valid = jnp.ones((2, 2), bool)
  keychain, _ = envs.make("KeyChain-v0")
  goalgrid, _ = envs.make("GoalGrid-v0")
  for env in (envs.HistoryWrapper(envs.HistoryWrapper(keychain, 2), 3),
              envs.HistoryWrapper(envs.DesiredGoalWrapper(goalgrid), 2),
              envs.HistoryWrapper(envs.HistoryWrapper(envs.DesiredGoalWrapper(goalgrid),
                                                      2), 2)):
    np.testing.assert_array_equal(success.episode_success(
        "Wrapped-v0", env, rewards, terminated, valid, {}), [True, False])
  cartpole = envs.HistoryWrapper(envs.HistoryWrapper(envs.make("CartPole-v1")[0], 2), 2)
  assert success.episode_success("Wrapped-v0", cartpole, rewards, terminated, valid,
                                 {}) is None


def test_cj_envs_exposes_register_publicly():
  assert {"register", "resolve", "success"} <= set(cj.envs.__all__)
