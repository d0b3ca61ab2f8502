"""Backup: a leaf's value added to the edges on its path to the root.

Every edge on the path from the root to `leaf` gets one more visit and the return
through it added to its VALUE_SUM. Walking up from the leaf, the edge into node n (reward
r_n) gets `g_n = r_n + discount * g_below`, with `g_below = value` for the edge into the
leaf itself and the `g` of the edge below it on the path otherwise.

The loop runs over the explicit batch axis, not under `vmap`: a `while_loop` under
`vmap` selects its whole carry every iteration, and a carry holding the tree would cost
O(N) per step (which is what makes mctx's cost grow faster than its number of
simulations). Each level reads one record `up[b, n]` (parent edge and reward) and does
one single-edge scatter-add per root.
"""
from __future__ import annotations

import jax
from jax import Array
import jax.numpy as jnp

from credit_jax.search.tree import EDGE_FIELDS, PEELED_LEVELS, VALUE_SUM, VISITS, SearchTree


def backup(tree: SearchTree, leaf: Array, value: Array, discount: Array) -> SearchTree:
  """Backs `value` up from `leaf` to the root of each tree of the batch.

  Args:
    tree: a batch of trees, `edges: [B, N, K, 4]`.
    leaf: [B] int32, the node each root's simulation ended at; 0 (the root) adds nothing.
    value: [B] float32, that node's value (return from the node on).
    discount: [] or [B] float32, per-step discount.
  Returns:
    The tree with VISITS and VALUE_SUM of every edge on each path updated.
  """
  batch, num_nodes, num_slots, _ = tree.edges.shape
  scratch = num_nodes - 1
  b = jnp.arange(batch)
  scratch_edge = scratch * num_slots

  def body(c):
    node, v, edges = c
    active = node > 0  # the root has no edge above it
    idx = jnp.where(active, node, scratch)
    up = tree.up[b, idx]
    edge = jnp.where(active, up[:, 0], scratch_edge)
    g = jax.lax.bitcast_convert_type(up[:, 1], jnp.float32) + discount * v
    update = jnp.where(active[:, None], jnp.stack([jnp.ones_like(g), g], -1), 0.0)
    edges = edges.at[b, edge, VISITS:VALUE_SUM + 1].add(update)
    return jnp.where(active, edge // num_slots, 0), g, edges

  c = (leaf, value, tree.edges.reshape(batch, num_nodes * num_slots, EDGE_FIELDS))
  for _ in range(PEELED_LEVELS):  # finished lanes pass through body unchanged
    c = body(c)
  _, _, flat = jax.lax.while_loop(lambda c: jnp.any(c[0] > 0), body, c)
  return tree._replace(edges=flat.reshape(tree.edges.shape))
