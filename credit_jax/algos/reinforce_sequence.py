"""REINFORCE with a sequence network (`config.network.kind` "gru" or "transformer").

`reinforce.make_train` takes its network pieces (`model`) from here for a sequence
network; the training program is `reinforce.py`'s for both. The episodes (`rollout.collect_episodes` with a
`SequencePolicy`) start from the network's initial `PolicyState`; the loss replays each
whole episode from the initial carry with `sequence_networks.unroll` (the steps after
the episode's end start from a reset carry and are masked out). Credit "gae" bootstraps
a truncated step from the value of its final observation read as the next token of its
episode (the memory at that step). Credits, baselines, metrics: as `reinforce.py`.
Network fields: as `credit_jax/algos/ppo_sequence.py`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from credit_jax import rollout
from credit_jax.nets import sequence as sn
from credit_jax.algos import ppo_sequence
from credit_jax.types import PolicyState


def replay(network, params, traj, final: bool):
  """`(logits [T, B, A], values [T, B], final_values [T, B] or None)` of episodes `[T, B]`
  from `collect_episodes`, each replayed from the initial carry."""
  batch = traj.rewards.shape[1]
  start = PolicyState(carry=None, prev_action=jnp.full((batch,), -1, jnp.int32),
                      prev_reward=jnp.zeros((batch,), jnp.float32))
  prev_a, prev_r, starts = rollout.sequence_inputs(traj, start)
  carry = network.initial_carry()

  def one(o, pa, pr, s, fo, a, r):
    return sn.unroll(network, params, carry, o, pa, pr, s, (fo, a, r) if final else None)

  return jax.vmap(one, in_axes=1, out_axes=1)(
      traj.obs, prev_a, prev_r, starts, traj.final_obs, traj.actions, traj.rewards)


def model(config, env, env_params, with_value: bool):
  """REINFORCE's `reinforce.Model` for a sequence network: the policy carries its memory
  through the rollout, and the loss replays each episode from the initial carry."""
  from credit_jax.algos import reinforce
  network, obs_shape = ppo_sequence.make_network(config, env, env_params)
  return reinforce.Model(
      init=lambda k: sn.init_params(network, k, obs_shape),
      policy=sn.make_sequence_policy(network, value=with_value),
      outputs=lambda params, traj: replay(network, params, traj, final=False)[:2],
      final_values=lambda params, traj: replay(network, params, traj, final=True)[2])
