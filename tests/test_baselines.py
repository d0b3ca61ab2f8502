"""Tests for credit_jax.baselines: group advantages against explicit loops, running baselines."""
import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import credit_jax as cj
from credit_jax import baselines


def loop_advantages(rewards, kind, eps=1e-6):
  """One group at a time, one sample at a time, in float64."""
  rewards = np.asarray(rewards, np.float64)
  flat = rewards.reshape(-1, rewards.shape[-1])
  out = np.zeros_like(flat)
  for g, group in enumerate(flat):
    k = len(group)
    mean = sum(group) / k
    for i, r in enumerate(group):
      if kind == "rloo":
        others = [group[j] for j in range(k) if j != i]
        out[g, i] = r - sum(others) / (k - 1)
      elif kind == "grpo":
        std = np.sqrt(sum((x - mean) ** 2 for x in group) / (k - 1))
        out[g, i] = (r - mean) / (std + eps)
      else:
        out[g, i] = r - mean
  return out.reshape(rewards.shape)


@pytest.mark.parametrize("kind", baselines.KINDS)
def test_matches_explicit_loop(kind):
  rng = np.random.default_rng(0)
  rewards = rng.normal(size=(2, 3, 5)).astype(np.float32)
  adv, degenerate = cj.group_advantages(rewards, kind=kind)
  assert adv.shape == (2, 3, 5) and degenerate.shape == (2, 3)
  assert not np.any(degenerate)
  np.testing.assert_allclose(adv, loop_advantages(rewards, kind), rtol=1e-5, atol=1e-5)


def test_grpo_uses_sample_std():
  adv, _ = cj.group_advantages(jnp.array([0.0, 1.0]), kind="grpo", eps=0.0)
  np.testing.assert_allclose(adv, [-1 / np.sqrt(2), 1 / np.sqrt(2)], rtol=1e-6)


def test_rloo_is_rescaled_mean_baseline():
  rewards = jnp.array([[1.0, 0.0, 0.0, 1.0, 1.0]])
  rloo, _ = cj.group_advantages(rewards, kind="rloo")
  centred, _ = cj.group_advantages(rewards, kind="mean")
  np.testing.assert_allclose(rloo, centred * 5 / 4, rtol=1e-6)


@pytest.mark.parametrize("kind", baselines.KINDS)
@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, -3.7, 1e8])
def test_degenerate_groups_are_exactly_zero(kind, value):
  # 0.1 and 1e8 do not survive `r - mean` exactly in float32; the result must still be 0.
  rewards = jnp.stack([jnp.full((7,), value, jnp.float32),
                       jnp.array([0, 0, 1, 0, 0, 0, 0], jnp.float32)])
  for eps in (1e-6, 0.0):
    adv, degenerate = cj.group_advantages(rewards, kind=kind, eps=eps)
    np.testing.assert_array_equal(degenerate, [True, False])
    assert np.all(np.asarray(adv[0]) == 0.0)
    assert np.all(np.isfinite(np.asarray(adv)))
    assert np.any(np.asarray(adv[1]) != 0.0)


@hypothesis.settings(max_examples=40, deadline=None, derandomize=True)
@hypothesis.given(kind=st.sampled_from(baselines.KINDS),
                  k=st.sampled_from((2, 4, 8)),
                  p=st.sampled_from((0.0, 0.05, 0.5, 1.0)),
                  seed=st.integers(0, 2**16))
def test_property_binary_rewards(kind, k, p, seed):
  # Binary success rewards, as in GRPO on a verifiable task: many groups are degenerate.
  rewards = (np.random.default_rng(seed).random((16, k)) < p).astype(np.float32)
  adv, degenerate = cj.group_advantages(rewards, kind=kind)
  adv = np.asarray(adv)
  assert np.all(np.isfinite(adv))
  np.testing.assert_array_equal(degenerate, rewards.min(-1) == rewards.max(-1))
  np.testing.assert_array_equal(np.all(adv == 0, axis=-1), np.asarray(degenerate))
  np.testing.assert_allclose(adv.sum(-1), 0.0, atol=1e-5)  # every kind is centred
  np.testing.assert_array_equal(np.sign(adv), np.sign(loop_advantages(rewards, kind)))
  np.testing.assert_allclose(adv, loop_advantages(rewards, kind), rtol=1e-5, atol=1e-5)


