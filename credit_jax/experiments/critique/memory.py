"""Persistent memory: a jittable key-value store that survives across episodes.

"If the agent can pull 'the test runner needs the --no-cache flag' from memory at step 3,
the trajectory needed to solve the task is much shorter." A `Memory` holds up to
`capacity` entries `key -> value` (integer keys, e.g. a task id; float32 values of a fixed
shape, e.g. a task's answers), is written at the end of an episode and read by the policy
at any step. It is a pytree of fixed-shape arrays, so reads and writes jit, vmap (one
store per environment or per seed) and live in a scan carry or a training state.

  mem = memory.init(capacity=8, value_shape=(4,))
  mem = memory.write(mem, task_id, answers)          # insert or overwrite
  value, hit, mem = memory.read(mem, task_id)        # value zeros when missing

When a new key arrives and every slot is taken, one entry is evicted (`eviction`, a
static choice): "fifo" drops the entry inserted first (overwriting a key does not
refresh it); "lru" drops the entry least recently written or read (a hit refreshes it).
Ties cannot happen: every write and hit takes a fresh stamp from the store's clock.
"""
from __future__ import annotations

from typing import Tuple

import jax
import jax.numpy as jnp
from flax import struct

Array = jax.Array
EVICTIONS = ("fifo", "lru")
EMPTY = -1


@struct.dataclass
class Memory:
  keys: Array      # [C] int32, EMPTY in free slots
  values: Array    # [C, *value_shape] float32
  stamps: Array    # [C] int32, when the entry was inserted (fifo) or last used (lru)
  clock: Array     # [] int32, the next stamp
  eviction: str = struct.field(pytree_node=False, default="fifo")

  @property
  def capacity(self) -> int:
    return self.keys.shape[-1]


def init(capacity: int, value_shape: Tuple[int, ...] = (), eviction: str = "fifo") -> Memory:
  """An empty store of `capacity` slots of float32 values of shape `value_shape`."""
  if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
    raise ValueError(f"capacity must be an int >= 1, got {capacity!r}")
  if eviction not in EVICTIONS:
    raise ValueError(f"eviction must be one of {EVICTIONS}, got {eviction!r}")
  return Memory(keys=jnp.full((capacity,), EMPTY, jnp.int32),
                values=jnp.zeros((capacity,) + tuple(value_shape), jnp.float32),
                stamps=jnp.zeros((capacity,), jnp.int32), clock=jnp.zeros((), jnp.int32),
                eviction=eviction)


def _check(mem: Memory, value=None) -> None:
  if mem.keys.ndim != 1:
    raise ValueError(f"memory.keys must be [C] (vmap over stores), got {mem.keys.shape}")
  if value is not None and jnp.shape(value) != mem.values.shape[1:]:
    raise ValueError(f"value must have shape {mem.values.shape[1:]}, got {jnp.shape(value)}")


def lookup(mem: Memory, key) -> Tuple[Array, Array]:
  """(value [*value_shape], hit [] bool) for `key` without touching the stamps."""
  _check(mem)
  match = mem.keys == jnp.asarray(key, jnp.int32)
  hit = jnp.any(match) & (jnp.asarray(key, jnp.int32) != EMPTY)
  slot = jnp.argmax(match)
  return jnp.where(hit, mem.values[slot], jnp.zeros_like(mem.values[slot])), hit


def read(mem: Memory, key) -> Tuple[Array, Array, Memory]:
  """(value, hit, memory) for `key` ([] int); a hit refreshes the entry under "lru".

  Returns:
    value: [*value_shape] float32, zeros on a miss; hit: [] bool; the updated store.
  """
  value, hit = lookup(mem, key)
  if mem.eviction == "lru":
    slot = jnp.argmax(mem.keys == jnp.asarray(key, jnp.int32))
    mem = mem.replace(stamps=jnp.where(hit, mem.stamps.at[slot].set(mem.clock), mem.stamps),
                      clock=mem.clock + hit.astype(jnp.int32))
  return value, hit, mem


def write(mem: Memory, key, value, enabled=True) -> Memory:
  """Stores `value` ([*value_shape]) under `key` ([] int >= 0) where `enabled` ([] bool).

  An existing key is overwritten in place; a new key takes a free slot, else evicts the
  entry with the oldest stamp (see the module doc).
  """
  _check(mem, value)
  key = jnp.asarray(key, jnp.int32)
  match = mem.keys == key
  present = jnp.any(match)
  free = mem.keys == EMPTY
  # Priority: the key's own slot, else the first free slot, else the oldest stamp.
  oldest = jnp.argmin(jnp.where(free, jnp.iinfo(jnp.int32).max, mem.stamps))
  slot = jnp.where(present, jnp.argmax(match), jnp.where(jnp.any(free), jnp.argmax(free),
                                                         oldest))
  enabled = jnp.asarray(enabled) & (key != EMPTY)
  refresh = (~present) | (mem.eviction == "lru")
  stamp = jnp.where(refresh, mem.clock, mem.stamps[slot])
  new = mem.replace(keys=mem.keys.at[slot].set(key),
                    values=mem.values.at[slot].set(jnp.asarray(value, jnp.float32)),
                    stamps=mem.stamps.at[slot].set(stamp), clock=mem.clock + 1)
  return jax.tree.map(lambda a, b: jnp.where(enabled, a, b), new, mem)


def size(mem: Memory) -> Array:
  """[] int32: the number of occupied slots."""
  return jnp.sum(mem.keys != EMPTY).astype(jnp.int32)
