"""Exact expected return and policy gradient of a memoryless policy, by dynamic programming.

Any estimator's bias and variance can be measured only against the true gradient. For the
two credit probes whose MDPs are small it is computed here exactly, for any policy that acts
on the current observation alone (a table, a linear layer, an MLP: `apply(params, obs
[N, D]) -> logits [N, A]`, the time feature included):

  * **KeyChain-v0** with `cue_delay = 0` and no `cues_at_start` (the credit probe of
    docs/results/probes.md among them). The reward's expectation is the success probability
    (reward noise has mean 0 whatever the actions). Distractor actions change nothing, the k
    pivotal positions are independent draws (one per segment) and the cues independent of
    them, so pivotal step i is answered right with probability
        q_i = sum_p P(pos_i = p) sum_c P(cue = c) pi(rules[i, c] | o(i, p, c))
    where o(i, p, c) is the observation at a pivotal step i placed at p with cue c (built
    with the environment's own `get_obs`, so every switch's layout is honoured), and
    J = prod_i q_i. Position and cue probabilities are the reset's exact ones
    (`KeyChain.draw_probabilities`).
  * **ConveyorTreasure-v0** (COCOA's corridor: one fixed layout). The state that matters
    at step t is (has_key, door_open); its distribution is pushed forward through the L
    steps with the policy's probabilities at the environment's own observations, and each
    step's expected reward is accumulated (an apple's value by its mean,
    (apple_low + apple_high) / 2 x reward_scale: it is drawn independently of everything).

`objective(env, env_params, apply_fn, params)` returns J ([] float32) and
`gradient(...)` its gradient (`jax.grad`, a pytree like `params`); on the corridor
`corridor_tables(...)` gives the (t, flags) tables the DP runs on (the cocoa_corridor
study's exact action values and COCOA-reward coefficients are a backward pass over them).
They jit, and a vmap over policies works. tests/test_exact.py checks them against
brute-force enumeration of every reset and action sequence on tiny cases.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from credit_jax.envs.conveyor_treasure import ConveyorTreasure
from credit_jax.envs.keychain import KeyChain

__all__ = ["corridor_tables", "gradient", "objective", "supported"]

_ApplyFn = Callable[[Any, jax.Array], jax.Array]   # (params, obs [N, D]) -> logits [N, A]


def supported(env) -> bool:
  """Whether `objective` is exact for `env`."""
  if isinstance(env, KeyChain):
    return env.cue_delay == 0 and not env.cues_at_start
  return isinstance(env, ConveyorTreasure)


def _probs(apply_fn: _ApplyFn, params, obs: jax.Array) -> jax.Array:
  logits = apply_fn(params, obs)
  if logits.shape[:-1] != obs.shape[:-1]:
    raise ValueError(f"apply_fn must map obs [N, D] to logits [N, A], got obs "
                     f"{obs.shape} -> {logits.shape}")
  return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)


def _keychain_cases(env: KeyChain, env_params):
  """Observations o(i, p, c) at every pivotal index, position with nonzero probability,
  and cue, with their answers and weights P(pos_i = p) P(cue = c) (host-side, once)."""
  position_probs, cue_probs = env.draw_probabilities()
  rules = env.rules
  with jax.ensure_compile_time_eval():   # concrete even when traced inside a jit
    _, start = env.reset(jax.random.key(0), env_params)
  base = np.asarray(env._seg_start)      # valid positions for the other pivotal steps
  index, pos, cue, weight = [], [], [], []
  for i in range(env.num_pivotal):
    for p in np.flatnonzero(position_probs[i] > 0):
      for c in np.flatnonzero(cue_probs > 0):
        index.append(i), pos.append(p), cue.append(c)
        weight.append(position_probs[i, p] * cue_probs[c])
  index, pos, cue = (np.asarray(x, np.int32) for x in (index, pos, cue))

  def obs_of(i, p, c):
    state = start.replace(positions=jnp.asarray(base).at[i].set(p),
                          cues=start.cues.at[i].set(c), time=p)
    return env.get_obs(state, env_params)
  obs = jax.jit(jax.vmap(obs_of))(index, pos, cue)
  return (obs, jnp.asarray(rules[index, cue]), jnp.asarray(index),
          jnp.asarray(np.asarray(weight), jnp.float32))


def _keychain_objective(env: KeyChain, env_params, apply_fn: _ApplyFn, params):
  obs, answers, index, weight = _keychain_cases(env, env_params)
  probs = _probs(apply_fn, params, obs)                               # [N, A]
  right = jnp.take_along_axis(probs, answers[:, None], axis=1)[:, 0]
  q = jax.ops.segment_sum(weight * right, index, num_segments=env.num_pivotal)
  return jnp.prod(q)


def corridor_tables(env: ConveyorTreasure, env_params, apply_fn: _ApplyFn, params):
  """The corridor as a table over (t, flags), flags = has_key + 2 door_open: policy
  probabilities [L, 4, A], next flags [L, 4, A] int32, expected reward [L, 4, A] and the
  probability of each reward class (apple_low, apple_high, treasure) [L, 4, A, 3]."""
  length = env.length
  with jax.ensure_compile_time_eval():
    _, start = env.reset(jax.random.key(0), env_params)
  times = jnp.arange(length, dtype=jnp.int32)
  flags = jnp.asarray([[False, False], [True, False], [False, True], [True, True]])

  def state_of(t, f):   # f = (has_key, door_open)
    return start.replace(time=t, has_key=f[0], door_open=f[1])

  states = jax.vmap(lambda t: jax.vmap(lambda f: state_of(t, f))(flags))(times)
  obs = jax.vmap(jax.vmap(lambda s: env.get_obs(s, env_params)))(states)   # [L, 4, D]
  probs = _probs(apply_fn, params, obs.reshape(length * 4, -1)).reshape(length, 4, -1)
  value = 0.5 * (env_params.apple_low + env_params.apple_high) * env_params.reward_scale
  actions = jnp.arange(env.num_actions, dtype=jnp.int32)

  def outcome(s, a):    # (next flag index [], reward [], class probabilities [3])
    nxt, reward, info = env.corridor_step(s, a, env.content_at(s, s.time), value,
                                          env_params)
    apple = info["apple"].astype(jnp.float32)
    classes = jnp.stack([0.5 * apple, 0.5 * apple, info["success"].astype(jnp.float32)])
    return (nxt.has_key.astype(jnp.int32) + 2 * nxt.door_open.astype(jnp.int32), reward,
            classes)
  nxt, reward, classes = jax.vmap(jax.vmap(lambda s: jax.vmap(lambda a: outcome(s, a))(
      actions)))(states)
  return probs, nxt, reward, classes


def _corridor_objective(env: ConveyorTreasure, env_params, apply_fn: _ApplyFn, params):
  probs, nxt, reward, _ = corridor_tables(env, env_params, apply_fn, params)

  def body(dist, xs):   # dist: [4] probability of each (has_key, door_open)
    p, n, r = xs
    gain = jnp.sum(dist[:, None] * p * r)
    flow = jax.ops.segment_sum((dist[:, None] * p).reshape(-1), n.reshape(-1),
                               num_segments=4)
    return flow, gain
  first = jnp.zeros(4, jnp.float32).at[0].set(1.0)
  _, gains = jax.lax.scan(body, first, (probs, nxt, reward))
  return jnp.sum(gains)


def objective(env, env_params, apply_fn: _ApplyFn, params) -> jax.Array:
  """[] float32: the exact expected return of the memoryless policy `apply_fn(params, .)`
  on `env` (KeyChain-v0 with cue_delay 0 and no cues_at_start: the success probability;
  ConveyorTreasure-v0: apples plus treasure). Raises ValueError for another env."""
  if isinstance(env, KeyChain) and supported(env):
    return _keychain_objective(env, env_params, apply_fn, params)
  if isinstance(env, ConveyorTreasure):
    return _corridor_objective(env, env_params, apply_fn, params)
  raise ValueError(f"the exact objective covers KeyChain-v0 (cue_delay = 0, no "
                   f"cues_at_start) and ConveyorTreasure-v0, got {type(env).__name__}")


def gradient(env, env_params, apply_fn: _ApplyFn, params) -> Any:
  """The exact gradient of `objective` with respect to `params` (a pytree like it)."""
  return jax.grad(lambda p: objective(env, env_params, apply_fn, p))(params)
