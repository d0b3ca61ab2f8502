"""The environment state and the policy's carry at every step of a rollout, for features
that restart from intermediate states (VinePPO's vines) or compare them (GiGPO's anchors).

`StepStateWrapper` puts the state each step started from in `info["step_state"]`, so any
recipe's rollout keeps it (the rollout engine stacks `info` per step) and a hook reads it
from `EstimatorInput.traj`. It implements gymnax's `step_env`/`reset_env`, so auto-reset,
the `terminated`/`truncated` split and `final_observation` are the base class's. States
restored from it run in `wrapper.inner`, the environment the policy acted in.

`_policy_states` rebuilds a sequence policy's `PolicyState` before every step of a window
that starts an episode (a GRPO group, or a PPO window aligned with episodes) from the
carries the rollout stored (`extras["carry"]`, the carry after each step).
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from credit_jax import rollout
from credit_jax.envs import wrappers
from credit_jax.types import PolicyState, SequencePolicy, Trajectory

__all__ = ["StepStateWrapper", "INFO_KEY", "step_states"]

INFO_KEY = "step_state"


class StepStateWrapper(wrappers.Wrapper):
  """`env` whose `info["step_state"]` is the (inner) state the step started from; its
  state is the inner env's, so every other attribute is the inner env's too."""

  def step_env(self, key, state, action, params):
    obs, new_state, reward, terminated, info = self._env.step_env(key, state, action,
                                                                  params)
    return obs, new_state, reward, terminated, {**info, INFO_KEY: state}

  @property
  def name(self) -> str:
    return f"StepStates({self._env.name})"


def _policy_states(policy: Any, traj: Trajectory) -> Any:
  """The `PolicyState` [T, B...] before each step of a window that starts an episode.

  Args:
    policy: the rollout's policy; None is returned for a stateless one.
    traj: Trajectory [T, B...] whose `extras["carry"]` holds the carry after each step
      (`nets.sequence.make_sequence_policy(..., carry=True)`).
  The carry before step t is the initial one at t = 0 and after a boundary, else the
  carry after step t - 1; previous action and reward come from `rollout.sequence_inputs`.
  """
  if not isinstance(policy, SequencePolicy):
    return None
  extras = traj.extras if isinstance(traj.extras, dict) else {}
  if "carry" not in extras:
    raise ValueError("a sequence policy's vines need the carry after each step in "
                     "traj.extras['carry'] (make_sequence_policy(..., carry=True))")
  batch = traj.rewards.shape[1:]
  initial = jax.tree.map(lambda x: jnp.broadcast_to(x, batch + jnp.shape(x)),
                         policy.initial_carry())
  start = PolicyState(carry=initial, prev_action=jnp.full(batch, -1, jnp.int32),
                      prev_reward=jnp.zeros(batch, jnp.float32))
  prev_actions, prev_rewards, starts = rollout.sequence_inputs(traj, start)
  starts = starts.at[0].set(True)
  carry = jax.tree.map(
      lambda after, init: jnp.where(
          starts.reshape(starts.shape + (1,) * (after.ndim - starts.ndim)),
          init[None], jnp.concatenate([init[None], after[:-1]], axis=0)),
      extras["carry"], initial)
  return PolicyState(carry=carry, prev_action=prev_actions, prev_reward=prev_rewards)


def step_states(policy: Any, traj: Trajectory) -> rollout.StepStates:
  """`rollout.StepStates` of a rollout of a `StepStateWrapper` env (module doc)."""
  if not isinstance(traj.info, dict) or INFO_KEY not in traj.info:
    raise ValueError(f"the rollout's info has no {INFO_KEY!r}: wrap the env in "
                     f"StepStateWrapper")
  return rollout.StepStates(env_state=traj.info[INFO_KEY],
                            policy_state=_policy_states(policy, traj))
