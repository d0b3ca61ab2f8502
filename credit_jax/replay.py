"""A jittable, vmappable uniform replay buffer: a ring of transitions in a pytree.

Why our own and not flashbax: flashbax 0.1.3 installs and runs with our jax (checked:
item buffer add/sample under jit and under vmap over seeds), but it adds whole batches
only, while hindsight relabeling produces batches in which only some examples exist
(a relabeled example exists only where the verifier says its goal was achieved).
Adding the missing ones as zero-weight rows would waste buffer slots and sample draws;
`add` here takes a mask and writes only the rows that exist. Its state is also a
`chex.dataclass`, which this codebase avoids (docs/ARCHITECTURE.md, "Checks at the
entry: explicit, not chex"); ours is a
`flax.struct.dataclass`, so it checkpoints with orbax like every other train state.

  state = replay.init(example_item, capacity=100_000)   # example leaves: one item
  state = replay.add(state, batch, mask)                # batch leaves [N, ...], mask [N]
  items = replay.sample(state, key, batch_size=128)     # leaves [batch_size, ...]

Everything is pure: `capacity` and `batch_size` are static, the rest may be traced, so
a whole training loop with the buffer in its carry jits and vmaps over seeds.
"""
from __future__ import annotations

from typing import Any, Optional

import flax.struct
import jax
from jax import Array
import jax.numpy as jnp


@flax.struct.dataclass
class ReplayState:
  """The ring. `data` leaves are `[capacity, ...]`; slots `< size` hold items."""
  data: Any         # pytree of [capacity, ...] arrays
  position: Array   # [] int32: the slot the next item is written to
  size: Array       # [] int32: filled slots, at most capacity

  @property
  def capacity(self) -> int:
    return jax.tree.leaves(self.data)[0].shape[0]


def _check_capacity(capacity: Any) -> int:
  if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
    raise ValueError(f"capacity must be a Python int >= 1, got {capacity!r}")
  return capacity


def init(example: Any, capacity: int) -> ReplayState:
  """An empty buffer for items shaped like `example` (a pytree of one item's arrays)."""
  capacity = _check_capacity(capacity)
  leaves = jax.tree.leaves(example)
  if not leaves:
    raise ValueError("example must be a pytree with at least one array leaf")
  data = jax.tree.map(
      lambda x: jnp.zeros((capacity,) + jnp.shape(x), jnp.asarray(x).dtype), example)
  return ReplayState(data=data, position=jnp.zeros((), jnp.int32),
                     size=jnp.zeros((), jnp.int32))


def add(state: ReplayState, batch: Any, mask: Optional[Array] = None) -> ReplayState:
  """Writes the rows of `batch` where `mask` holds, in order, overwriting the oldest.

  Args:
    state: the buffer.
    batch: pytree like the buffer's items with a leading [N] axis on every leaf.
    mask: [N] bool, rows to write (default: all). If more than `capacity` rows are
      written at once, only the last `capacity` of them are kept.
  Returns:
    The buffer with `position` advanced and `size` grown by the rows written.
  """
  capacity = state.capacity
  item_shapes = jax.tree.map(lambda x: x.shape[1:], state.data)
  batch_shapes = jax.tree.map(lambda x: jnp.shape(x)[1:], batch)
  if jax.tree.structure(state.data) != jax.tree.structure(batch) or \
      item_shapes != batch_shapes:
    raise ValueError(f"batch must be the buffer's items with a leading [N] axis; items "
                     f"{item_shapes}, batch {jax.tree.map(jnp.shape, batch)}")
  sizes = {jnp.shape(x)[0] for x in jax.tree.leaves(batch)}
  if len(sizes) != 1:
    raise ValueError(f"batch leaves disagree on N: {sorted(sizes)}")
  n = sizes.pop()
  mask = jnp.ones((n,), bool) if mask is None else jnp.asarray(mask, bool)
  if mask.shape != (n,):
    raise ValueError(f"mask must have shape [N] = ({n},), got {mask.shape}")
  rank = jnp.cumsum(mask.astype(jnp.int32)) - 1      # order among the written rows
  count = rank[-1] + 1 if n else jnp.zeros((), jnp.int32)
  keep = jnp.logical_and(mask, rank >= count - capacity)
  # Rows not written go to an out-of-range slot, which `mode="drop"` ignores.
  slot = jnp.where(keep, (state.position + rank) % capacity, capacity)
  data = jax.tree.map(
      lambda buf, x: buf.at[slot].set(jnp.asarray(x, buf.dtype), mode="drop"),
      state.data, batch)
  return ReplayState(data=data, position=(state.position + count) % capacity,
                     size=jnp.minimum(state.size + count, capacity))


def sample(state: ReplayState, key: Array, batch_size: int) -> Any:
  """`batch_size` items drawn uniformly with replacement from the filled slots.

  Returns a pytree with leaves [batch_size, ...]. An empty buffer returns slot 0 (zeros):
  check `state.size` first (e.g. learn only once it reaches `batch_size`).
  """
  if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
    raise ValueError(f"batch_size must be a Python int >= 1, got {batch_size!r}")
  index = jax.random.randint(key, (batch_size,), 0, jnp.maximum(state.size, 1))
  return jax.tree.map(lambda buf: buf[index], state.data)


__all__ = ["ReplayState", "add", "init", "sample"]
