"""Tree-structured groups in one place: K episodes per task that share prefixes, and credit
from sibling subtrees (the rollout and estimator), and the hook that makes GRPO's K
rollouts per task those K leaves (`TreeFeature`).

The rollout and estimator: sibling subtrees (TreeRPO arXiv 2506.05183, Tree-GRPO arXiv
2509.21240, TreeRL arXiv 2506.11902).

A tree of depth d and branch factor b has K = b^d leaves. All leaves of a task share the
steps `[0, tau_1)`; at each branch step `tau_i` every path is copied b times (environment
state, observation and a sequence policy's `PolicyState`: copying a pytree is the whole
"restore") and the copies go on with independent keys until `tau_{i+1}` (tau_{d+1} = T).
Each step is taken once per path that contains it, so a task costs

    tau_1 + b (tau_2 - tau_1) + b^2 (tau_3 - tau_2) + ... + b^d (T - tau_d)

env steps where K independent episodes cost K T (`tree_env_steps`), for episodes that run
to the window; the rollout counts the steps it actually took inside each path's first
episode (`env_steps`), the figure the budget charges.

Credit (`tree_advantages`): the node at depth i owns the segment `[tau_i, tau_{i+1})`; its
value is the mean outcome of the leaves below it. Siblings (the b children of one node)
share everything before their segment, so comparing their values, normalised within the
sibling group as a GRPO group is (`baselines.group_advantages`), credits the segment's own
actions, with later randomness averaged inside each subtree. A sibling group whose values
are all equal is degenerate (advantage 0, counted). The root segment has no siblings;
`episode_weight` adds the leaves' own group advantage among all K, averaged over the leaves
below the node (the root's average is 0 for every mean-centred kind).

Layout: the rollout is returned per leaf, `[T, N, K]`, a shared step repeated in every leaf
below it; `owner` marks one copy of each (the leftmost leaf's), so a loss over
`valid & owner` trains on each env step once, with the advantage of the node it belongs
to, which is the same in every copy.

The hook: `config.tree` (`add_config`): `enabled`, `branch` (b), `branch_steps` (tau_1 <
... < tau_d; `group_size` must be b^d), `kind` (the sibling normalisation, a
`baselines.group_advantages` kind) and the traced hparam `tree.episode_weight` (the
weight of the leaves' own group advantage, averaged below each node).

It fills two slots: `collect` replaces the group rollout by `collect_tree` (the rollout's
`valid` is `valid & owner`, so the loss trains on each env step once, and the leaves' own
validity rides in `info["tree_valid"]`), and `advantages` gives each step its node's
advantage from the leaves' returns. Metric `env_steps` is the steps the tree took (they
replace the recipe's `N K T`), `tree_degenerate_frac` the sibling groups with equal
values.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence, Tuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax import baselines, rollout
from credit_jax.addons import hooks
from credit_jax.config import require, require_one_of
from credit_jax.envs.base import check_int
from credit_jax.types import SequencePolicy, Trajectory

__all__ = ["add_config", "check_tree", "collect_tree", "segment_index", "tree_advantages",
           "tree_env_steps", "tree_step_advantages", "TreeFeature", "TreeRollout"]


class TreeRollout(NamedTuple):
  traj: Trajectory      # fields [T, N, K, ...], one row per leaf (shared steps repeated)
  owner: jax.Array      # [T, N, K] bool  the one copy of each step that is trained on
  env_steps: jax.Array  # [] int32  steps taken inside each path's first episode


def check_tree(branch: int, branch_steps: Sequence[int], horizon: int
               ) -> Tuple[int, Tuple[int, ...], int]:
  """Validates a tree's shape; returns `(branch, branch_steps, leaves = b^d)`."""
  branch = check_int("branch", branch, minimum=2)
  horizon = check_int("horizon", horizon, minimum=1)
  steps = tuple(check_int("branch_steps", s, minimum=0) for s in branch_steps)
  if not steps or any(b <= a for a, b in zip(steps, steps[1:])) or steps[-1] >= horizon:
    raise ValueError(f"branch_steps must be 1 or more increasing steps in [0, horizon = "
                     f"{horizon}), got {branch_steps}")
  return branch, steps, branch ** len(steps)


def tree_env_steps(branch: int, branch_steps: Sequence[int], horizon: int) -> int:
  """Env steps one task's tree takes when its episodes run to the window (formula)."""
  branch, steps, _ = check_tree(branch, branch_steps, horizon)
  edges = (0,) + steps + (horizon,)
  return int(sum(branch ** i * (edges[i + 1] - edges[i]) for i in range(len(edges) - 1)))


