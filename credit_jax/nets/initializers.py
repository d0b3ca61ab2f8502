"""The orthogonal initialiser every network of the library uses, safe to vmap on any jaxlib.

`orthogonal(scale)` returns the same values, bit for bit, as flax's
`nn.initializers.orthogonal(scale)` (which is `jax.nn.initializers.orthogonal`) for one
key. Under `jax.vmap` (a training run vmapped over seeds or hyperparameters) it draws each
matrix with the unbatched initialiser, mapped over the batch with `lax.map`, instead of
letting vmap batch the QR decomposition inside. The values do not change (each matrix is
the same unbatched computation), but the batched QR never runs: jaxlib 0.10's CPU LAPACK
QR kernel splits a batch over XLA's intra-op thread pool and waits for the pieces from
inside that pool, and two such kernels can hold every pool thread and wait for each other
for good (BUILD.md "No hang from Python": 5 of 5 two-seed GRU PPO runs hung on 2 cores).

A user's own model with `nn.initializers.orthogonal`, vmapped over seeds, can still reach
that kernel; passing `credit_jax.nets.orthogonal(scale)` as its `kernel_init` avoids it.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import jax
from jax import Array

__all__ = ["orthogonal"]


def _map_over_batch(draw: Callable[[Array], Array]) -> Callable[[Array], Array]:
  """`draw(key)` whose vmap rule maps the unbatched `draw` over a batch of keys."""
  mapped = jax.custom_batching.custom_vmap(draw)

  @mapped.def_vmap
  def _rule(axis_size, in_batched, keys):   # pylint: disable=unused-argument
    (batched,) = in_batched
    if not batched:
      return mapped(keys), False
    # `mapped` inside the loop body: a vmap around this one batches the loop, and the
    # body's call reaches this rule again, so nested vmaps also draw matrix by matrix.
    return jax.lax.map(mapped, keys), True

  return mapped


def orthogonal(scale: Any = 1.0, column_axis: int = -1, dtype: Optional[Any] = None
               ) -> Callable[..., Array]:
  """An orthogonal initialiser `init(key, shape, dtype) -> [*shape]` (module doc).

  Args as `jax.nn.initializers.orthogonal`: `scale` multiplies the matrix; `column_axis`
  holds the columns that are orthonormal; `dtype` the default dtype. `shape` needs at
  least 2 dims.
  """
  base = jax.nn.initializers.orthogonal(scale, column_axis, dtype)

  def init(key: Array, shape: Sequence[int], dtype: Optional[Any] = dtype) -> Array:
    shape = tuple(int(d) for d in shape)
    if len(shape) < 2:
      raise ValueError(f"orthogonal initialiser needs a shape of at least 2 dims, got "
                       f"{shape}")
    return _map_over_batch(lambda k: base(k, shape, dtype))(key)

  return init
