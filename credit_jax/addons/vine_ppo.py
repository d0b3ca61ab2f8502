"""VinePPO as a hook: Monte-Carlo advantages from vines replace PPO's GAE.

`config.vine` (`add_config`): `enabled`, `num_vines` (K rollouts per vine point),
`every` (m: vine points every m steps). Each update, from the state at every m-th step
of the rollout (`StepStateWrapper`'s `info["step_state"]`, and a sequence policy's carry
from `extras["carry"]`), K vines run to the episode's end under the policy that collected
the rollout, and `credit_jax.vine.vine_advantages` of their mean returns are the update's
advantages (discount: the recipe's `gamma`; 1 in a recipe without one, GRPO). No value network is needed: PPO's value head
still trains on `advantages + values` unless `vf_coef = 0`, and plain PPO + GAE is the
comparison with one. The vines' steps are metric `env_steps` (added to the recipe's) and
`vine_env_steps`, so budgets count them.

Vines end at the rollout window, as the trajectory does, so windows must hold whole
episodes: episodic rollouts (GRPO-style groups, episodes) always do; a continuing window
(PPO) does when the episodes have a fixed length that divides `num_steps` (KeyChain's
horizon), which `validate` checks. A history window (`history_window > 0`) is refused:
its state lives outside the wrapped environment the vines restart.
"""
from __future__ import annotations

import ml_collections

from credit_jax import vine
from credit_jax.addons import hooks, step_states
from credit_jax.config import require

__all__ = ["VineFeature", "add_config"]


def add_config(c: ml_collections.ConfigDict, num_vines: int = 4, every: int = 1
               ) -> ml_collections.ConfigDict:
  """Adds an enabled `config.vine` block to `c`."""
  c.vine = ml_collections.ConfigDict()
  c.vine.enabled = True           # VinePPO's Monte-Carlo advantages replace GAE
  c.vine.num_vines = num_vines    # K vines per vine point
  c.vine.every = every            # vine points every m steps (1: every step, as published)
  return c


class VineFeature(hooks.Feature):
  name = "vine"
  field = "vine.enabled"
  estimator = True

  def validate(self, config, recipe: hooks.Recipe) -> None:
    require(int(config.vine.num_vines) >= 1, "vine.num_vines",
            f"must be >= 1, got {config.vine.num_vines}")
    require(int(config.vine.every) >= 1, "vine.every",
            f"must be >= 1, got {config.vine.every}")
    require(int(config.get("history_window", 0) or 0) == 0, "history_window",
            "vines restart the environment state, and a history window lives outside it")
    if recipe.rollout == hooks.CONTINUING:
      horizon = config.get("env_kwargs", {}).get("horizon")
      require(horizon is not None and int(config.num_steps) % int(horizon) == 0,
              "num_steps", f"vines end at the window: with a continuing rollout it must "
              f"hold whole episodes of a fixed horizon (env_kwargs.horizon = {horizon}), "
              f"got num_steps = {config.num_steps}")
      require(int(horizon) % int(config.vine.every) == 0, "vine.every",
              f"must divide the horizon {horizon} so every episode starts a segment")

  def wrap_env(self, config, env, env_params):
    del config
    return step_states.StepStateWrapper(env), env_params

  def bind(self, context: hooks.Context) -> hooks.Bound:
    return _VineBound(context)


class _VineBound(hooks.Bound):

  def __init__(self, context: hooks.Context):
    self.env = context.env.inner if isinstance(context.env, step_states.StepStateWrapper) \
        else context.env
    self.rollout_params = context.env_params
    self.policy = context.policy
    self.num_vines = int(context.config.vine.num_vines)
    self.every = int(context.config.vine.every)
    self.advantages = self._advantages

  def _advantages(self, carry, inputs: hooks.EstimatorInput):
    traj = inputs.traj
    gamma = inputs.hp.get("gamma", 1.0)    # GRPO has none: undiscounted, as its returns
    out = vine.collect_vines(self.env, self.rollout_params, self.policy, inputs.params,
                             inputs.key, traj, step_states.step_states(self.policy, traj),
                             num_vines=self.num_vines, every=self.every, gamma=gamma)
    adv = vine.vine_advantages(inputs.signal.rewards, out.values, every=self.every,
                               gamma=gamma, terminated=traj.terminated,
                               truncated=traj.truncated, valid=traj.valid)
    steps = out.env_steps.astype("float32")
    return adv, carry, {"env_steps": steps, "vine_env_steps": steps,
                        "vine_value_mean": out.values.mean(),
                        "vine_return_std": out.returns.std(axis=-1).mean()}
