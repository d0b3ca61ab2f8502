"""The search tree: node arrays of a batch of roots, and their bookkeeping.

Layout (in the style of mctx's `Tree`): every root `b` of a batch owns fixed-size node
arrays `[B, N, ...]`, `N = num_simulations + 2` (the root, one node per simulation, and a
scratch node that absorbs the writes of lanes with nothing to write). Each node has `K`
slots (edges): all `A` actions, or `branching` distinct actions sampled from the policy.

Statistics live on edges, one float32 record `edges[b, n, k]` per slot: selection reads
one node's K records and nothing else (one or two cache lines per root and level). On CPU
a descent step is bound by the latency of these random reads once the tree outgrows the
cache, so the child pointer lives in the record too (field CHILD, see `child_code`)
rather than in an array of its own. Every write here is a single-node scatter.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
from jax import Array
import jax.numpy as jnp

from credit_jax.types import Trajectory

# Fields of the float32 record `SearchTree.edges[b, n, k]` of slot k of node n.
VISITS, VALUE_SUM, PRIOR, CHILD = 0, 1, 2, 3
EDGE_FIELDS = 4
UNEXPANDED = -1.0  # CHILD of a slot with no child yet
MASKED_LOGIT = -1e9  # finite, so a fully masked row still normalises
# Selection and backup unroll their first levels before a while_loop: a loop iteration
# (its condition, carry copies, a host round trip on GPU) costs more than a level's work.
PEELED_LEVELS = 4


def child_code(child: Array, done: Array) -> Array:
  """The CHILD field of a slot with child node `child`: `child` while the child can be
  expanded, `-child - 2` once it cannot (episode ended, depth cap), -1 while unexpanded.
  Exact in float32 for trees below 2**24 nodes."""
  return jnp.where(done, -child - 2, child).astype(jnp.float32)


class SearchTree(NamedTuple):
  """Node arrays of a batch of search trees; node 0 is the root, node N-1 is scratch.

  Statistics live on edges (slot k of node n): visits, the sum of the returns
  `reward + discount * value` backed up through it, the policy prior (-1 marks an invalid
  slot), and its child node (`child_code`: -1 unexpanded, c >= 0 the child c, c <= -2 the
  child -c - 2, which cannot be expanded). Every field also works for one root (the
  leading `B` dropped), as inside a `jax.vmap` over roots.
  """
  up: Array            # [B, N, 2] int32, (parent_edge, reward bits): see the properties
  action: Array        # [B, N] int32, action on the edge into the node (-1 at the root)
  depth: Array         # [B, N] int32, steps from the root
  path_reward: Array   # [B, N] float32, undiscounted reward from the root to the node
  terminated: Array    # [B, N] bool, the edge into the node ended the episode (terminal)
  done: Array          # [B, N] bool, unexpandable (episode ended, depth cap, no valid action)
  value: Array         # [B, N] float32, leaf evaluation when the node was created
  state: Any           # pytree of [B, N, ...], the environment state at each node
  edge_action: Array   # [B, N, K] int32, action of each slot
  edges: Array         # [B, N, K, 4] float32, (VISITS, VALUE_SUM, PRIOR, CHILD)
  num_nodes: Array     # [B] int32, nodes in use (scratch excluded)

  @property
  def num_slots(self) -> int:
    """K, the slots (edges) of every node."""
    return self.edges.shape[-2]

  @property
  def parent(self) -> Array:
    """[B, N] int32 parent of each node, -1 at the root and at unused nodes."""
    return jnp.where(self.parent_edge >= 0, self.parent_edge // self.num_slots, -1)

  # The backup reads, per level, a node's parent edge and the reward on it: one record
  # `up[b, n]` holds both (the reward's float32 bits), so a level costs one random read.
  @property
  def parent_edge(self) -> Array:
    """[B, N] int32, parent * K + slot of the edge into each node (-1: root, unused)."""
    return self.up[..., 0]

  @property
  def reward(self) -> Array:
    """[B, N] float32, reward of the edge into each node."""
    return jax.lax.bitcast_convert_type(self.up[..., 1], jnp.float32)

  @property
  def edge_child(self) -> Array:
    """[B, N, K] int32 child node of each slot, -1 while unexpanded."""
    c = self.edges[..., CHILD]
    return jnp.where(c <= -2, -c - 2, c).astype(jnp.int32)


class SearchStats(NamedTuple):
  nodes_expanded: Array  # [B] int32, nodes added to the tree
  env_steps: Array       # [B] int32, expansions plus rollout steps (the final replay excluded)
  tree_depth: Array      # [B] int32, deepest node
  success: Array         # [B] bool, a complete episode reached `success_threshold`


class SearchOutput(NamedTuple):
  trajectory: Trajectory  # [max_depth, B] replay of the best episode; `valid` masks its length
  total_reward: Array     # [B] float32, undiscounted reward of that episode
  length: Array           # [B] int32, its number of steps
  complete: Array         # [B] bool, it ended by terminated or truncated (not a depth bound)
  root_action: Array      # [B] int32, most visited root action (or the rule's root choice)
  root_visits: Array      # [B, A] int32, visits of each root action (0 where not a slot)
  root_q: Array           # [B, A] float32, mean r + discount * V per root action (0 unvisited)
  stats: SearchStats
  tree: SearchTree


class NewNodes(NamedTuple):
  """One node per root to write into a batch of trees (`add_nodes`); all leaves `[B, ...]`."""
  parent: Array       # [B] int32, the node whose slot was expanded
  slot: Array         # [B] int32, that slot
  action: Array       # [B] int32, its action
  reward: Array       # [B] float32, reward of the step into the new node
  terminated: Array   # [B] bool
  done: Array         # [B] bool, the new node cannot be expanded
  value: Array        # [B] float32, its leaf evaluation
  state: Any          # pytree of [B, ...], its environment state
  slot_actions: Array  # [B, K] int32, actions of its slots
  slot_records: Array  # [B, K, 4] float32, edge records of its slots (`new_slots`)


def new_slots(masked_logits: Array, key: Array, num_slots: int, sampled: bool):
  """Slot actions [K] and edge records [K, 4] of a new node from its masked logits [A].

  `sampled=False`: slot k is action k (K = A). `sampled=True`: K distinct actions drawn
  without replacement from the policy (Gumbel top-k with `key`). The prior is the policy's
  probability renormalised over the valid slots; invalid slots get PRIOR = -1.
  """
  probs = jax.nn.softmax(masked_logits)
  if not sampled:
    actions = jnp.arange(masked_logits.shape[-1], dtype=jnp.int32)
  else:
    actions = _top_k_indices(masked_logits + jax.random.gumbel(key, masked_logits.shape),
                            num_slots)
  valid = masked_logits[actions] > MASKED_LOGIT / 2
  prior = jnp.where(valid, probs[actions], 0.0)
  prior = jnp.where(valid, prior / jnp.maximum(prior.sum(), 1e-30), -1.0)
  record = jnp.stack([jnp.zeros_like(prior), jnp.zeros_like(prior), prior,
                      jnp.full_like(prior, UNEXPANDED)], -1)
  return actions, record


def _top_k_indices(x: Array, k: int) -> Array:
  """Indices [k] of the k largest entries of x: [A], largest first.

  For small k, k masked argmaxes: XLA's CPU `top_k` under vmap costs ~20x more here.
  """
  if k > 16:
    return jax.lax.top_k(x, k)[1].astype(jnp.int32)
  out = []
  for _ in range(k):
    i = jnp.argmax(x).astype(jnp.int32)
    out.append(i)
    x = x.at[i].set(-jnp.inf)
  return jnp.stack(out)


def init_tree(root_states: Any, slot_actions: Array, slot_records: Array,
              num_nodes: int) -> SearchTree:
  """A batch of trees holding only their roots.

  Args:
    root_states: pytree of `[B, ...]` environment states.
    slot_actions: [B, K] int32, the roots' slot actions (`new_slots`).
    slot_records: [B, K, 4] float32, the roots' edge records (`new_slots`).
    num_nodes: N, node capacity including the root and the scratch node.
  """
  batch, num_slots = slot_actions.shape

  def per_node(fill, dtype, extra=()):
    return jnp.full((batch, num_nodes) + extra, fill, dtype)

  root_done = ~(slot_records[:, :, PRIOR] >= 0).any(-1)
  edge_action = jnp.broadcast_to(jnp.arange(num_slots, dtype=jnp.int32),
                                 (batch, num_nodes, num_slots))
  return SearchTree(
      up=per_node(0, jnp.int32, (2,)).at[..., 0].set(-1),
      action=per_node(-1, jnp.int32), depth=per_node(0, jnp.int32),
      path_reward=per_node(0.0, jnp.float32),
      terminated=per_node(False, bool), done=per_node(False, bool).at[:, 0].set(root_done),
      value=per_node(0.0, jnp.float32),
      state=jax.tree.map(
          lambda x: jnp.broadcast_to(x[:, None], (batch, num_nodes) + x.shape[1:]),
          root_states),
      edge_action=edge_action.at[:, 0].set(slot_actions),
      edges=per_node(0.0, jnp.float32, (num_slots, EDGE_FIELDS)).at[..., CHILD].set(
          UNEXPANDED).at[:, 0].set(slot_records),
      num_nodes=jnp.ones((batch,), jnp.int32))


def add_nodes(tree: SearchTree, new: NewNodes, expand: Array, *,
              write_slot_actions: bool = True) -> tuple:
  """Writes one new node per root; returns `(tree, node)`.

  Roots with `expand[b]` False write to the scratch node instead and keep their node
  count, so every root does the same single-node scatters. `node: [B] int32` is the new
  node's index (the scratch node where nothing was added). `write_slot_actions=False`
  skips `edge_action` when every node's slot k is action k (saves a scatter).
  """
  batch, num_nodes = tree.depth.shape
  scratch = num_nodes - 1
  b = jnp.arange(batch)
  node = jnp.where(expand, tree.num_nodes, scratch)
  at_parent = jnp.where(expand, new.parent, scratch)
  depth = tree.depth[b, new.parent] + 1
  path_reward = tree.path_reward[b, new.parent] + new.reward

  def put(x, v):
    return x.at[b, node].set(v)
  tree = tree._replace(
      up=put(tree.up, jnp.stack(
          [new.parent * tree.num_slots + new.slot,
           jax.lax.bitcast_convert_type(new.reward, jnp.int32)], -1)),
      action=put(tree.action, new.action), depth=put(tree.depth, depth),
      path_reward=put(tree.path_reward, path_reward),
      terminated=put(tree.terminated, new.terminated), done=put(tree.done, new.done),
      value=put(tree.value, new.value), state=jax.tree.map(put, tree.state, new.state),
      edge_action=(put(tree.edge_action, new.slot_actions) if write_slot_actions
                   else tree.edge_action),
      edges=put(tree.edges, new.slot_records).at[b, at_parent, new.slot, CHILD].set(
          child_code(node, new.done)),
      num_nodes=tree.num_nodes + expand.astype(jnp.int32))
  return tree, node


def root_statistics(tree: SearchTree, num_actions: int,
                    root_scores: Optional[Array] = None) -> tuple:
  """`(root_action [B], root_visits [B, A] int32, root_q [B, A] float32)` of a tree batch.

  root_action is the action of the root slot with the highest `root_scores` ([B, K]),
  by default the most visited; visits and mean returns are scattered from slots to
  actions (0 for actions without a slot or visit).
  """
  root = tree.edges[:, 0]
  visits = root[..., VISITS]
  q = jnp.where(visits > 0, root[..., VALUE_SUM] / jnp.maximum(visits, 1.0), 0.0)
  slot_actions = tree.edge_action[:, 0]
  scatter = jax.vmap(lambda a, v: jnp.zeros((num_actions,), v.dtype).at[a].add(v))
  scores = visits if root_scores is None else root_scores
  root_action = jnp.take_along_axis(slot_actions, jnp.argmax(scores, 1)[:, None], 1)[:, 0]
  return root_action, scatter(slot_actions, visits.astype(jnp.int32)), scatter(slot_actions, q)
