"""Batched tree search over true JAX environments, with best-trajectory extraction.

Why: when K sampled episodes of a task all fail, a search that exploits the policy as a
prior can still find a success, and training on it concentrates the gradient. Our
environments are pure JAX, so a search node can hold the environment state itself and
restoring a node costs nothing: no learned model, no re-simulation from the root.

Layout (in the style of mctx's `Tree`): every root `b` of a batch owns fixed-size node
arrays `[B, N, ...]`, `N = num_simulations + 2` (the root, one node per simulation, and a
scratch node that absorbs the writes of lanes with nothing to write). Each node has `K`
slots (edges): all `A` actions, or `branching` distinct actions sampled from the policy
(Gumbel top-k) for action spaces too large to enumerate. One simulation:

  1. selection: from the root, PUCT (policy prior) or UCB1 over valid slots until an
     unexpanded slot or a node that cannot be expanded (episode ended, depth cap);
  2. expansion: one environment step from the parent's stored state;
  3. evaluation: a greedy or sampled policy rollout to the end of the episode (bounded by
     `rollout_depth` and `max_depth`), bootstrapped with `value_fn` where it stops early;
  4. backup of the discounted return along the parent pointers.

Cost: each simulation does O(depth) work, never O(N). Statistics live on edges, one
record row per node holding its K slots, so a descent step reads one row per root; every
write is a single-node scatter; selection and rollouts are vmapped per root with small
loop carries; the backup loop runs over the explicit batch axis, because a `while_loop`
under `vmap` selects its whole carry every iteration and a carry holding the tree would
cost O(N) per step (which is what makes mctx's cost grow faster than its number of
simulations). Call the search with seeds or tasks folded into `B`: an outer `jax.vmap`
is correct but loses this. The tree's depth still grows (about logarithmically) with the
number of simulations, and so does the cost of a simulation.

On CPU, run search-heavy programs on one core (`taskset -c 0 python3 ...`, or
scripts/cpu_affinity.py before jax starts): XLA's CPU runtime spreads the independent
operations of a simulation over a thread pool as large as the cores the process may use,
and operations this small then cost more, their data moving between the cores' caches
(1.5-1.8x slower on both cores of the 2-core development machine; see BENCHMARKS.md).

Environment stepping: we call `env.step_env` plus `env.is_truncated`, exactly what
gymnax's `env.step` does minus the auto-reset, so a node keeps the terminal state and its
pre-reset observation. The step at depth `d` uses the key `fold_in(env_key, d)`: tree
expansions, rollouts and the final replay agree, so for a stochastic environment the
search sees (and the returned trajectory replays) one fixed sample of every transition.

The best trajectory: among all simulated episodes (tree path + rollout) we keep the best
by (complete, total undiscounted reward). Storing rollout actions would cost O(max_depth)
per simulation, so we store the leaf node and the rollout key and re-run that episode once
at the end; the returned `Trajectory` is that replay, so its rewards are the truth.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from credit_jax.types import Trajectory

Array = jax.Array
# (params, obs) -> logits [A] for a single observation.
LogitsFn = Callable[[Any, Any], Array]
# (params, obs) -> [] value estimate for a single observation.
ValueFn = Callable[[Any, Any], Array]
# env_state -> [A] bool, True where the action is allowed (single state).
ActionMaskFn = Callable[[Any], Array]

_MASKED_LOGIT = -1e9  # finite, so a fully masked row still normalises
# Selection and backup unroll their first levels before a while_loop: a loop iteration
# (its condition, carry copies, a host round trip on GPU) costs more than a level's work.
_PEELED_LEVELS = 4


# Fields of the float32 record `SearchTree.edges[b, n, k]` of slot k of node n. Selection
# reads one node's K records and nothing else (one or two cache lines per root and level):
# on CPU a descent step is bound by the latency of these random reads once the tree
# outgrows the cache, so the child pointer lives in the record too (field CHILD, see
# `_child_code`) rather than in an array of its own.
VISITS, VALUE_SUM, PRIOR, CHILD = 0, 1, 2, 3
_EDGE_FIELDS = 4
_UNEXPANDED = -1.0  # CHILD of a slot with no child yet


def _child_code(child: Array, done: Array) -> Array:
  """The CHILD field of a slot with child node `child`: `child` while the child can be
  expanded, `-child - 2` once it cannot (episode ended, depth cap), -1 while unexpanded.
  Exact in float32 for trees below 2**24 nodes."""
  return jnp.where(done, -child - 2, child).astype(jnp.float32)


class SearchTree(NamedTuple):
  """Node arrays of a batch of search trees; node 0 is the root, node N-1 is scratch.

  Statistics live on edges (slot k of node n): visits, the sum of the returns
  `reward + discount * value` backed up through it, the policy prior (-1 marks an invalid
  slot), and its child node (`_child_code`: -1 unexpanded, c >= 0 the child c, c <= -2 the
  child -c - 2, which cannot be expanded).
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
  def parent(self) -> Array:
    """[B, N] int32 parent of each node, -1 at the root and at unused nodes."""
    return jnp.where(self.parent_edge >= 0, self.parent_edge // self.edges.shape[2], -1)

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
  root_action: Array      # [B] int32, most visited root action
  root_visits: Array      # [B, A] int32, visits of each root action (0 where not a slot)
  root_q: Array           # [B, A] float32, mean r + discount * V per root action (0 unvisited)
  stats: SearchStats
  tree: SearchTree


class _Best(NamedTuple):
  node: Array        # [B] int32, tree leaf where the episode left the tree
  rollout_key: Array  # [B] key the rollout from that leaf used
  total: Array       # [B] float32
  complete: Array    # [B] bool


class _EnvModel(NamedTuple):
  """Single-root environment and policy helpers shared by our search and the mctx adapter."""
  step: Callable
  masked_logits: Callable
  rollout: Callable
  num_actions: int


def _choose(masked_logits: Array, key: Array, greedy: bool) -> Array:
  if greedy:
    return jnp.argmax(masked_logits).astype(jnp.int32)
  return jax.random.categorical(key, masked_logits).astype(jnp.int32)


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


def _make_env_model(env, logits_fn, value_fn, action_mask_fn, *, max_depth: int,
                    rollout: str, rollout_depth: int) -> _EnvModel:
  """Builds the per-root step / policy / rollout functions (see the module docstring)."""
  if rollout not in ("greedy", "sample"):
    raise ValueError(f"rollout must be 'greedy' or 'sample', got {rollout!r}")
  num_actions = int(env.num_actions)
  greedy = rollout == "greedy"

  def step(env_params, key, state, action):
    """One transition without auto-reset: (obs, state, reward, terminated, truncated, info)."""
    obs, next_state, reward, terminated, info = env.step_env(key, state, action, env_params)
    truncated = env.is_truncated(next_state, env_params)
    return (obs, next_state, jnp.asarray(reward, jnp.float32),
            jnp.asarray(terminated, bool), jnp.asarray(truncated, bool), info)

  def masked_logits(params, obs, state):
    logits = jnp.asarray(logits_fn(params, obs), jnp.float32)
    if logits.shape != (num_actions,):
      raise ValueError(f"logits_fn must return [{num_actions}] logits for one observation, "
                       f"got shape {logits.shape}")
    if action_mask_fn is None:
      return logits
    return jnp.where(action_mask_fn(state), logits, _MASKED_LOGIT)

  def leaf_value(params, obs):
    if value_fn is None:
      return jnp.float32(0.0)
    return jnp.asarray(value_fn(params, obs), jnp.float32).reshape(())

  def rollout_fn(params, env_params, env_key, key, state, obs, depth, stopped, terminated,
                 discount):
    """Policy rollout from a node; returns (value, total_reward, steps, ended_by_env).

    `stopped` starts the rollout already finished (node ended, or nothing to evaluate);
    `terminated` says the node itself is terminal (no bootstrap). The value is the
    discounted return, bootstrapped with `value_fn` unless the episode terminated.
    """
    def cond(c):
      return ~c[-1]

    def body(c):
      state, obs, i, ret, total, scale, _, _, _ = c
      action = _choose(masked_logits(params, obs, state), jax.random.fold_in(key, i), greedy)
      obs, state, reward, term, trunc, _ = step(
          env_params, jax.random.fold_in(env_key, depth + i), state, action)
      i = i + 1
      ended = term | trunc
      stop = ended | (i >= rollout_depth) | (depth + i >= max_depth)
      return (state, obs, i, ret + scale * reward, total + reward, scale * discount, term,
              ended, stop)

    init_stop = stopped | (rollout_depth <= 0) | (depth >= max_depth)
    c = (state, obs, jnp.int32(0), jnp.float32(0.0), jnp.float32(0.0),
         jnp.asarray(discount, jnp.float32), terminated, stopped, init_stop)
    _, obs, steps, ret, total, scale, term, ended, _ = jax.lax.while_loop(cond, body, c)
    value = ret + jnp.where(term, 0.0, scale * leaf_value(params, obs))
    return value, total, steps, ended

  return _EnvModel(step, masked_logits, rollout_fn, num_actions)


def _check_roots(root_states, root_obs) -> int:
  leaves = jax.tree.leaves(root_states) + jax.tree.leaves(root_obs)
  if not leaves:
    raise ValueError("root_states and root_obs must hold arrays")
  sizes = {jnp.shape(x)[0] if jnp.ndim(x) else None for x in leaves}
  if len(sizes) != 1 or None in sizes:
    raise ValueError("every leaf of root_states [B, ...] and root_obs [B, ...] needs the same "
                     f"leading batch dim B; got leading dims {sorted(map(str, sizes))}")
  return sizes.pop()


def make_search(env, logits_fn: LogitsFn, *, num_simulations: int, max_depth: int,
                value_fn: Optional[ValueFn] = None,
                action_mask_fn: Optional[ActionMaskFn] = None,
                selection: str = "puct", branching: Optional[int] = None,
                rollout: str = "greedy", rollout_depth: Optional[int] = None):
  """Builds a batched tree search over `env`; returns a pure, jittable `search_fn`.

  Args:
    env: a gymnax-API environment (`step_env`, `is_truncated`, `num_actions`).
    logits_fn: `(params, obs) -> [A]` policy logits for one observation (prior and rollouts).
    num_simulations: simulations per root (static); each adds at most one node.
    max_depth: episodes are cut at this many steps from the root (static); also the length of
      the returned trajectory arrays.
    value_fn: optional `(params, obs) -> []`, bootstraps rollouts that stop before the end.
    action_mask_fn: optional `env_state -> [A] bool`; False actions are never expanded or
      rolled out. Every non-terminal state must allow at least one action.
    selection: "puct" (prior-weighted) or "ucb1" (tries every slot once first).
    branching: None to expand all `A` actions per node, else this many distinct actions
      sampled from the policy per node.
    rollout: "greedy" or "sample" leaf rollouts.
    rollout_depth: rollout steps from a new node (default `max_depth`); 0 evaluates leaves
      with `value_fn` only (or 0 without one).

  Returns:
    `search_fn(params, env_params, key, root_states, root_obs, *, exploration=1.25,
    discount=1.0, success_threshold=1.0) -> SearchOutput` with root_states, root_obs
    pytrees of `[B, ...]`. `exploration`, `discount`, `success_threshold` may be traced.
  """
  if selection not in ("puct", "ucb1"):
    raise ValueError(f"selection must be 'puct' or 'ucb1', got {selection!r}")
  if num_simulations < 1 or max_depth < 1:
    raise ValueError(f"num_simulations and max_depth must be >= 1, got {num_simulations}, "
                     f"{max_depth}")
  rollout_depth = max_depth if rollout_depth is None else int(rollout_depth)
  model = _make_env_model(env, logits_fn, value_fn, action_mask_fn, max_depth=max_depth,
                          rollout=rollout, rollout_depth=rollout_depth)
  num_actions = model.num_actions
  if branching is not None and not 1 <= branching <= num_actions:
    raise ValueError(f"branching must be in [1, {num_actions}] or None, got {branching}")
  num_slots = num_actions if branching is None else int(branching)
  num_nodes = num_simulations + 2
  scratch = num_nodes - 1
  if num_nodes >= 2**24:
    raise ValueError(f"num_simulations must be below {2**24 - 2} (child pointers are stored "
                     f"exactly in float32), got {num_simulations}")

  def make_slots(masked, key):
    """Slot actions [K] and edge records [K, 4] of a new node from its masked logits."""
    probs = jax.nn.softmax(masked)
    if branching is None:
      actions = jnp.arange(num_actions, dtype=jnp.int32)
    else:  # Gumbel top-k: K distinct actions sampled without replacement.
      actions = _top_k_indices(masked + jax.random.gumbel(key, masked.shape), num_slots)
    valid = masked[actions] > _MASKED_LOGIT / 2
    prior = jnp.where(valid, probs[actions], 0.0)
    prior = jnp.where(valid, prior / jnp.maximum(prior.sum(), 1e-30), -1.0)
    record = jnp.stack([jnp.zeros_like(prior), jnp.zeros_like(prior), prior,
                        jnp.full_like(prior, _UNEXPANDED)], -1)
    return actions, record

  def slot_scores(e, exploration):
    """Selection scores [K] from one node's edge records e: [K, 4]."""
    n_c, w_c, prior = e[:, VISITS], e[:, VALUE_SUM], e[:, PRIOR]
    q_c = w_c / jnp.maximum(n_c, 1.0)
    n_sum = n_c.sum()
    if selection == "puct":
      # Unvisited slots start at the mean return through the node's visited slots (0 if none).
      q = jnp.where(n_c > 0, q_c, w_c.sum() / jnp.maximum(n_sum, 1.0))
      score = q + exploration * prior * jnp.sqrt(1.0 + n_sum) / (1.0 + n_c)
    else:
      bonus = exploration * jnp.sqrt(jnp.log(jnp.maximum(n_sum, 1.0)) / jnp.maximum(n_c, 1.0))
      score = jnp.where(n_c > 0, q_c + bonus, 1e9 + prior)
    return jnp.where(prior >= 0, score, -jnp.inf)

  def select(edge_action, edges, root_done, exploration):
    """One root's descent -> (node, slot, action, expand).

    expand: the slot of `node` is unexpanded; else `node` is an ended leaf reached again.
    """
    def body(c):
      n = c[0]
      e = edges[n]
      k = jnp.argmax(slot_scores(e, exploration)).astype(jnp.int32)
      code = e[k, CHILD]
      expand = code == _UNEXPANDED
      child_done = code <= -2
      child = jnp.where(child_done, -code - 2, code).astype(jnp.int32)
      stop = expand | child_done
      # With all actions expanded slot k is action k; else read it here: a gather after
      # the loop makes XLA copy edge_action whole before its scatter, O(N) per simulation.
      action = k if branching is None else edge_action[n, k]
      return jnp.where(expand, n, child), k, action, expand, stop

    def running(c):
      return ~c[-1]

    c = (jnp.int32(0), jnp.int32(0), jnp.int32(0), jnp.bool_(False), root_done)
    for _ in range(_PEELED_LEVELS):
      c = jax.tree.map(lambda new, old, go=running(c): jnp.where(go, new, old), body(c), c)
    node, slot, action, expand, _ = jax.lax.while_loop(running, body, c)
    return node, slot, action, expand

  def backup(tree, leaf, value, discount):
    """Adds the discounted returns from `leaf` (valued `value`) to the edges up to the root."""
    b = jnp.arange(leaf.shape[0])
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

    c = (leaf, value, tree.edges.reshape(leaf.shape[0], num_nodes * num_slots, _EDGE_FIELDS))
    for _ in range(_PEELED_LEVELS):  # finished lanes pass through body unchanged
      c = body(c)
    _, _, flat = jax.lax.while_loop(lambda c: jnp.any(c[0] > 0), body, c)
    return tree._replace(edges=flat.reshape(tree.edges.shape))

  def init_tree(params, root_states, root_obs, keys):
    batch = keys.shape[0]
    masked = jax.vmap(model.masked_logits, (None, 0, 0))(params, root_obs, root_states)
    actions, record = jax.vmap(make_slots)(masked, keys)

    def per_node(fill, dtype, extra=()):
      return jnp.full((batch, num_nodes) + extra, fill, dtype)

    root_done = ~(record[:, :, PRIOR] >= 0).any(-1)
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
        edge_action=edge_action.at[:, 0].set(actions),
        edges=per_node(0.0, jnp.float32, (num_slots, _EDGE_FIELDS)).at[..., CHILD].set(
            _UNEXPANDED).at[:, 0].set(record),
        num_nodes=jnp.ones((batch,), jnp.int32))

  def simulate(params, env_params, env_keys, slot_keys, roll_keys, exploration, discount):
    def one(sim, carry):
      tree, best, stats = carry
      b = jnp.arange(env_keys.shape[0])
      node, slot, action, expand = jax.vmap(select, (0, 0, 0, None))(
          tree.edge_action, tree.edges, tree.done[:, 0], exploration)

      # Expansion: one env step from the parent's stored state.
      parent_state = jax.tree.map(lambda x: x[b, node], tree.state)
      depth = tree.depth[b, node] + 1
      step_keys = jax.vmap(jax.random.fold_in)(env_keys, depth - 1)
      obs, state, reward, term, trunc, _ = jax.vmap(model.step, (None, 0, 0, 0))(
          env_params, step_keys, parent_state, action)
      masked = jax.vmap(model.masked_logits, (None, 0, 0))(params, obs, state)
      s_act, s_record = jax.vmap(make_slots)(
          masked, jax.vmap(jax.random.fold_in, (0, None))(slot_keys, sim))
      ended = term | trunc
      done = ended | (depth >= max_depth) | ~(s_record[:, :, PRIOR] >= 0).any(-1)

      # Evaluation: a rollout from the new node. Lanes that reached an ended leaf instead
      # back up that leaf's (constant) value again and write their new node to scratch.
      r_keys = jax.vmap(jax.random.fold_in, (0, None))(roll_keys, sim)
      value, roll_total, roll_steps, roll_ended = jax.vmap(
          model.rollout, (None, None, 0, 0, 0, 0, 0, 0, 0, None))(
              params, env_params, env_keys, r_keys, state, obs, depth, ended | ~expand, term,
              discount)
      new = jnp.where(expand, tree.num_nodes, scratch)
      at_parent = jnp.where(expand, node, scratch)
      path_reward = tree.path_reward[b, node] + reward

      def put(x, v):
        return x.at[b, new].set(v)
      tree = tree._replace(
          up=put(tree.up, jnp.stack(
              [node * num_slots + slot, jax.lax.bitcast_convert_type(reward, jnp.int32)], -1)),
          action=put(tree.action, action), depth=put(tree.depth, depth),
          path_reward=put(tree.path_reward, path_reward),
          terminated=put(tree.terminated, term), done=put(tree.done, done),
          value=put(tree.value, value), state=jax.tree.map(put, tree.state, state),
          edge_action=tree.edge_action if branching is None else put(tree.edge_action, s_act),
          edges=put(tree.edges, s_record).at[b, at_parent, slot, CHILD].set(
              _child_code(new, done)),
          num_nodes=tree.num_nodes + expand.astype(jnp.int32))
      tree = backup(tree, jnp.where(expand, new, node),
                    jnp.where(expand, value, tree.value[b, node]), discount)

      total = path_reward + roll_total
      better = expand & ((roll_ended & ~best.complete) |
                         ((roll_ended == best.complete) & (total > best.total)))

      def pick(new_v, old_v):  # raw uint32 keys have a trailing [2]
        return jnp.where(better.reshape(better.shape + (1,) * (new_v.ndim - 1)), new_v, old_v)
      best = _Best(pick(new, best.node), pick(r_keys, best.rollout_key),
                   pick(total, best.total), pick(roll_ended, best.complete))
      used = expand.astype(jnp.int32)
      stats = SearchStats(
          nodes_expanded=stats.nodes_expanded + used,
          env_steps=stats.env_steps + used * (1 + roll_steps),
          tree_depth=jnp.maximum(stats.tree_depth, depth * used), success=stats.success)
      return tree, best, stats
    return one

  def replay_best(params, env_params, tree, env_key, best_node, rollout_key, root_obs):
    """One root's best episode, re-run: the tree path to `best_node`, then its rollout."""
    def path_step(_, c):
      n, actions = c
      at = jnp.where(n > 0, tree.depth[n] - 1, max_depth)  # the root writes to a spare cell
      parent = jnp.maximum(tree.up[n, 0] // num_slots, 0)
      return parent, actions.at[at].set(tree.action[n])
    _, path = jax.lax.fori_loop(0, max_depth, path_step,
                                (best_node, jnp.zeros((max_depth + 1,), jnp.int32)))
    leaf_depth = tree.depth[best_node]
    greedy = rollout == "greedy"

    def step(c, t):
      state, obs, ended = c
      masked = model.masked_logits(params, obs, state)
      roll_action = _choose(masked, jax.random.fold_in(rollout_key, t - leaf_depth), greedy)
      action = jnp.where(t < leaf_depth, path[t], roll_action)
      valid = ~ended & (t < leaf_depth + rollout_depth)
      next_obs, next_state, reward, term, trunc, info = model.step(
          env_params, jax.random.fold_in(env_key, t), state, action)
      info = {**info, "terminated": term, "truncated": trunc, "final_observation": next_obs}
      out = (obs, action, jnp.where(valid, reward, 0.0), term & valid, trunc & valid,
             jax.nn.log_softmax(masked)[action], next_obs, valid, info)
      return (next_state, next_obs, ended | ~valid | term | trunc), out

    root_state = jax.tree.map(lambda x: x[0], tree.state)
    _, out = jax.lax.scan(step, (root_state, root_obs, jnp.bool_(False)),
                          jnp.arange(max_depth))
    return out

  def search_fn(params, env_params, key, root_states, root_obs, *, exploration=1.25,
                discount=1.0, success_threshold=1.0) -> SearchOutput:
    batch = _check_roots(root_states, root_obs)
    k_env, k_slot, k_roll, k_root = jax.random.split(key, 4)
    env_keys, slot_keys, roll_keys, root_keys = (
        jax.random.split(k, batch) for k in (k_env, k_slot, k_roll, k_root))
    exploration = jnp.asarray(exploration, jnp.float32)
    discount = jnp.asarray(discount, jnp.float32)
    tree = init_tree(params, root_states, root_obs, root_keys)
    best = _Best(jnp.zeros((batch,), jnp.int32), roll_keys, jnp.full((batch,), -jnp.inf),
                 jnp.zeros((batch,), bool))
    zeros = jnp.zeros((batch,), jnp.int32)
    stats = SearchStats(zeros, zeros, zeros, jnp.zeros((batch,), bool))
    tree, best, stats = jax.lax.fori_loop(
        0, num_simulations,
        simulate(params, env_params, env_keys, slot_keys, roll_keys, exploration, discount),
        (tree, best, stats))

    out = jax.vmap(replay_best, (None, None, 0, 0, 0, 0, 0))(
        params, env_params, tree, env_keys, best.node, best.rollout_key, root_obs)
    obs, actions, rewards, term, trunc, log_probs, final_obs, valid, info = jax.tree.map(
        lambda x: jnp.swapaxes(x, 0, 1), out)
    traj = Trajectory(obs=obs, actions=actions, rewards=rewards, terminated=term,
                      truncated=trunc, log_probs=log_probs, final_obs=final_obs, valid=valid,
                      extras={}, info=info)
    total_reward = rewards.sum(0)
    complete = (term | trunc).any(0)
    stats = stats._replace(success=complete & (total_reward >= success_threshold))

    root = tree.edges[:, 0]
    visits = root[..., VISITS]
    q = jnp.where(visits > 0, root[..., VALUE_SUM] / jnp.maximum(visits, 1.0), 0.0)
    slot_actions = tree.edge_action[:, 0]
    scatter = jax.vmap(lambda a, v: jnp.zeros((num_actions,), v.dtype).at[a].add(v))
    return SearchOutput(
        trajectory=traj, total_reward=total_reward, length=valid.sum(0).astype(jnp.int32),
        complete=complete,
        root_action=jnp.take_along_axis(slot_actions, jnp.argmax(visits, 1)[:, None], 1)[:, 0],
        root_visits=scatter(slot_actions, visits.astype(jnp.int32)),
        root_q=scatter(slot_actions, q),
        stats=stats, tree=tree)

  return search_fn
