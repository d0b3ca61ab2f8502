"""`make_search`: the batched tree search, composed from the package's parts.

One simulation, for every root of the batch at once:

  1. selection (`selection.py`): from the root, a pluggable rule (PUCT, UCB1, Gumbel, or
     your own; a rule may bring its own root rule) over valid slots until an unexpanded
     slot or a node that cannot be expanded (episode ended, depth cap);
  2. expansion (`model.py`, `tree.py`): one environment step from the parent's stored
     state, written as a new node;
  3. evaluation (`model.py`): a greedy or sampled policy rollout to the end of the
     episode (bounded by `rollout_depth` and `max_depth`), bootstrapped with `value_fn`
     where it stops early;
  4. backup (`backup.py`) of the discounted return along the parent pointers;
  5. the best episode so far is tracked, and replayed once at the end (`extract.py`).

Cost: each simulation does O(depth) work, never O(N): every write is a single-node
scatter, selection and rollouts are vmapped per root with small loop carries, and the
backup loop runs over the explicit batch axis. Call the search with seeds or tasks folded
into `B`: an outer `jax.vmap` is correct but loses this. The tree's depth still grows
(about logarithmically) with the number of simulations, and so does the cost of a
simulation.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from credit_jax.search.backup import backup
from credit_jax.search import extract
from credit_jax.search import selection as selection_lib
from credit_jax.search.model import (ActionMaskFn, EnvModel, LogitsFn, ValueFn, check_roots,
                                     make_env_model)
from credit_jax.search.tree import (PRIOR, VALUE_SUM, VISITS, NewNodes, SearchOutput,
                                    SearchStats, SearchTree, add_nodes, init_tree, new_slots,
                                    root_statistics)


def _descend(rule, tree: SearchTree, root_noise, exploration, *, sampled_slots: bool,
             num_simulations: int):
  """Every root's descent (`selection.select` vmapped); `rule.root`, if any, at the root."""
  root_rule = getattr(rule, "root", None)

  def one(edge_action, edges, root_done, noise=None):
    root_scores = None
    if root_rule is not None:
      def root_scores(e):
        return root_rule(e[:, VISITS], e[:, VALUE_SUM], e[:, PRIOR], noise,
                         e[:, VISITS].sum().astype(jnp.int32), num_simulations)
    return selection_lib.select(rule, edge_action, edges, root_done, exploration,
                                sampled_slots=sampled_slots, root_scores=root_scores)
  args = (tree.edge_action, tree.edges, tree.done[:, 0])
  return jax.vmap(one)(*args) if root_rule is None else jax.vmap(one)(*args, root_noise)


def _simulation(model: EnvModel, rule, params, env_params, keys, root_noise, exploration,
                discount, *, num_slots: int, sampled_slots: bool, num_simulations: int):
  """The body `(sim, (tree, best, stats)) -> (tree, best, stats)` of the simulation loop."""
  env_keys, slot_keys, roll_keys = keys

  def one(sim, carry):
    tree, best, stats = carry
    b = jnp.arange(env_keys.shape[0])
    node, slot, action, expand = _descend(rule, tree, root_noise, exploration,
                                          sampled_slots=sampled_slots,
                                          num_simulations=num_simulations)

    # Expansion: one env step from the parent's stored state.
    parent_state = jax.tree.map(lambda x: x[b, node], tree.state)
    depth = tree.depth[b, node] + 1
    step_keys = jax.vmap(jax.random.fold_in)(env_keys, depth - 1)
    obs, state, reward, term, trunc, _ = jax.vmap(model.step, (None, 0, 0, 0))(
        env_params, step_keys, parent_state, action)
    masked = jax.vmap(model.masked_logits, (None, 0, 0))(params, obs, state)
    s_act, s_record = jax.vmap(lambda m, k: new_slots(m, k, num_slots, sampled_slots))(
        masked, jax.vmap(jax.random.fold_in, (0, None))(slot_keys, sim))
    ended = term | trunc
    done = ended | (depth >= model.max_depth) | ~(s_record[:, :, PRIOR] >= 0).any(-1)

    # Evaluation: a rollout from the new node. Lanes that reached an ended leaf instead
    # back up that leaf's (constant) value again and write their new node to scratch.
    r_keys = jax.vmap(jax.random.fold_in, (0, None))(roll_keys, sim)
    value, roll_total, roll_steps, roll_ended = jax.vmap(
        model.rollout, (None, None, 0, 0, 0, 0, 0, 0, 0, None))(
            params, env_params, env_keys, r_keys, state, obs, depth, ended | ~expand, term,
            discount)
    path_reward = tree.path_reward[b, node] + reward
    tree, new = add_nodes(
        tree, NewNodes(node, slot, action, reward, term, done, value, state, s_act,
                       s_record), expand, write_slot_actions=sampled_slots)
    tree = backup(tree, jnp.where(expand, new, node),
                             jnp.where(expand, value, tree.value[b, node]), discount)

    best = extract.keep_better(
        best, extract.BestEpisode(new, r_keys, path_reward + roll_total, roll_ended), expand)
    used = expand.astype(jnp.int32)
    stats = SearchStats(
        nodes_expanded=stats.nodes_expanded + used,
        env_steps=stats.env_steps + used * (1 + roll_steps),
        tree_depth=jnp.maximum(stats.tree_depth, depth * used), success=stats.success)
    return tree, best, stats
  return one


