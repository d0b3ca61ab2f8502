"""Tests for credit_jax/experiments/critique/memory.py against a plain-Python reference store."""
import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax.experiments.critique import memory


class RefStore:
  """OrderedDict reference: insertion order (fifo) or recency order (lru)."""

  def __init__(self, capacity, eviction):
    self.d, self.cap, self.lru = collections.OrderedDict(), capacity, eviction == "lru"

  def write(self, k, v):
    if k in self.d:
      self.d[k] = v
      if self.lru:
        self.d.move_to_end(k)
      return
    if len(self.d) == self.cap:
      self.d.popitem(last=False)
    self.d[k] = v

  def read(self, k):
    if k in self.d:
      if self.lru:
        self.d.move_to_end(k)
      return self.d[k], True
    return 0.0, False


@pytest.mark.parametrize("eviction", memory.EVICTIONS)
def test_random_ops_match_reference_under_jit(eviction):
  rng = np.random.default_rng(0)
  mem, ref = memory.init(3, (), eviction), RefStore(3, eviction)
  jwrite, jread = jax.jit(memory.write), jax.jit(memory.read)
  for _ in range(120):
    k = int(rng.integers(0, 6))
    if rng.random() < 0.5:
      v = float(rng.integers(1, 100))
      mem = jwrite(mem, k, jnp.float32(v))
      ref.write(k, v)
    else:
      v, hit, mem = jread(mem, k)
      rv, rhit = ref.read(k)
      assert bool(hit) == rhit and float(v) == rv
    assert sorted(int(x) for x in mem.keys if x >= 0) == sorted(ref.d)


def test_eviction_order_fifo_vs_lru():
  for eviction, survivor in (("fifo", 2), ("lru", 1)):
    mem = memory.init(2, (2,), eviction)
    mem = memory.write(mem, 1, jnp.ones(2))
    mem = memory.write(mem, 2, 2 * jnp.ones(2))
    _, hit, mem = memory.read(mem, 1)          # refreshes key 1 under lru only
    assert bool(hit)
    mem = memory.write(mem, 3, 3 * jnp.ones(2))
    keys = set(int(k) for k in mem.keys)
    assert keys == {3, survivor}, (eviction, keys)
    v, hit = memory.lookup(mem, survivor)
    np.testing.assert_allclose(v, survivor * np.ones(2))
    _, miss = memory.lookup(mem, 3 - survivor)
    assert not bool(miss)


def test_overwrite_keeps_fifo_age():
  mem = memory.init(2, (), "fifo")
  for k in (1, 2):
    mem = memory.write(mem, k, jnp.float32(k))
  mem = memory.write(mem, 1, jnp.float32(10.0))  # overwrite: key 1 is still oldest
  mem = memory.write(mem, 3, jnp.float32(3.0))
  assert set(int(k) for k in mem.keys) == {2, 3}


def test_vmap_over_stores_and_disabled_writes():
  mems = jax.vmap(lambda _: memory.init(4, (3,), "lru"))(jnp.arange(5))
  keys = jnp.arange(5) % 2
  vals = jnp.arange(15, dtype=jnp.float32).reshape(5, 3)
  enabled = jnp.array([True, True, False, True, True])
  mems = jax.jit(jax.vmap(memory.write))(mems, keys, vals, enabled)
  got, hit, mems = jax.jit(jax.vmap(memory.read))(mems, keys)
  np.testing.assert_array_equal(hit, enabled)
  np.testing.assert_allclose(got, np.where(enabled[:, None], vals, 0.0))
  np.testing.assert_array_equal(jax.vmap(memory.size)(mems), enabled.astype(int))


def test_read_of_empty_key_misses_and_checks():
  mem = memory.init(2, (), "fifo")
  _, hit, _ = memory.read(mem, memory.EMPTY)
  assert not bool(hit)
  mem = memory.write(mem, memory.EMPTY, jnp.float32(1.0))   # ignored
  assert int(memory.size(mem)) == 0
  with pytest.raises(ValueError, match="value must have shape"):
    memory.write(mem, 1, jnp.ones(2))
  with pytest.raises(ValueError, match="eviction"):
    memory.init(2, (), "random")
  with pytest.raises(ValueError, match="capacity"):
    memory.init(0)
