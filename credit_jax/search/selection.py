"""Selection: which slot of a node a simulation descends through.

A selection rule is a pure function of one node's edge statistics,

  rule(visits [K], value_sum [K], prior [K], exploration []) -> scores [K] float32,

where `visits` and `value_sum` are the slots' visit counts and summed backed-up returns
(float32), `prior` the policy's probability of each slot renormalised over the valid ones
(-1 on invalid slots; `select` sets their scores to -inf after the rule) and `exploration`
a traced scalar. The descent takes the argmax. `make_search(selection=...)` accepts the
name of a rule in `RULES` or any function with this signature.

Rules:
  puct:   AlphaZero's prior-weighted bound, `q + c * prior * sqrt(1 + N) / (1 + n)`, with
          unvisited slots starting at the mean return through the node's visited slots
          (0 if none).
  ucb1:   `q + c * sqrt(log N / n)`; every valid slot is tried once first, in prior order.
  gumbel: Gumbel MuZero's deterministic selection (arXiv:2202.07390, section 5): visit
          the slot whose share of visits lags most behind the improved policy
          `softmax(log prior + sigma(completed q))`, i.e. argmax `pi'(a) - n(a) / (1 + N)`.
          Unvisited slots' q is completed with the prior-weighted mean q of the visited
          slots (mctx's mixed value without the node's own value, which a slot row does
          not hold); completed q is min-max normalised over the node's valid slots and
          scaled by `sigma = (c_visit + max n) * c_scale`. It has no exploration constant:
          `exploration` is ignored; `gumbel_rule(c_visit, c_scale)` builds other scales.
          It exploits: once a slot's q stands out, sigma grows with the visits and the
          improved policy keeps it. Gumbel MuZero explores at the root instead (Gumbel
          noise and sequential halving), which we do not implement; with value-only leaves
          it can settle on a lure (tests/test_search.py's tree: the 0.1 of action 0 beats
          unexplored zeros). Gumbel-top-k sampling of the slots themselves is
          `make_search(branching=k)`.
"""
from __future__ import annotations

from typing import Callable, Dict

import jax
import jax.numpy as jnp

from credit_jax.search.tree import CHILD, PEELED_LEVELS, PRIOR, UNEXPANDED, VALUE_SUM, VISITS

Array = jax.Array
SelectionRule = Callable[[Array, Array, Array, Array], Array]


def puct(visits: Array, value_sum: Array, prior: Array, exploration: Array) -> Array:
  """PUCT scores [K] (see the module docstring)."""
  q_c = value_sum / jnp.maximum(visits, 1.0)
  n_sum = visits.sum()
  # Unvisited slots start at the mean return through the node's visited slots (0 if none).
  q = jnp.where(visits > 0, q_c, value_sum.sum() / jnp.maximum(n_sum, 1.0))
  return q + exploration * prior * jnp.sqrt(1.0 + n_sum) / (1.0 + visits)


def ucb1(visits: Array, value_sum: Array, prior: Array, exploration: Array) -> Array:
  """UCB1 scores [K]; unvisited slots score `1e9 + prior` (see the module docstring)."""
  q_c = value_sum / jnp.maximum(visits, 1.0)
  bonus = exploration * jnp.sqrt(jnp.log(jnp.maximum(visits.sum(), 1.0))
                                 / jnp.maximum(visits, 1.0))
  return jnp.where(visits > 0, q_c + bonus, 1e9 + prior)


def gumbel_rule(c_visit: float = 50.0, c_scale: float = 0.1,
                epsilon: float = 1e-8) -> SelectionRule:
  """Gumbel MuZero's deterministic selection with scale `(c_visit + max n) * c_scale`."""

  def gumbel(visits: Array, value_sum: Array, prior: Array, exploration: Array) -> Array:
    del exploration  # the improved policy and the visit counts balance it
    valid = prior >= 0
    visited = visits > 0
    q = value_sum / jnp.maximum(visits, 1.0)
    p = jnp.where(valid, prior, 0.0)
    p_visited = jnp.where(visited, p, 0.0).sum()
    mixed = jnp.where(visited, p * q, 0.0).sum() / jnp.maximum(p_visited, 1e-30)
    completed = jnp.where(visited, q, mixed)
    lo = jnp.min(jnp.where(valid, completed, jnp.inf))
    hi = jnp.max(jnp.where(valid, completed, -jnp.inf))
    normalised = (completed - lo) / jnp.maximum(hi - lo, epsilon)
    sigma = (c_visit + visits.max()) * c_scale * normalised
    logits = jnp.where(valid, jnp.log(jnp.maximum(p, 1e-30)) + sigma, -jnp.inf)
    return jax.nn.softmax(logits) - visits / (1.0 + visits.sum())

  return gumbel


gumbel = gumbel_rule()

RULES: Dict[str, SelectionRule] = {"puct": puct, "ucb1": ucb1, "gumbel": gumbel}


def get_rule(selection) -> SelectionRule:
  """The rule named `selection` in RULES, or `selection` itself when it is callable."""
  if callable(selection):
    return selection
  if selection not in RULES:
    raise ValueError(f"selection must be one of {', '.join(map(repr, RULES))} or a "
                     f"function (visits, value_sum, prior, exploration) -> scores, "
                     f"got {selection!r}")
  return RULES[selection]


def slot_scores(rule: SelectionRule, edges: Array, exploration: Array) -> Array:
  """Scores [K] of one node's slots from its edge records `edges: [K, 4]`; -inf invalid."""
  prior = edges[:, PRIOR]
  score = rule(edges[:, VISITS], edges[:, VALUE_SUM], prior, exploration)
  return jnp.where(prior >= 0, score, -jnp.inf)


def select(rule: SelectionRule, edge_action: Array, edges: Array, root_done: Array,
           exploration: Array, *, sampled_slots: bool) -> tuple:
  """One root's descent from node 0 -> `(node, slot, action, expand)`, int32 / bool scalars.

  Args:
    rule: a selection rule (module docstring).
    edge_action: [N, K] int32, one tree's slot actions.
    edges: [N, K, 4] float32, one tree's edge records.
    root_done: [] bool, the root cannot be expanded (the descent stops at once).
    exploration: [] float32, passed to `rule`.
    sampled_slots: slot k is not action k (sampled branching), so read `edge_action`.
  Returns:
    expand: the slot of `node` is unexpanded (expand it); else `node` is an ended leaf
    reached again (or the root, when `root_done`).
  """
  def body(c):
    n = c[0]
    e = edges[n]
    k = jnp.argmax(slot_scores(rule, e, exploration)).astype(jnp.int32)
    code = e[k, CHILD]
    expand = code == UNEXPANDED
    child_done = code <= -2
    child = jnp.where(child_done, -code - 2, code).astype(jnp.int32)
    stop = expand | child_done
    # With all actions expanded slot k is action k; else read it here: a gather after
    # the loop makes XLA copy edge_action whole before its scatter, O(N) per simulation.
    action = edge_action[n, k] if sampled_slots else k
    return jnp.where(expand, n, child), k, action, expand, stop

  def running(c):
    return ~c[-1]

  c = (jnp.int32(0), jnp.int32(0), jnp.int32(0), jnp.bool_(False), root_done)
  for _ in range(PEELED_LEVELS):
    c = jax.tree.map(lambda new, old, go=running(c): jnp.where(go, new, old), body(c), c)
  node, slot, action, expand, _ = jax.lax.while_loop(running, body, c)
  return node, slot, action, expand
