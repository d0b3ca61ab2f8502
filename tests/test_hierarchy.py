"""Manager / worker (credit_jax/algos/hierarchy.py): the manager's credit at its time scale
on hand-computed trajectories, the worker's segments and relabels, the wrapper, and a
seeded learning test."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax.addons import curriculum
from credit_jax import envs
from credit_jax.algos import ConfigError, hierarchy
from config_files import load_config_module


def test_segment_returns_by_hand():
  # T = 6, K = 2: three segments; two episodes (columns).
  rewards = jnp.array([[0., 0.], [0., 0.], [0., 0.], [0., 1.], [1., 5.], [0., 5.]])
  valid = jnp.array([[1, 1], [1, 1], [1, 1], [1, 1], [1, 0], [0, 0]], bool)
  seg, ret, seg_valid = hierarchy.segment_returns(rewards, valid, 2, 0.5)
  np.testing.assert_allclose(seg, [[0, 0], [0, 1], [1, 0]])   # rewards after the end dropped
  np.testing.assert_array_equal(seg_valid, [[1, 1], [1, 1], [1, 0]])
  # G_2 = 1 | 0 (invalid); G_1 = 0 + .5 * 1 | 1 + .5 * 0; G_0 = .5 * G_1.
  np.testing.assert_allclose(ret, [[0.25, 0.5], [0.5, 1.0], [1.0, 0.0]])
  with pytest.raises(ValueError, match="segment_length"):
    hierarchy.segment_returns(rewards, valid, 4, 1.0)
  with pytest.raises(ValueError, match="share a shape"):
    hierarchy.segment_returns(rewards, valid[:, :1], 2, 1.0)


def test_segment_advantages_leave_one_out_by_hand():
  # One task, three members, two segments; member 2 has ended before segment 1.
  ret = jnp.array([[[1.0, 0.0, 2.0]], [[3.0, 1.0, 9.0]]])            # [J=2, N=1, G=3]
  ok = jnp.array([[[True, True, True]], [[True, True, False]]])
  adv = hierarchy.segment_advantages(ret, ok)
  np.testing.assert_allclose(adv[0, 0], [1 - 1.0, 0 - 1.5, 2 - 0.5])
  np.testing.assert_allclose(adv[1, 0], [3 - 1.0, 1 - 3.0, 0.0])
  alone = hierarchy.segment_advantages(ret, ok.at[1, 0, 1].set(False))
  np.testing.assert_allclose(alone[1, 0], [0.0, 0.0, 0.0])           # no one to compare


def test_manager_credit_on_a_tiny_trajectory_matches_a_loop():
  rng = np.random.default_rng(0)
  t, k, n, g, gamma = 12, 3, 2, 3, 0.8
  rewards = rng.integers(0, 2, (t, n, g)).astype(np.float32)
  ends = rng.integers(1, t + 1, (n, g))
  valid = np.arange(t)[:, None, None] < ends[None]
  _, ret, sv = hierarchy.segment_returns(rewards, valid, k, gamma)
  adv = np.asarray(hierarchy.segment_advantages(ret, sv))
  j_len = t // k
  ref_ret = np.zeros((j_len, n, g))
  for i in range(n):
    for m in range(g):
      run = 0.0
      for j in reversed(range(j_len)):
        if valid[j * k, i, m]:
          r = sum(rewards[s, i, m] for s in range(j * k, j * k + k) if valid[s, i, m])
          run = r + gamma * run
        else:
          run = 0.0
        ref_ret[j, i, m] = run
  np.testing.assert_allclose(ret, ref_ret, rtol=1e-6)
  for j in range(j_len):
    for i in range(n):
      for m in range(g):
        others = [ref_ret[j, i, o] for o in range(g) if o != m and valid[j * k, i, o]]
        want = ref_ret[j, i, m] - np.mean(others) if valid[j * k, i, m] and others else 0.0
        np.testing.assert_allclose(adv[j, i, m], want, rtol=1e-5, atol=1e-6)


def test_first_hit_mask_by_hand():
  hit = jnp.array([0, 1, 1, 0, 0, 0], bool)[:, None]
  valid = jnp.array([1, 1, 1, 1, 1, 0], bool)[:, None]
  mask, reached = hierarchy.first_hit_mask(hit, valid, 3)
  np.testing.assert_array_equal(mask[:, 0], [1, 1, 0, 1, 1, 0])
  np.testing.assert_array_equal(reached[:, 0], [True, False])


def test_subgoal_cells_and_wrapper():
  cells = hierarchy.subgoal_cells(7, 3)
  assert {tuple(c) for c in cells} == {(r, c) for r in (0, 3, 6) for c in (0, 3, 6)}
  env, params = envs.make("GoalGrid-v0", size=7)
  w = hierarchy.SubgoalWrapper(env, cells, 2)
  obs, state = w.reset_env(jax.random.PRNGKey(0), params)
  assert obs.shape == (2 * 49 + 9 + 1,) and float(obs[-1]) == 1.0
  pos = np.asarray(state.inner.pos)
  action = 4 * 5 + 2                                  # subgoal 5, move down
  obs, state, _, _, info = w.step_env(jax.random.PRNGKey(1), state, action, params)
  assert int(state.subgoal) == 5 and float(obs[-1]) == 0.0    # t = 1: mid-segment
  assert float(obs[2 * 49 + 5]) == 1.0
  np.testing.assert_array_equal(info["achieved_goal"], [min(pos[0] + 1, 6), pos[1]])
  obs, state, _, _, _ = w.step_env(jax.random.PRNGKey(2), state, 0, params)
  assert float(obs[-1]) == 1.0                        # t = 2: the next segment starts


def tiny_config():
  c = hierarchy.default_config()
  c.env_kwargs.size, c.env_kwargs.max_steps_in_episode = 5, 12
  c.horizon, c.segment_length, c.subgoal_stride = 12, 4, 2
  c.num_tasks, c.group_size, c.num_minibatches, c.update_epochs = 2, 2, 1, 1
  c.network.hidden_sizes, c.num_updates = (8,), 2
  return c


@pytest.mark.parametrize("field,value", [("segment_length", 5), ("group_size", 1),
                                         ("env_name", "KeyChain-v0"),
                                         ("manager_gamma", 1.5)])
def test_bad_fields_are_named(field, value):
  c = tiny_config()
  c[field] = value
  with pytest.raises(ConfigError, match=f"config.{field}"):
    hierarchy.validate_config(c)
  c = curriculum.add_config(tiny_config())
  c.curriculum.kind = "gated"
  with pytest.raises(ConfigError, match="curriculum.kind"):
    hierarchy.validate_config(c)


def test_build_data_examples_are_consistent():
  train = hierarchy.make_train(tiny_config())
  state, m = jax.jit(train)(jax.random.PRNGKey(3))
  for name in ("loss", "success", "worker_success", "relabeled_frac", "env_steps"):
    assert np.all(np.isfinite(m[name])), name
  assert np.all(np.asarray(m["env_steps"]) <= 2 * 2 * 12)
  assert np.all((np.asarray(m["worker_success"]) >= 0) & (np.asarray(m["worker_success"]) <= 1))


def test_hierarchy_learns_goalgrid():
  """Seeded learning test: 10x10 GoalGrid, corner goals, 60 steps (K = 10); random 20%."""
  c = hierarchy.default_config()
  c.env_kwargs.size, c.env_kwargs.max_steps_in_episode = 10, 60
  c.horizon, c.segment_length, c.subgoal_stride = 60, 10, 3
  c.num_updates = 40
  _, m = jax.jit(hierarchy.make_train(c))(jax.random.PRNGKey(0))
  s = np.asarray(m["success"])
  assert float(np.mean(s[:3])) < 0.5
  assert float(np.mean(s[-5:])) >= 0.8


def test_config_file_variants():
  module = load_config_module("hierarchy_goalgrid")
  hierarchy.validate_config(module.get_config())
  c = module.get_config("small")
  c.worker_relabel, c.num_updates = False, 2
  assert module.get_config("norelabel").worker_relabel is False
  _, m = jax.jit(hierarchy.make_train(c))(jax.random.PRNGKey(0))
  np.testing.assert_array_equal(m["relabeled_frac"], 0.0)   # relabeling off
  assert np.all(np.isfinite(m["loss"]))
  with pytest.raises(ValueError, match="variant"):
    module.get_config("large")
