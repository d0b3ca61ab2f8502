"""Tree-structured groups as a hook: GRPO's K rollouts per task become the K leaves of a
tree that shares prefixes, credited by sibling subtrees (`credit_jax/tree_rollouts.py`).

`config.tree` (`add_config`): `enabled`, `branch` (b), `branch_steps` (tau_1 < ... <
tau_d; `group_size` must be b^d), `kind` (the sibling normalisation, a
`baselines.group_advantages` kind) and the traced hparam `tree.episode_weight` (the weight
of the leaves' own group advantage, averaged below each node).

It fills two slots: `collect` replaces the group rollout by `collect_tree` (the rollout's
`valid` is `valid & owner`, so the loss trains on each env step once, and the leaves' own
validity rides in `info["tree_valid"]`), and `advantages` gives each step its node's
advantage from the leaves' returns. Metric `env_steps` is the steps the tree took (they
replace the recipe's `N K T`), `tree_degenerate_frac` the sibling groups with equal
values.
"""
from __future__ import annotations

import jax.numpy as jnp
import ml_collections

from credit_jax import baselines, tree_rollouts
from credit_jax.addons import hooks
from credit_jax.config import require

__all__ = ["TreeFeature", "add_config", "VALID_KEY"]

VALID_KEY = "tree_valid"


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
      _, steps, leaves = tree_rollouts.check_tree(t.branch, t.branch_steps,
                                                  config.horizon)
    except ValueError as error:
      require(False, "tree.branch_steps", str(error))
    require(int(config.group_size) == leaves, "group_size",
            f"a tree of branch {t.branch} and {len(steps)} branch steps has {leaves} "
            f"leaves; group_size is {config.group_size}")
    require(t.kind in baselines.KINDS, "tree.kind",
            f"must be one of {baselines.KINDS}, got {t.kind!r}")

  def bind(self, context: hooks.Context) -> hooks.Bound:
    return _TreeBound(context.config)


class _TreeBound(hooks.Bound):

  def __init__(self, config):
    self.branch = int(config.tree.branch)
    self.steps = tuple(int(s) for s in config.tree.branch_steps)
    self.kind = str(config.tree.kind)
    self.collect = self._collect
    self.advantages = self._advantages

  def _collect(self, carry, inputs: hooks.CollectInput):
    out = tree_rollouts.collect_tree(inputs.env, inputs.env_params, inputs.policy,
                                     inputs.params, inputs.key, inputs.num_tasks,
                                     self.branch, self.steps, inputs.horizon)
    info = {**out.traj.info, VALID_KEY: out.traj.valid}
    traj = out.traj._replace(valid=out.traj.valid & out.owner, info=info)
    return traj, carry, {"env_steps": out.env_steps.astype(jnp.float32)}

  def _advantages(self, carry, inputs: hooks.EstimatorInput):
    traj = inputs.traj
    leaf_valid = traj.info[VALID_KEY]                                    # [T, N, K]
    outcomes = jnp.sum(jnp.where(leaf_valid, inputs.signal.rewards, 0.0), axis=0)
    node, degenerate = tree_rollouts.tree_advantages(
        outcomes, self.branch, len(self.steps), kind=self.kind,
        episode_weight=inputs.hp["tree.episode_weight"])
    adv = tree_rollouts.tree_step_advantages(node, self.steps, traj.rewards.shape[0])
    sibling_groups = sum(self.branch ** (i - 1) for i in range(1, len(self.steps) + 1))
    return jnp.where(traj.valid, adv, 0.0), carry, {
        "tree_degenerate_frac": jnp.sum(degenerate, axis=0).mean() / sibling_groups}
