"""Tests for the search-then-train recipe (credit_jax.algos.search_then_train).

Shapes come from configs/search_then_train_keychain.py's "small" variant (KeyChain T=6,
k=2, 4 tasks x 2 episodes, 16 simulations), where sampling almost always fails and search
often succeeds.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import nets
from credit_jax.algos import train as train_lib
from credit_jax.algos import search_then_train as stt
from config_files import load_config


def _config(**overrides):
  c = load_config("search_then_train_keychain", "small")
  for k, v in overrides.items():
    c[k] = v
  return c


def test_group_rollout_reports_the_start_states_it_used():
  c = _config()
  env, env_params = train_lib.make_env(c)
  network, obs_shape = train_lib.make_network(c, env, env_params, value_head=False)
  params = train_lib.init_params(network, jax.random.PRNGKey(0), obs_shape)
  traj, obs0, states0 = stt.group_rollout(env, env_params, nets.make_policy_fn(network),
                                          params, jax.random.PRNGKey(5), 3, 2, 6)
  for member in range(2):
    np.testing.assert_array_equal(traj.obs[0, :, member], obs0)
  # KeyChain's cues live in the state: the first pivotal answers must match.
  np.testing.assert_array_equal(traj.info["correct_action"][:, :, 0].max(0),
                                traj.info["correct_action"][:, :, 1].max(0))
  assert jax.tree.leaves(states0)[0].shape[0] == 3


@pytest.mark.parametrize("field,value,match", [
    ("search_tasks", 5, "search_tasks"),
    ("search_weight", 1.5, "search_weight"),
    ("search_every", -1, "search_every"),
    ("loss_aggregation", "sequence_mean", "loss_aggregation"),
    ("search_rollout", "beam", "search_rollout"),
])
def test_config_errors_name_the_field(field, value, match):
  with pytest.raises(train_lib.ConfigError, match=match):
    stt.make_train(_config(**{field: value}))


def test_found_successes_join_the_batch_with_bounded_weight():
  train = stt.make_train(_config())
  state = train.init(jax.random.PRNGKey(0))
  update = jax.jit(train.update)
  hp = dict(train.default_hparams)
  _, m = update(state, hp)
  assert float(m["search_ran"]) == 1.0
  # Every all-failed group is searched (the smoke config searches up to all 4 tasks);
  # at random success 1/16 and K = 2, this seed leaves at least one group all-failed.
  failed = round(float(m["all_failed_frac"]) * 4)
  assert failed >= 1
  assert float(m["searched_tasks"]) == failed
  assert float(m["search_found"]) > 0.0
  assert 0 < float(m["search_env_steps"]) <= 4 * 16 * 6
  np.testing.assert_allclose(float(m["searched_logp_step"]), np.log(0.25), atol=0.05)
  moved = float(m["searched_logp_episode_after"] - m["searched_logp_episode"])
  assert moved > 0.0   # the update raised the searched episodes' probability
  # With weight 0 the searched episodes still reshape the group advantages (the failures
  # get a negative one) but carry no gradient themselves: they move less.
  _, m0 = update(state, dict(hp, search_weight=jnp.float32(0.0)))
  assert float(m0["search_found"]) == float(m["search_found"])
  assert float(m0["searched_logp_episode_after"] - m0["searched_logp_episode"]) < moved


def test_search_every_and_the_control_arm_over_vmapped_seeds():
  keys = jax.random.split(jax.random.PRNGKey(1), 2)
  for every, expect in ((2, [1.0, 0.0, 1.0, 0.0]), (0, [0.0] * 4)):
    train = stt.make_train(_config(search_every=every))
    _, m = jax.jit(jax.vmap(train))(keys)
    np.testing.assert_array_equal(m["search_ran"], [expect, expect])
    assert all(np.isfinite(np.asarray(v)).all() for v in m.values())
    if every == 0:
      assert float(np.sum(m["search_env_steps"])) == 0.0
      assert float(np.sum(m["searched_tasks"])) == 0.0

