"""Core pytrees shared across the library.

Everything is **time-major**: a rollout of `T` steps over a batch `B` stores arrays
of shape `[T, B, ...]`. Estimators accept `[T, ...]` with any trailing batch dims.
Layout conversion (time-major <-> batch-major) happens only in `to_batch_major`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Tuple

import jax
from jax import Array
import jax.numpy as jnp

PRNGKey = jax.Array
Params = Any

# A policy maps `(params, obs, key) -> (action, log_prob, extras)`.
#   obs:      a single observation pytree (the rollout engine vmaps over envs), or a
#             batch if the caller vmaps itself.
#   action:   [] int32 (discrete) for a single observation.
#   log_prob: [] float32, log pi(action | obs).
#   extras:   any pytree (e.g. {"value": []}), stored per step in `Trajectory.extras`.
PolicyFn = Callable[[Params, Any, PRNGKey], Tuple[Array, Array, Any]]


@dataclasses.dataclass(frozen=True)
class PresampledPolicy:
  """A `PolicyFn` whose randomness can be drawn before the rollout loop.

  `draw(key) -> noise` makes one step's noise for one observation from that step's key;
  `act(params, obs, noise) -> (action, log_prob, extras)` is the policy given it. Calling
  the object, `policy(params, obs, key)`, is `act(params, obs, draw(key))`, so it is an
  ordinary `PolicyFn` everywhere. The rollout engine draws the noise of every step and
  env from the same keys in one call before its loop and calls `act` inside it: the same
  actions, but no random-bit generator runs per step (on CPU, jax's threefry is a small
  loop of its own each time it is called).
  """
  draw: Callable[[PRNGKey], Any]
  act: Callable[[Params, Any, Any], Tuple[Array, Array, Any]]

  def __call__(self, params: Params, obs: Any, key: PRNGKey) -> Tuple[Array, Array, Any]:
    return self.act(params, obs, self.draw(key))


class PolicyState(NamedTuple):
  """What a sequence policy carries from one step to the next, for a batch `B` of envs.

  The rollout engine resets it to the policy's initial state where an episode starts
  (after a terminated or truncated step, auto-reset included): the initial carry, no
  previous action (-1, whose one-hot is all zeros) and a previous reward of 0.
  """
  carry: Any           # pytree of [B, ...]: the network's memory (GRU state, KV cache)
  prev_action: Array   # [B] int32   action taken at the previous step (-1: none)
  prev_reward: Array   # [B] float32 reward of the previous step (0 at an episode start)


@dataclasses.dataclass(frozen=True)
class SequencePolicy:
  """A policy with memory: the sequence counterpart of `PresampledPolicy`.

  `initial_carry() -> carry` is the carry of one environment at an episode start (a
  pytree of arrays, needing no params). `act(params, carry, obs, prev_action,
  prev_reward, noise) -> (carry, action, log_prob, extras)` acts on ONE observation
  (`prev_action: []` int32, -1 at an episode start; `prev_reward: []` float32) with the
  noise `draw(key)` makes for one step. Calling the object,
  `policy(params, carry, obs, prev_action, prev_reward, key)`, is `act(..., draw(key))`.

  A stateless policy is the special case that ignores and returns its carry; the engine
  keeps its cheaper `PolicyFn` path for those, so an MLP needs no carry at all.

  In tree search, a node would hold, beside its environment state, the `PolicyState`
  before acting at its observation: expanding it runs `act` once (its logits are the
  prior, its new carry is shared by all children), child `a` gets `PolicyState(carry',
  a, reward)` (the initial state if the step ended the episode), and a rollout from a
  leaf continues from the leaf's state.
  """
  initial_carry: Callable[[], Any]
  draw: Callable[[PRNGKey], Any]
  act: Callable[[Params, Any, Any, Array, Array, Any], Tuple[Any, Array, Array, Any]]

  def __call__(self, params: Params, carry: Any, obs: Any, prev_action: Array,
               prev_reward: Array, key: PRNGKey) -> Tuple[Any, Array, Array, Any]:
    return self.act(params, carry, obs, prev_action, prev_reward, self.draw(key))


class Trajectory(NamedTuple):
  """A time-major batch of transitions, `T` steps by batch dims `B...`.

  Step `t` records: the observation the agent acted on, the action taken, and what the
  environment returned for it. With auto-reset, `obs[t + 1]` is the first observation of
  a new episode whenever `terminated[t] | truncated[t]`; the observation that ended the
  old episode is kept in `final_obs[t]` so a truncated step can bootstrap from it.
  """
  obs: Any                 # [T, B..., *obs_shape]  observation acted on at step t
  actions: Array           # [T, B...]              action at step t
  rewards: Array           # [T, B...] float32      reward for step t
  terminated: Array        # [T, B...] bool         episode ended in a terminal state at t
  truncated: Array         # [T, B...] bool         episode cut by the time limit at t
  log_probs: Array         # [T, B...] float32      log pi(a_t | o_t) under the behaviour policy
  final_obs: Any           # [T, B..., *obs_shape]  observation after step t, before any reset
  valid: Array             # [T, B...] bool         step belongs to an episode (False after its end)
  extras: Any              # pytree of [T, B..., ...] from the policy (e.g. values)
  info: Any                # dict of [T, B..., ...] env infos (e.g. "pivotal" for KeyChain)

  @property
  def dones(self) -> Array:
    """[T, B...] bool: the episode ended at step t (either kind of boundary)."""
    return jnp.logical_or(self.terminated, self.truncated)


def to_batch_major(tree: Any) -> Any:
  """Swaps the leading two axes of every leaf: `[T, B, ...] -> [B, T, ...]`."""
  return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), tree)
