"""COCOA-reward with the exact coefficients, as a training arm: the ablation that says
what the learned hindsight model costs (issue 50's "exact coefficients in training").

A feature object passed to the recipe (`reinforce.make_train(config, features=(
ExactCocoa(...),))`), the way a fork adds a credit method: it fills the `advantages` slot
with `contributions.CocoaCredit`, the same credit the learned COCOA-reward feature gives,
but with `w(s_t, a, m)` from `probe.corridor_credit`'s backward pass over (t, has_key,
door_open) at the current policy (the epsilon mixture the agent acts with), instead of a
fitted model. On the corridor the door flag is set only on the treasure cell, the last
step, where no reward follows and w = 1; so a step's row is (t, has_key), has_key read
from the observation's key one-hot (`probe.step_coefficients`).

Config block `cocoa_exact`: `enabled` (the study's `methods.cell_config` adds it for the
method "cocoa_exact", and `study.features_of` passes the object). Corridor only
(ConveyorTreasure-v0, whole episodes starting at t = 0: REINFORCE's rollout).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from credit_jax import nets
from credit_jax.addons import contributions as cb
from credit_jax.addons import hindsight_credit, hooks
from credit_jax.config import require
from credit_jax.envs.conveyor_treasure import ConveyorTreasure
from credit_jax.experiments.cocoa_corridor.probe import corridor_credit, step_coefficients

__all__ = ["ExactCocoa", "step_coefficients"]

BLOCK = "cocoa_exact"


class ExactCocoa(hooks.Feature):
  """The estimator feature (module doc); `epsilon` is the agent's exploration rate."""
  name = BLOCK
  field = f"{BLOCK}.enabled"
  estimator = True

  def __init__(self, epsilon: float):
    self.epsilon = float(epsilon)

  def validate(self, config, recipe: hooks.Recipe) -> None:
    require(recipe.rollout != hooks.CONTINUING, self.field,
            "the exact coefficients need whole episodes from t = 0 (REINFORCE)")

  def bind(self, context: hooks.Context) -> hooks.Bound:
    env = context.env
    while not isinstance(env, ConveyorTreasure) and hasattr(env, "inner"):
      env = env.inner
    if not isinstance(env, ConveyorTreasure):
      raise ValueError(f"{self.field}: the exact coefficients cover ConveyorTreasure-v0, "
                       f"got {type(context.env).__name__}")
    env_params, network, eps = context.env_params, context.network, self.epsilon
    values = hindsight_credit.reward_values_of(env, env_params)
    apply_fn = lambda p, obs: nets.epsilon_mixture_logits(network.apply(p, obs)[0], eps)

    def advantages(carry, inputs: hooks.EstimatorInput):
      traj = inputs.traj
      _, w, _ = corridor_credit(env, env_params, apply_fn,
                                jax.lax.stop_gradient(inputs.params))
      rewards = jnp.where(traj.valid, inputs.signal.rewards, 0.0)
      classes = cb.reward_classes(rewards, values)
      future, _ = cb.future_by_class(rewards, classes, len(values), 1.0, traj.dones,
                                     traj.valid)                     # [T, B, M]
      coeff = step_coefficients(w, traj.obs, traj.valid) - 1.0      # [T, B, M, A]
      contributions = jnp.einsum("tbma,tbm->tba", coeff, future)
      credit = cb.CocoaCredit(immediate=rewards,
                              contributions=jnp.where(traj.valid[..., None],
                                                      contributions, 0.0),
                              coefficients=coeff)
      return credit, carry, {}

    return hooks.Bound(advantages=advantages)
