"""What `success` means on gymnax's own environments, per id, where a rule exists.

credit_jax's environments (`CreditEnv`) pay 1 for solving the task and 0 otherwise, so an
episode succeeded iff its return is positive; a few report `info["success"]` where the
return is no guide (KeyToDoor's apples). gymnax's ids have no success notion of their
own; this table gives one to those whose authors score them by the outcome of the last
step (bsuite, Osband et al. 2020):

  id                     an episode succeeded iff                 recipes report it
  Catch-bsuite           the ball was caught: final reward +1     yes
  MemoryChain-bsuite     the recalled bit was right: final +1     yes
  UmbrellaChain-bsuite   the umbrella choice was right: final +1  no (see below)

For the first two the final reward is the only nonzero one, so the recipes' own test
(return > 0, or some reward > 0) is this rule, and `credit_jax.episodes.has_success` turns
their `success` metric on. On UmbrellaChain every earlier step pays a random +-1
distractor, so the return says little about the umbrella; the recipes do not report its
`success` (use `bsuite/UmbrellaChain-v0`, bsuite's task as bsuite defines it, whose
`info["success"]` they read; gymnax's id is a different environment,
`credit_jax.envs.GYMNAX_VARIANTS`), while `scripts/evaluate.py` applies the rule itself.
Not defined: DeepSea (its reward at the goal is noisy unless `deterministic`),
DiscountingChain (every chain pays; bsuite scores the chain chosen), the classic-control
and MinAtar ids (scored by return).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional

import jax
import jax.numpy as jnp

from credit_jax.envs.base import CreditEnv


@dataclasses.dataclass(frozen=True)
class SuccessRule:
  """An id's success rule: the episode terminated (not truncated) on a positive reward.

  Attributes:
    meaning: what a success is, in words.
    recipes_agree: the recipes' own test (return > 0 / some reward > 0) gives the same
      answer on this id, so they may report `success`.
  """
  meaning: str
  recipes_agree: bool


RULES: Dict[str, SuccessRule] = {
    "Catch-bsuite": SuccessRule("the ball was caught (final reward +1)", True),
    "MemoryChain-bsuite": SuccessRule("the recalled bit was right (final reward +1)", True),
    "UmbrellaChain-bsuite": SuccessRule(
        "the umbrella choice was right (final reward +1; earlier rewards are +-1 "
        "distractors)", False),
}


def rule_for(name: str) -> Optional[SuccessRule]:
  """The rule of gymnax id `name`, or None."""
  return RULES.get(name)


def final_reward_success(rewards: jax.Array, terminated: jax.Array,
                         valid: jax.Array) -> jax.Array:
  """[B] bool: the first episode of each column terminated on a positive reward.

  Args:
    rewards, terminated, valid: [T, B] (`valid` True up to and including the step where
      the column's first episode ended, as `credit_jax.rollout.collect_episodes` gives).
  """
  if not rewards.shape == terminated.shape == valid.shape or rewards.ndim != 2:
    raise ValueError(f"rewards, terminated and valid must all be [T, B], got "
                     f"{rewards.shape}, {terminated.shape}, {valid.shape}")
  last = jnp.sum(valid.astype(jnp.int32), axis=0) - 1                    # [B]
  at_last = jnp.arange(rewards.shape[0])[:, None] == last[None]          # [T, B]
  final = jnp.sum(jnp.where(at_last, rewards, 0.0), axis=0)
  ended = jnp.any(at_last & terminated, axis=0)
  return jnp.logical_and(ended, final > 0)


def _innermost_credit_env(env: Any) -> Any:
  """The first `CreditEnv` met following `inner` from `env` (any number of wrappers:
  `HistoryWrapper(DesiredGoalWrapper(GoalGrid))` gives the GoalGrid), or None."""
  seen = set()
  while env is not None and id(env) not in seen:
    if isinstance(env, CreditEnv):
      return env
    seen.add(id(env))
    env = getattr(env, "inner", None)
  return None


def episode_success(name: str, env: Any, rewards: jax.Array, terminated: jax.Array,
                    valid: jax.Array, info: Any) -> Optional[jax.Array]:
  """[B] bool success of each column's first episode, or None where `name` has none.

  `info["success"]` where the env reports it; else, for a `CreditEnv` (or wrappers around
  one, followed through every `inner`), a positive return; else the id's rule (`RULES`). Arrays as in `final_reward_success`.
  """
  if isinstance(info, dict) and "success" in info:
    return jnp.any(jnp.logical_and(info["success"], valid), axis=0)
  if _innermost_credit_env(env) is not None:
    return jnp.sum(jnp.where(valid, rewards, 0.0), axis=0) > 0
  if rule_for(name) is not None:
    return final_reward_success(rewards, terminated, valid)
  return None