def segment_index(branch_steps: Sequence[int], horizon: int) -> np.ndarray:
  """[T] int: the depth of the node that owns each step (0 before tau_1)."""
  return np.searchsorted(np.asarray(branch_steps), np.arange(horizon), side="right")


def collect_tree(env: Any, env_params: Any, policy_fn: Any, policy_params: Any,
                 key: jax.Array, num_tasks: int, branch: int,
                 branch_steps: Sequence[int], horizon: int) -> TreeRollout:
  """One tree of `branch ** len(branch_steps)` leaves per task (module docstring).

  Args:
    env, env_params, policy_fn, policy_params: as in `rollout.collect_groups`
      (`policy_fn` a `PolicyFn` or a `SequencePolicy`).
    key: PRNG key.
    num_tasks: N tasks, each reset once.
    branch: b >= 2 children per branching.
    branch_steps: the increasing steps tau_1 < ... < tau_d in [0, horizon) where every
      path branches (tau_1 = 0: the K leaves share only the start state).
    horizon: T steps per leaf.
  Returns:
    `TreeRollout` with `traj` leaves [T, N, K]; `valid` marks each leaf's first episode.
  """
  num_tasks = check_int("num_tasks", num_tasks, minimum=1)
  branch, steps, leaves = check_tree(branch, branch_steps, horizon)
  depth = len(steps)
  edges = (0,) + steps + (horizon,)
  key_reset, key_run = jax.random.split(key)
  obs, env_state = rollout.reset(env, env_params, key_reset, num_tasks)
  sequence = isinstance(policy_fn, SequencePolicy)
  pstate = rollout.initial_policy_state(policy_fn, num_tasks) if sequence else None
  ended = jnp.zeros((num_tasks,), bool)
  pieces, valids = [], []
  for i in range(depth + 1):
    if i > 0:   # branch: every path's carry copied b times, member-major within a path
      env_state, obs, pstate, ended = jax.tree.map(
          lambda x: jnp.repeat(x, branch, axis=0), (env_state, obs, pstate, ended))
    length = edges[i + 1] - edges[i]
    if length == 0:
      continue
    out = rollout.collect(env, env_params, policy_fn, policy_params,
                          jax.random.fold_in(key_run, i), env_state, obs, length,
                          policy_state=pstate)
    traj, carry = out
    env_state, obs = carry[0], carry[1]
    pstate = carry[2] if sequence else None
    valid = rollout.first_episode_mask(traj.terminated, traj.truncated) & ~ended[None]
    ended = ended | jnp.any(traj.dones & valid, axis=0)
    # Paths [N * b^i] -> leaves [N, K]: leaf j descends from path j // b^(d - i).
    spread = lambda x: jnp.repeat(x.reshape((length, num_tasks, branch ** i) + x.shape[2:]),
                                  branch ** (depth - i), axis=2)
    pieces.append(jax.tree.map(spread, traj._replace(valid=valid)))
    owner = (np.arange(leaves) % branch ** (depth - i)) == 0
    valids.append(np.broadcast_to(owner, (length, num_tasks, leaves)))
  traj = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *pieces)
  owner = jnp.asarray(np.concatenate(valids, axis=0))
  return TreeRollout(traj=traj, owner=owner,
                     env_steps=jnp.sum(traj.valid & owner).astype(jnp.int32))


def tree_advantages(outcomes: jax.Array, branch: int, depth: int, *, kind: str = "grpo",
                    episode_weight: Any = 0.0, eps: Any = 1e-6):
  """Each leaf's ancestors' advantages, depth by depth.

  Args:
    outcomes: [..., K] float, each leaf's outcome (its episode return), K = b^d leaves in
      `collect_tree`'s order.
    branch, depth: b >= 2 and d >= 1.
    kind: a `baselines.group_advantages` kind, used within each sibling group (and among
      all K leaves for the episode term).
    episode_weight: [] weight of the episode term (may be traced).
  Returns:
    `(node_adv [d + 1, ..., K], degenerate [d + 1, ...] int32)`: row i is the advantage of
    the depth-i node above each leaf (row 0 the root: the episode term only); degenerate
    counts the sibling groups at depth i whose values are all equal (row 0: 0).
  """
  branch = check_int("branch", branch, minimum=2)
  depth = check_int("depth", depth, minimum=1)
  leaves = branch ** depth
  if outcomes.ndim < 1 or outcomes.shape[-1] != leaves:
    raise ValueError(f"outcomes must be [..., K] with K = branch ** depth = {leaves}, got "
                     f"{outcomes.shape}")
  lead = outcomes.shape[:-1]
  episode, _ = baselines.group_advantages(outcomes, kind=kind, eps=eps)
  rows = [episode_weight * jnp.broadcast_to(jnp.mean(episode, -1, keepdims=True),
                                            outcomes.shape)]
  degenerate = [jnp.zeros(lead, jnp.int32)]
  for i in range(1, depth + 1):
    below = branch ** (depth - i)
    values = jnp.mean(outcomes.reshape(lead + (branch ** i, below)), axis=-1)
    siblings = values.reshape(lead + (branch ** (i - 1), branch))
    adv, flat = baselines.group_advantages(siblings, kind=kind, eps=eps)
    subtree = jnp.mean(episode.reshape(lead + (branch ** i, below)), axis=-1)
    node = adv.reshape(lead + (branch ** i,)) + episode_weight * subtree
    rows.append(jnp.repeat(node, below, axis=-1))
    degenerate.append(jnp.sum(flat, axis=-1).astype(jnp.int32))
  return jnp.stack(rows), jnp.stack(degenerate)


