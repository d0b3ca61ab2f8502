"""GiGPO as a hook: GRPO's episode advantage plus a step advantage from anchor states.

`config.gigpo` (`add_config`): `enabled`; `anchor` ("state": the environment state each
step started from, kept by `StepStateWrapper`; "obs": the observation, for environments
whose state is not to be compared); `kind` ("grpo" or "mean", `anchors.KINDS`); `method`
("table" or "sort", `anchors.METHODS`); traced hparams `gigpo.step_weight` (the weight of
the step advantage, GiGPO's omega) and `gigpo.gamma` (the discount of the step returns).

Each update, in every task group of the GRPO rollout `[T, N, K]`, steps whose anchors are
equal form a group; their discounted returns-to-go (of the shaped rewards) give the step
advantages (`credit_jax.anchors.anchor_advantages`), added with the weight to the
recipe's own episode advantages. Metrics: `gigpo_groups` (anchor groups per task group),
`gigpo_degenerate_frac` (the fraction of them with one step or equal returns),
`gigpo_anchored_frac` (valid steps in a group with signal) and `gigpo_unresolved`.
No env steps and no critic are added.

On KeyChain the observation does not depend on past actions (all K trajectories of a
group see the same observation at step t), so "obs" anchors are the K steps at each t
and add little to GRPO; "state" anchors also split them by whether every pivotal answer
so far was right.
"""
from __future__ import annotations

import jax.numpy as jnp
import ml_collections

from credit_jax import anchors, returns
from credit_jax.addons import hooks, step_states
from credit_jax.config import require

__all__ = ["GigpoFeature", "add_config", "ANCHORS"]

ANCHORS = ("state", "obs")


def add_config(c: ml_collections.ConfigDict, step_weight: float = 1.0,
               anchor: str = "state") -> ml_collections.ConfigDict:
  """Adds an enabled `config.gigpo` block to `c`."""
  c.gigpo = ml_collections.ConfigDict()
  c.gigpo.enabled = True          # add GiGPO's step advantages to GRPO's
  c.gigpo.anchor = anchor         # state | obs: what makes two steps the same
  c.gigpo.kind = "grpo"           # grpo | mean: normalisation within an anchor group
  c.gigpo.method = "table"        # table | sort (credit_jax/anchors.py)
  c.gigpo.step_weight = step_weight  # omega, the step advantage's weight (a traced hparam)
  c.gigpo.gamma = 0.95            # discount of the step returns (a traced hparam)
  return c


class GigpoFeature(hooks.Feature):
  name = "gigpo"
  field = "gigpo.enabled"
  estimator = True
  traced = ("step_weight", "gamma")

  def validate(self, config, recipe: hooks.Recipe) -> None:
    g = config.gigpo
    require(recipe.rollout == hooks.GROUPS, "gigpo.enabled",
            f"anchor groups compare the K trajectories of a task group: the {recipe.name} "
            f"recipe's rollout is {recipe.rollout!r}, not groups")
    require(g.anchor in ANCHORS, "gigpo.anchor", f"must be one of {ANCHORS}, got "
            f"{g.anchor!r}")
    require(g.kind in anchors.KINDS, "gigpo.kind",
            f"must be one of {anchors.KINDS}, got {g.kind!r}")
    require(g.method in anchors.METHODS, "gigpo.method",
            f"must be one of {anchors.METHODS}, got {g.method!r}")
    require(float(g.step_weight) >= 0.0, "gigpo.step_weight",
            f"must be >= 0, got {g.step_weight}")
    require(0.0 <= float(g.gamma) <= 1.0, "gigpo.gamma",
            f"must lie in [0, 1], got {g.gamma}")

  def wrap_env(self, config, env, env_params):
    if config.gigpo.anchor == "state":
      return step_states.StepStateWrapper(env), env_params
    return env, env_params

  def bind(self, context: hooks.Context) -> hooks.Bound:
    return _GigpoBound(context.config.gigpo)


class _GigpoBound(hooks.Bound):

  def __init__(self, g):
    self.anchor, self.kind, self.method = str(g.anchor), str(g.kind), str(g.method)
    self.advantages = self._advantages

  def _advantages(self, carry, inputs: hooks.EstimatorInput):
    traj, hp = inputs.traj, inputs.hp
    valid = traj.valid                                                   # [T, N, K]
    keys = traj.info[step_states.INFO_KEY] if self.anchor == "state" else traj.obs
    rewards = jnp.where(valid, inputs.signal.rewards, 0.0)
    to_go = returns.discounted_returns(rewards, hp["gigpo.gamma"],
                                       terminated=traj.dones & valid)
    step_adv, stats = anchors.anchor_advantages(keys, to_go, valid, kind=self.kind,
                                                method=self.method)
    adv = jnp.where(valid, inputs.advantages + hp["gigpo.step_weight"] * step_adv, 0.0)
    groups = jnp.maximum(stats["num_groups"], 1).astype(jnp.float32)
    return adv, carry, {
        "gigpo_groups": stats["num_groups"].astype(jnp.float32).mean(),
        "gigpo_degenerate_frac": (stats["degenerate"] / groups).mean(),
        "gigpo_anchored_frac": jnp.sum(stats["anchored_steps"]) / jnp.maximum(
            jnp.sum(valid), 1),
        "gigpo_unresolved": jnp.sum(stats["unresolved"]).astype(jnp.float32)}
