"""Tests for credit_jax.replay: masked ring writes, uniform sampling, jit and vmap."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import replay


def _example():
  return {"x": jnp.zeros((2,)), "i": jnp.zeros((), jnp.int32)}


def _batch(values):
  values = jnp.asarray(values, jnp.int32)
  return {"x": jnp.stack([values, -values], axis=1).astype(jnp.float32), "i": values}


def test_masked_add_writes_only_masked_rows_in_order():
  state = replay.init(_example(), capacity=5)
  state = replay.add(state, _batch([1, 2, 3, 4]), jnp.array([True, False, True, True]))
  assert int(state.size) == 3 and int(state.position) == 3
  np.testing.assert_array_equal(state.data["i"][:3], [1, 3, 4])
  np.testing.assert_array_equal(state.data["x"][:3, 1], [-1, -3, -4])
  np.testing.assert_array_equal(state.data["i"][3:], [0, 0])  # untouched slots


def test_ring_wraps_and_overwrites_the_oldest():
  state = replay.init(_example(), capacity=4)
  state = replay.add(state, _batch([1, 2, 3]))
  state = replay.add(state, _batch([4, 5, 6]))
  assert int(state.size) == 4 and int(state.position) == 2
  np.testing.assert_array_equal(sorted(np.asarray(state.data["i"])), [3, 4, 5, 6])


def test_more_rows_than_capacity_keeps_the_last_ones():
  state = replay.init(_example(), capacity=3)
  state = replay.add(state, _batch([1, 2, 3, 4, 5, 6, 7]),
                     jnp.array([True, True, True, True, False, True, True]))
  assert int(state.size) == 3
  np.testing.assert_array_equal(sorted(np.asarray(state.data["i"])), [4, 6, 7])


def test_sample_draws_only_filled_slots_uniformly():
  state = replay.init(_example(), capacity=100)
  state = replay.add(state, _batch([7, 8, 9]))
  items = replay.sample(state, jax.random.PRNGKey(0), 3000)
  values, counts = np.unique(np.asarray(items["i"]), return_counts=True)
  np.testing.assert_array_equal(values, [7, 8, 9])
  assert np.all(np.abs(counts / 3000 - 1 / 3) < 0.05)
  np.testing.assert_array_equal(items["x"][:, 0], items["i"])  # rows stay together


def test_jit_and_vmap_over_independent_buffers():
  def fill_and_sample(key, offset):
    state = replay.init(_example(), capacity=8)
    state = replay.add(state, _batch(jnp.arange(4) + offset), jnp.arange(4) % 2 == 0)
    return state.size, replay.sample(state, key, 16)["i"]

  keys = jax.random.split(jax.random.PRNGKey(1), 3)
  sizes, samples = jax.jit(jax.vmap(fill_and_sample))(keys, jnp.array([0, 10, 20]))
  np.testing.assert_array_equal(sizes, [2, 2, 2])
  for b, offset in enumerate([0, 10, 20]):
    assert set(np.asarray(samples[b]).tolist()) <= {offset, offset + 2}
    size, sample = fill_and_sample(keys[b], offset)
    np.testing.assert_array_equal(sample, samples[b])


def test_bad_arguments_are_named():
  state = replay.init(_example(), capacity=4)
  with pytest.raises(ValueError, match="capacity"):
    replay.init(_example(), capacity=0)
  with pytest.raises(ValueError, match="mask must have shape"):
    replay.add(state, _batch([1, 2]), jnp.ones((3,), bool))
  with pytest.raises(ValueError, match="batch must be the buffer's items"):
    replay.add(state, {"x": jnp.zeros((2, 3)), "i": jnp.zeros((2,), jnp.int32)})
  with pytest.raises(ValueError, match="batch_size"):
    replay.sample(state, jax.random.PRNGKey(0), 0)
