"""The environment as the search's model: one transition, masked policy logits, rollouts.

Shared by our search (`credit_jax/search/search.py`) and the mctx adapter
(`credit_jax/search/mctx_adapter.py`). Everything here works on ONE root (vmap it).

Environment stepping: we call `env.step_env` plus `env.is_truncated`, exactly what
gymnax's `env.step` does minus the auto-reset, so a node keeps the terminal state and its
pre-reset observation. The step at depth `d` uses the key `fold_in(env_key, d)`: tree
expansions, rollouts and the final replay agree, so for a stochastic environment the
search sees (and the returned trajectory replays) one fixed sample of every transition.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
from jax import Array
import jax.numpy as jnp

from credit_jax.search.tree import MASKED_LOGIT

# (params, obs) -> logits [A] for a single observation.
LogitsFn = Callable[[Any, Any], Array]
# (params, obs) -> [] value estimate for a single observation.
ValueFn = Callable[[Any, Any], Array]
# env_state -> [A] bool, True where the action is allowed (single state).
ActionMaskFn = Callable[[Any], Array]


class EnvModel(NamedTuple):
  """Single-root environment and policy helpers (`make_env_model`).

  step(env_params, key, state, action) -> (obs, state, reward, terminated, truncated, info)
  masked_logits(params, obs, state) -> [A] float32 (masked actions at MASKED_LOGIT)
  rollout(params, env_params, env_key, key, state, obs, depth, stopped, terminated,
          discount) -> (value, total_reward, steps, ended_by_env)
  """
  step: Callable
  masked_logits: Callable
  rollout: Callable
  num_actions: int
  greedy: bool         # rollouts take the argmax action (else they sample)
  max_depth: int       # episodes are cut at this many steps from the root
  rollout_depth: int   # rollout steps from a new node


def choose(masked_logits: Array, key: Array, greedy: bool) -> Array:
  """The rollout action for logits [A]: argmax if `greedy`, else a sample with `key`."""
  if greedy:
    return jnp.argmax(masked_logits).astype(jnp.int32)
  return jax.random.categorical(key, masked_logits).astype(jnp.int32)


def make_env_model(env, logits_fn: LogitsFn, value_fn: Optional[ValueFn],
                   action_mask_fn: Optional[ActionMaskFn], *, max_depth: int, rollout: str,
                   rollout_depth: int) -> EnvModel:
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
    return jnp.where(action_mask_fn(state), logits, MASKED_LOGIT)

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
      action = choose(masked_logits(params, obs, state), jax.random.fold_in(key, i), greedy)
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

  return EnvModel(step, masked_logits, rollout_fn, num_actions, greedy, int(max_depth),
                  int(rollout_depth))


def check_roots(root_states, root_obs) -> int:
  """The batch size B shared by every leaf of `root_states` and `root_obs` ([B, ...])."""
  leaves = jax.tree.leaves(root_states) + jax.tree.leaves(root_obs)
  if not leaves:
    raise ValueError("root_states and root_obs must hold arrays")
  sizes = {jnp.shape(x)[0] if jnp.ndim(x) else None for x in leaves}
  if len(sizes) != 1 or None in sizes:
    raise ValueError("every leaf of root_states [B, ...] and root_obs [B, ...] needs the same "
                     f"leading batch dim B; got leading dims {sorted(map(str, sizes))}")
  return sizes.pop()
