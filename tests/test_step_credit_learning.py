"""Seeded learning tests of the step-credit hooks in the recipes: GiGPO and tree groups
in GRPO, VinePPO in PPO (no value network: vf_coef = 0), on KeyChain T = 10, k = 2,
A = 4 (random success 1/16), two seeds vmapped."""
import jax
import ml_collections
import numpy as np
import pytest

from credit_jax import algos
from credit_jax.addons import gigpo, tree_groups, vine_ppo
from credit_jax.algos import grpo, ppo

T = 10
KEYCHAIN = {"horizon": T, "num_pivotal": 2, "num_actions": 4, "cue_delay": 0}


def _grpo(updates):
  c = grpo.default_config()
  c.env_kwargs, c.horizon = ml_collections.ConfigDict(KEYCHAIN), T
  c.num_updates, c.num_tasks, c.group_size, c.num_minibatches, c.lr = updates, 8, 8, 2, 1e-2
  return c


def _ppo(updates):
  c = ppo.default_config()
  c.env_name, c.env_kwargs = "KeyChain-v0", ml_collections.ConfigDict(KEYCHAIN)
  c.num_envs, c.num_steps, c.total_timesteps = 64, T, updates * 64 * T
  c.num_minibatches, c.update_epochs, c.lr, c.anneal_lr = 2, 2, 1e-2, False
  c.ent_coef, c.max_grad_norm, c.gamma, c.gae_lambda = 0.0, 1.0, 1.0, 0.95
  return c


def _final_success(config):
  train = algos.make_train(config)
  _, metrics = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), 2))
  return np.asarray(metrics["success"])[:, -3:].mean(axis=1), metrics


@pytest.mark.parametrize("name", ["gigpo", "tree", "vine"])
def test_learns_keychain(name):
  if name == "gigpo":
    config = gigpo.add_config(_grpo(15))
  elif name == "tree":
    config = tree_groups.add_config(_grpo(18), 2, (2, 5, 8))
  else:
    config = vine_ppo.add_config(_ppo(12), num_vines=4, every=1)
    config.vf_coef = 0.0
  success, metrics = _final_success(config)
  assert np.all(success >= 0.7), success
  steps = np.asarray(metrics["env_steps"])[0]
  if name == "tree":   # 8 (2 + 2*3 + 4*3 + 8*2) steps per task, against 8 * 8 * 10
    np.testing.assert_array_equal(steps, 8 * (2 + 6 + 12 + 16))
  elif name == "vine":   # the rollout's 64 * 10 plus 64 * 4 vines * (10 + 9 + ... + 1)
    np.testing.assert_array_equal(steps, 640 + 64 * 4 * 55)
    np.testing.assert_array_equal(np.asarray(metrics["vine_env_steps"])[0], 64 * 4 * 55)
  else:
    np.testing.assert_array_equal(steps, 8 * 8 * T)
    # Anchors by state: T groups when every trajectory answers alike (solved), more while
    # they differ in `all_correct` (the random start).
    groups = np.asarray(metrics["gigpo_groups"])
    assert np.all(groups >= T) and np.all(groups[:, 0] > T)