def tree_step_advantages(node_adv: jax.Array, branch_steps: Sequence[int], horizon: int
                         ) -> jax.Array:
  """[T, ..., K]: each step's node advantage (`segment_index` picks the row).

  Args:
    node_adv: [d + 1, ..., K] from `tree_advantages`.
  """
  index = segment_index(branch_steps, horizon)
  if node_adv.shape[0] != len(branch_steps) + 1:
    raise ValueError(f"node_adv must be [d + 1, ..., K] with d = {len(branch_steps)} "
                     f"branch steps, got {node_adv.shape}")
  return node_adv[index]


_VALID_KEY = "tree_valid"


def add_config(c: ml_collections.ConfigDict, branch: int = 2, branch_steps=(0,),
               episode_weight: float = 0.0) -> ml_collections.ConfigDict:
  """Adds an enabled `config.tree` block to `c`."""
  c.tree = ml_collections.ConfigDict()
  c.tree.enabled = True           # group rollouts as trees sharing prefixes
  c.tree.branch = branch          # b children per branching
  c.tree.branch_steps = tuple(branch_steps)  # steps where every path branches
  c.tree.kind = "grpo"            # sibling normalisation (baselines.group_advantages kind)
  c.tree.episode_weight = episode_weight     # leaves' own group advantage (a traced hparam)
  return c


class TreeFeature(hooks.Feature):
  name = "tree"
  field = "tree.enabled"
  estimator = True
  traced = ("episode_weight",)

  def validate(self, config, recipe: hooks.Recipe) -> None:
    t = config.tree
    require(recipe.rollout == hooks.GROUPS, "tree.enabled",
            f"a tree replaces a group rollout: the {recipe.name} recipe's rollout is "
            f"{recipe.rollout!r}, not groups")
    try:
      _, steps, leaves = check_tree(t.branch, t.branch_steps,
                                                  config.horizon)
    except ValueError as error:
      require(False, "tree.branch_steps", str(error))
    require(int(config.group_size) == leaves, "group_size",
            f"a tree of branch {t.branch} and {len(steps)} branch steps has {leaves} "
            f"leaves; group_size is {config.group_size}")
    require_one_of(t.kind, "tree.kind", baselines.KINDS)

  def bind(self, context: hooks.Context) -> hooks.Bound:
    t = context.config.tree
    branch, steps, kind = int(t.branch), tuple(int(s) for s in t.branch_steps), str(t.kind)

    def collect(carry, inputs: hooks.CollectInput):
      out = collect_tree(inputs.env, inputs.env_params, inputs.policy, inputs.params,
                         inputs.key, inputs.num_tasks, branch, steps, inputs.horizon)
      info = {**out.traj.info, _VALID_KEY: out.traj.valid}
      traj = out.traj._replace(valid=out.traj.valid & out.owner, info=info)
      return traj, carry, {"env_steps": out.env_steps.astype(jnp.float32)}

    def advantages(carry, inputs: hooks.EstimatorInput):
      traj = inputs.traj
      leaf_valid = traj.info[_VALID_KEY]                                  # [T, N, K]
      outcomes = jnp.sum(jnp.where(leaf_valid, inputs.signal.rewards, 0.0), axis=0)
      node, degenerate = tree_advantages(outcomes, branch, len(steps), kind=kind,
                                         episode_weight=inputs.hp["tree.episode_weight"])
      adv = tree_step_advantages(node, steps, traj.rewards.shape[0])
      sibling_groups = sum(branch ** (i - 1) for i in range(1, len(steps) + 1))
      return jnp.where(traj.valid, adv, 0.0), carry, {
          "tree_degenerate_frac": jnp.sum(degenerate, axis=0).mean() / sibling_groups}
    return hooks.Bound(advantages=advantages, collect=collect)