def test_jit_and_vmap_over_eps():
  rewards = jnp.array([[0.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
  eager, _ = cj.group_advantages(rewards, kind="grpo", eps=0.5)
  jitted, _ = jax.jit(lambda r, e: cj.group_advantages(r, kind="grpo", eps=e))(rewards, 0.5)
  np.testing.assert_allclose(jitted, eager, rtol=1e-6)
  swept, _ = jax.vmap(lambda e: cj.group_advantages(rewards, kind="grpo", eps=e))(
      jnp.array([0.0, 0.5]))
  np.testing.assert_allclose(swept[1], eager, rtol=1e-6)
  np.testing.assert_allclose(swept[0, 0], loop_advantages(rewards[0], "grpo", 0.0),
                             rtol=1e-5)
  np.testing.assert_array_equal(swept[0, 1], 0.0)


@pytest.mark.parametrize("kind", baselines.KINDS)
def test_gradients_are_finite_on_degenerate_groups(kind):
  rewards = jnp.array([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
  weights = jnp.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
  grad = jax.grad(lambda r: jnp.sum(
      weights * cj.group_advantages(r, kind=kind, eps=0.0)[0]))(rewards)
  assert np.all(np.isfinite(np.asarray(grad)))
  assert np.any(np.asarray(grad[1]) != 0.0)


@pytest.mark.parametrize("rewards,kwargs,match", [
    (jnp.zeros((3, 1)), {}, r"K >= 2 samples.*K = 1"),
    (jnp.zeros((0,)), {}, r"K >= 2"),
    (jnp.float32(1.0), {}, r"group on the last axis"),
    (jnp.zeros((3, 4), jnp.int32), {}, r"rewards must have a floating dtype"),
    (jnp.zeros((3, 4)), {"kind": "ppo"}, r"kind must be one of"),
    (jnp.zeros((3, 4)), {"eps": -1.0}, r"eps must lie in"),
])
def test_group_bad_input(rewards, kwargs, match):
  with pytest.raises(ValueError, match=match):
    cj.group_advantages(rewards, **kwargs)


# ----------------------------------------------------------------------------------
# Per-task running baseline.


def loop_running_baseline(num_tasks, batches, decay):
  mean = np.zeros(num_tasks)
  count = np.zeros(num_tasks, int)
  for ids, rewards in batches:
    for task in range(num_tasks):
      mine = rewards[ids == task]
      if len(mine):
        count[task] += len(mine)
        step = max(1 - decay, len(mine) / count[task])
        mean[task] += step * (mine.mean() - mean[task])
  return mean, count


def test_first_update_is_unbiased_and_unseen_tasks_stay():
  state = cj.running_baseline_init(3)
  ids = jnp.array([0, 0, 2])
  rewards = jnp.array([1.0, 3.0, 5.0])
  state = cj.running_baseline_update(state, ids, rewards, decay=0.99)
  np.testing.assert_allclose(state.mean, [2.0, 0.0, 5.0])
  np.testing.assert_array_equal(state.count, [2, 0, 1])


def test_running_baseline_matches_loop_under_jit_and_scan():
  rng = np.random.default_rng(1)
  num_tasks, decay = 4, 0.8
  batches = [(rng.integers(0, num_tasks, size=6), rng.normal(size=6).astype(np.float32))
             for _ in range(30)]
  want_mean, want_count = loop_running_baseline(num_tasks, batches, decay)
  ids = jnp.stack([b[0] for b in batches])
  rewards = jnp.stack([b[1] for b in batches])

  @jax.jit
  def run(decay):
    def step(state, batch):
      adv = cj.running_baseline_advantages(state, *batch)
      return cj.running_baseline_update(state, *batch, decay=decay), adv
    return jax.lax.scan(step, cj.running_baseline_init(num_tasks), (ids, rewards))

  state, adv = run(decay)
  np.testing.assert_allclose(state.mean, want_mean, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(state.count, want_count)
  # The last batch is scored against the baseline from before it.
  before, _ = loop_running_baseline(num_tasks, batches[:-1], decay)
  np.testing.assert_allclose(adv[-1], batches[-1][1] - before[batches[-1][0]], rtol=1e-5,
                             atol=1e-5)


def test_running_baseline_tracks_a_shift():
  state = cj.running_baseline_init(1)
  ids = jnp.zeros((1,), jnp.int32)
  for reward in [0.0] * 50 + [1.0] * 200:
    state = cj.running_baseline_update(state, ids, jnp.array([reward]), decay=0.9)
  assert float(state.mean[0]) > 0.99  # an EMA forgets; a plain running mean would be 0.8


def test_running_baseline_bad_input():
  state = cj.running_baseline_init(2)
  with pytest.raises(ValueError, match="num_tasks must be a positive int"):
    cj.running_baseline_init(0)
  with pytest.raises(ValueError, match=r"task_ids must lie in \[0, 2\)"):
    cj.running_baseline_update(state, jnp.array([0, 2]), jnp.array([1.0, 1.0]))
  with pytest.raises(ValueError, match="task_ids must be an integer array"):
    cj.running_baseline_update(state, jnp.array([0.0]), jnp.array([1.0]))
  with pytest.raises(ValueError, match="same shape"):
    cj.running_baseline_advantages(state, jnp.array([0, 1]), jnp.array([1.0]))
  with pytest.raises(ValueError, match="decay must lie in"):
    cj.running_baseline_update(state, jnp.array([0]), jnp.array([1.0]), decay=1.5)