def make_search(env, logits_fn: LogitsFn, *, num_simulations: int, max_depth: int,
                value_fn: Optional[ValueFn] = None,
                action_mask_fn: Optional[ActionMaskFn] = None,
                selection="puct", branching: Optional[int] = None,
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
    selection: "puct" (prior-weighted), "ucb1" (tries every slot once first), "gumbel"
      (Gumbel MuZero: sequential halving over Gumbel-perturbed slots at the root, the
      deterministic rule below), or a function with the selection-rule signature
      (`credit_jax/search/selection.py`).
    branching: None to expand all `A` actions per node, else this many distinct actions
      sampled from the policy per node (Gumbel top-k).
    rollout: "greedy" or "sample" leaf rollouts.
    rollout_depth: rollout steps from a new node (default `max_depth`); 0 evaluates leaves
      with `value_fn` only (or 0 without one).

  Returns:
    `search_fn(params, env_params, key, root_states, root_obs, *, exploration=1.25,
    discount=1.0, success_threshold=1.0) -> SearchOutput` with root_states, root_obs
    pytrees of `[B, ...]`. `exploration`, `discount`, `success_threshold` may be traced.
  """
  rule = selection_lib.get_rule(selection)
  if num_simulations < 1 or max_depth < 1:
    raise ValueError(f"num_simulations and max_depth must be >= 1, got {num_simulations}, "
                     f"{max_depth}")
  rollout_depth = max_depth if rollout_depth is None else int(rollout_depth)
  model = make_env_model(env, logits_fn, value_fn, action_mask_fn, max_depth=max_depth,
                         rollout=rollout, rollout_depth=rollout_depth)
  num_actions = model.num_actions
  if branching is not None and not 1 <= branching <= num_actions:
    raise ValueError(f"branching must be in [1, {num_actions}] or None, got {branching}")
  num_slots = num_actions if branching is None else int(branching)
  num_nodes = num_simulations + 2
  if num_nodes >= 2**24:
    raise ValueError(f"num_simulations must be below {2**24 - 2} (child pointers are stored "
                     f"exactly in float32), got {num_simulations}")
  sampled = branching is not None

  def search_fn(params, env_params, key, root_states, root_obs, *, exploration=1.25,
                discount=1.0, success_threshold=1.0) -> SearchOutput:
    batch = check_roots(root_states, root_obs)
    k_env, k_slot, k_roll, k_root = jax.random.split(key, 4)
    env_keys, slot_keys, roll_keys, root_keys = (
        jax.random.split(k, batch) for k in (k_env, k_slot, k_roll, k_root))
    exploration = jnp.asarray(exploration, jnp.float32)
    discount = jnp.asarray(discount, jnp.float32)
    masked = jax.vmap(model.masked_logits, (None, 0, 0))(params, root_obs, root_states)
    actions, records = jax.vmap(lambda m, k: new_slots(m, k, num_slots, sampled))(
        masked, root_keys)
    tree = init_tree(root_states, actions, records, num_nodes)
    # The root slots' Gumbel noise, for a rule with a root rule: the noise that sampled
    # the slots under `branching`, so both see the same draw.
    root_noise = None
    if getattr(rule, "root", None) is not None:
      root_noise = jax.vmap(lambda m, k, a: jax.random.gumbel(k, m.shape)[a])(
          masked, root_keys, actions)
    zeros = jnp.zeros((batch,), jnp.int32)
    stats = SearchStats(zeros, zeros, zeros, jnp.zeros((batch,), bool))
    body = _simulation(model, rule, params, env_params, (env_keys, slot_keys, roll_keys),
                       root_noise, exploration, discount, num_slots=num_slots,
                       sampled_slots=sampled, num_simulations=num_simulations)
    tree, best, stats = jax.lax.fori_loop(0, num_simulations, body,
                                          (tree, extract.no_episode(roll_keys), stats))

    traj = extract.best_trajectory(model, params, env_params, tree, env_keys, best, root_obs)
    total_reward = traj.rewards.sum(0)
    complete = (traj.terminated | traj.truncated).any(0)
    stats = stats._replace(success=complete & (total_reward >= success_threshold))
    root_scores = None
    if getattr(rule, "root", None) is not None:  # the rule's final choice at the root
      e = tree.edges[:, 0]
      root_scores = jax.vmap(lambda v, w, p, g: rule.root(v, w, p, g, num_simulations,
                                                          num_simulations))(
          e[..., VISITS], e[..., VALUE_SUM], e[..., PRIOR], root_noise)
    root_action, root_visits, root_q = root_statistics(tree, num_actions, root_scores)
    return SearchOutput(
        trajectory=traj, total_reward=total_reward,
        length=traj.valid.sum(0).astype(jnp.int32), complete=complete,
        root_action=root_action, root_visits=root_visits, root_q=root_q,
        stats=stats, tree=tree)

  return search_fn


__all__ = ["SearchOutput", "SearchStats", "SearchTree", "make_search"]
