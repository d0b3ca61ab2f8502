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
          `exploration` is ignored; `gumbel_rule(c_visit, c_scale, max_considered)` builds
          other constants. Below the root it exploits: once a slot's q stands out, sigma
          grows with the visits and the improved policy keeps it. The exploration is at
          the root (`gumbel.root`): each root slot carries Gumbel noise g (the same noise
          that samples the slots under `branching`); a first round visits
          `m = min(max_considered, valid slots)` slots, best first by
          `g + log prior + sigma(completed q)`, and sequential halving then keeps the
          better half by that score, each round giving every remaining slot equal visits
          (`considered_visits`), until two are left.

A rule may carry a root rule as its attribute `root`,

  rule.root(visits [K], value_sum [K], prior [K], noise [K], simulation [] int32,
            num_simulations: int) -> scores [K],

used at the root instead of the rule itself; `noise` is the root slots' Gumbel noise and
`simulation` the index of the current simulation. Called once more after the search with
`simulation = num_simulations`, its argmax is the search's `root_action` (Gumbel: the best
of the most visited slots by `g + log prior + sigma`).
"""
from __future__ import annotations

import math
from typing import Callable, Dict, Optional

import jax
from jax import Array
import jax.numpy as jnp
import numpy as np

from credit_jax.search.tree import CHILD, PEELED_LEVELS, PRIOR, UNEXPANDED, VALUE_SUM, VISITS

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


def considered_visits(max_considered: int, num_simulations: int) -> np.ndarray:
  """Sequential halving's schedule: entry `[m, s]` is the visit count a root slot must
  have to be eligible at simulation s when m slots are considered ([M + 1, S] int32).

  Each round gives every remaining slot `max(1, S // (ceil(log2 M) * remaining))` more
  visits in turn, then halves the remaining slots (never below 2).
  """
  table = np.zeros((max_considered + 1, num_simulations), np.int32)
  for m in range(max_considered + 1):
    if m <= 1:
      table[m] = np.arange(num_simulations)
      continue
    rounds = math.ceil(math.log2(m))
    sequence, visits, remaining = [], [0] * m, m
    while len(sequence) < num_simulations:
      for _ in range(max(1, num_simulations // (rounds * remaining))):
        sequence.extend(visits[:remaining])
        visits[:remaining] = [v + 1 for v in visits[:remaining]]
      remaining = max(2, remaining // 2)
    table[m] = sequence[:num_simulations]
  return table


def gumbel_rule(c_visit: float = 50.0, c_scale: float = 0.1, epsilon: float = 1e-8,
                max_considered: int = 16) -> SelectionRule:
  """Gumbel MuZero's selection with scale `(c_visit + max n) * c_scale`: the deterministic
  rule below the root, Gumbel noise and sequential halving over `max_considered` slots at
  the root (its attribute `root`)."""

  def log_prior_and_sigma(visits, value_sum, prior):
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
    return jnp.where(valid, jnp.log(jnp.maximum(p, 1e-30)), -jnp.inf), sigma

  def gumbel(visits: Array, value_sum: Array, prior: Array, exploration: Array) -> Array:
    del exploration  # the improved policy and the visit counts balance it
    log_prior, sigma = log_prior_and_sigma(visits, value_sum, prior)
    return jax.nn.softmax(log_prior + sigma) - visits / (1.0 + visits.sum())

  def root(visits: Array, value_sum: Array, prior: Array, noise: Array, simulation: Array,
           num_simulations: int) -> Array:
    log_prior, sigma = log_prior_and_sigma(visits, value_sum, prior)
    table = jnp.asarray(considered_visits(max_considered, num_simulations))
    num_considered = jnp.minimum(max_considered, (prior >= 0).sum())
    target = jnp.where(simulation >= num_simulations, visits.max(),
                       table[num_considered, jnp.minimum(simulation, num_simulations - 1)])
    return jnp.where(visits == target, noise + log_prior + sigma, -jnp.inf)

  gumbel.root = root
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
           exploration: Array, *, sampled_slots: bool,
           root_scores: Optional[Callable[[Array], Array]] = None) -> tuple:
  """One root's descent from node 0 -> `(node, slot, action, expand)`, int32 / bool scalars.

  Args:
    rule: a selection rule (module docstring).
    edge_action: [N, K] int32, one tree's slot actions.
    edges: [N, K, 4] float32, one tree's edge records.
    root_done: [] bool, the root cannot be expanded (the descent stops at once).
    exploration: [] float32, passed to `rule`.
    sampled_slots: slot k is not action k (sampled branching), so read `edge_action`.
    root_scores: optional `root edges [K, 4] -> scores [K]` used at the root instead of
      `rule` (e.g. `rule.root` with this root's noise bound); invalid slots are masked.
  Returns:
    expand: the slot of `node` is unexpanded (expand it); else `node` is an ended leaf
    reached again (or the root, when `root_done`).
  """
  def body(c, at_root=False):
    n = c[0]
    e = edges[n]
    if at_root:
      scores = jnp.where(e[:, PRIOR] >= 0, root_scores(e), -jnp.inf)
    else:
      scores = slot_scores(rule, e, exploration)
    k = jnp.argmax(scores).astype(jnp.int32)
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
  for level in range(PEELED_LEVELS):  # level 0 is the root (PEELED_LEVELS >= 1)
    new = body(c, at_root=level == 0 and root_scores is not None)
    c = jax.tree.map(lambda new, old, go=running(c): jnp.where(go, new, old), new, c)
  node, slot, action, expand, _ = jax.lax.while_loop(running, body, c)
  return node, slot, action, expand
