"""KeyChain's exact hindsight distributions, from its known dynamics: the reference the
learned HCA and COCOA models are measured against.

For an actor that acts on the current observation alone (an MLP, `cue_delay = 0`; the
setting of `credit_jax/addons/gae_probe.py`'s exact gradient), success is the event that
every pivotal step was answered right, and the steps are independent given the policy:
pivotal step i (in segment i of the stratified draw) is right with probability `q_i`
(the policy's chance over that segment's positions and cues, `gae_probe`'s tables). At an
observation `o` of step t:

  * a distractor step: its action changes nothing and, under a memoryless policy, is
    independent of everything else, so `h(a | o, u) = pi(a | o)` for every outcome u
    (contribution 0);
  * a pivotal step of segment i with cue c: success needs `a = c`, so

        h(a | o, success) = [a = c],
        h(a | o, failure) = pi(a | o) (1 - [a = c] Q_i) / (1 - pi(c | o) Q_i),

    with `Q_i = prod_{j != i} q_j` the chance that every other pivotal step is right.

COCOA's outcome on KeyChain is the one reward class (1.0 at the last step, i.e. success),
so its hindsight distribution is `h(. | o, success)` at every step; HCA's return-to-go
`Z_t` is `gamma^(T-1-t)` on success and 0 on failure, so its hindsight distribution is
`h(. | o, success)` where `Z_t > 0` and `h(. | o, failure)` elsewhere.
`tests/test_learned_credit.py` checks both against a NumPy enumeration of every episode.
"""
from __future__ import annotations

from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np

from credit_jax.addons import gae_probe

Array = jax.Array

__all__ = ["keychain_hindsight", "segment_right_probabilities"]


def segment_right_probabilities(env, logits_fn, actor_params) -> Array:
  """[k] `q_i`: the chance that the actor answers pivotal step i right (over its draws)."""
  keychain = gae_probe.keychain_of(env)
  # gae_probe's tables: every candidate pivotal observation and the draws' weights.
  obs, position_w, cue_w = gae_probe._pivotal_tables(keychain)
  probs = jax.nn.softmax(logits_fn(actor_params, obs), axis=-1)       # [P, A cue, A act]
  right = jnp.diagonal(probs, axis1=-2, axis2=-1)                      # [P, A]
  return position_w @ (right @ cue_w)


def keychain_hindsight(env, logits_fn, actor_params, obs: Array) -> Tuple[Array, Array]:
  """The exact `(h(. | o, success), h(. | o, failure))` at KeyChain observations.

  Args:
    env: KeyChain-v0 (or a wrapper of it) with `cue_delay = 0`.
    logits_fn: `(actor_params, obs [..., A + 2]) -> logits [..., A]`, a memoryless actor.
    actor_params: its parameters.
    obs: [..., A + 2] KeyChain observations (any leading dims).
  Returns:
    Two [..., A] float arrays (module doc).
  """
  keychain = gae_probe.keychain_of(env)
  gae_probe.check_exact(keychain)
  num_actions, horizon = keychain.num_actions, keychain.horizon
  if np.shape(obs)[-1:] != (num_actions + 2,):
    raise ValueError(f"obs must be [..., A + 2] = [..., {num_actions + 2}], got "
                     f"{np.shape(obs)}")
  pi = jax.nn.softmax(logits_fn(actor_params, obs), axis=-1)
  pivotal = obs[..., num_actions] > 0.5
  cue = jnp.argmax(obs[..., :num_actions], axis=-1)
  cue_hot = jax.nn.one_hot(cue, num_actions, dtype=pi.dtype)
  step = jnp.clip(jnp.round(obs[..., num_actions + 1] * horizon).astype(jnp.int32), 0,
                  horizon - 1)
  position_probs, _ = keychain.draw_probabilities()
  segment = jnp.asarray(np.argmax(position_probs > 0, axis=0), jnp.int32)[step]
  q = segment_right_probabilities(keychain, logits_fn, actor_params)  # [k]
  k = q.shape[0]
  others = jnp.prod(jnp.where(jnp.eye(k, dtype=bool), 1.0, q[None, :]), axis=1)
  big_q = others[segment][..., None]                                   # [..., 1]
  pi_c = jnp.sum(pi * cue_hot, axis=-1, keepdims=True)
  fail = pi * (1.0 - cue_hot * big_q) / jnp.maximum(1.0 - pi_c * big_q,
                                                    jnp.finfo(pi.dtype).tiny)
  piv = pivotal[..., None]
  return jnp.where(piv, cue_hot, pi), jnp.where(piv, fail, pi)
