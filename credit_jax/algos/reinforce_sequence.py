"""REINFORCE with a sequence network (`config.network.kind` "gru" or "transformer").

`reinforce.make_train` hands configs with a sequence network here; the MLP path stays in
`reinforce.py`, untouched. The episodes (`rollout.collect_episodes` with a
`SequencePolicy`) start from the network's initial `PolicyState`; the loss replays each
whole episode from the initial carry with `sequence_networks.unroll` (the steps after
the episode's end start from a reset carry and are masked out). Credit "gae" bootstraps
a truncated step from the value of its final observation read as the next token of its
episode (the memory at that step). Credits, baselines, metrics: as `reinforce.py`.
Network fields: as `credit_jax/algos/ppo_sequence.py`.
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp

import credit_jax as cj
from credit_jax import networks, rollout
from credit_jax import sequence_networks as sn
from credit_jax.algos import common, episodes, losses, ppo_sequence
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


def make_train(config, hparam_names: Sequence[str], with_value: bool,
               leave_one_out_mean: Callable) -> common.Train:
  """`Train` for REINFORCE with a sequence network; `reinforce.make_train` calls it."""
  env, env_params = common.make_env(config)
  network, obs_shape = ppo_sequence.make_network(config, env, env_params)
  policy = sn.make_sequence_policy(network, value=with_value)
  num_envs, horizon = int(config.num_envs), int(config.horizon)
  n_updates = int(config.num_updates)
  optimizer = common.make_optimizer(config)
  with_success = episodes.has_success(config)
  credit, baseline = str(config.credit), str(config.baseline)
  normalize = bool(config.normalize_advantages)

  def init_fn(key, hp):
    k_params, k_run = jax.random.split(key)
    params = sn.init_params(network, k_params, obs_shape)
    return common.TrainState(params=params, opt_state=optimizer.init(params, hp["max_grad_norm"]),
                             key=k_run, update=jnp.zeros((), jnp.int32), aux={})

  def credit_and_baseline(traj, params, hp):
    """([T, B] credit G_t, [T, B] baseline b_t); both constants for the policy loss."""
    valid = traj.valid
    rewards = jnp.where(valid, traj.rewards, 0.0)
    discounts = jnp.full_like(rewards, hp["gamma"])
    values = traj.extras["value"] if with_value else jnp.zeros_like(rewards)
    if credit == "terminal":
      g = jnp.broadcast_to(jnp.sum(rewards, axis=0, keepdims=True), rewards.shape)
    elif credit == "rtg":
      g = cj.discounted_returns(rewards, discounts, terminated=traj.dones)
    else:
      _, _, final_values = replay(network, params, traj, final=True)        # [T, B]
      values_tp1 = jnp.concatenate([values, final_values[-1:]], axis=0)     # [T + 1, B]
      g = cj.lambda_returns(rewards, discounts, values_tp1, hp["gae_lambda"],
                            terminated=traj.terminated, truncated=traj.truncated,
                            final_values=final_values)
    if baseline == "none":
      b = jnp.zeros_like(g)
    elif baseline == "mean":
      b = leave_one_out_mean(g, valid)
    else:
      b = values
    return jax.lax.stop_gradient(g), jax.lax.stop_gradient(b)

  def loss_fn(params, traj, g, adv, hp):
    logits, values, _ = replay(network, params, traj, final=False)
    log_probs = networks.categorical_log_prob(logits, traj.actions)
    pg = episodes.masked_mean(losses.reinforce(log_probs, adv), traj.valid)
    entropy = episodes.masked_mean(networks.categorical_entropy(logits), traj.valid)
    loss = pg - hp["ent_coef"] * entropy
    v_loss = jnp.zeros(())
    if with_value:
      v_loss = episodes.masked_mean(losses.value_loss(values, g), traj.valid)
      loss = loss + hp["vf_coef"] * v_loss
    return loss, {"policy_loss": pg, "value_loss": v_loss, "entropy": entropy}

  def update_fn(state, hp):
    key, k_roll = jax.random.split(state.key)
    traj = rollout.collect_episodes(env, env_params, policy, state.params, k_roll,
                                    num_envs, horizon)
    g, b = credit_and_baseline(traj, state.params, hp)
    adv = g - b
    if normalize:
      mean = episodes.masked_mean(adv, traj.valid)
      std = jnp.sqrt(episodes.masked_mean(jnp.square(adv - mean), traj.valid))
      adv = (adv - mean) / (std + 1e-8)
    (loss, m), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params, traj, g, adv, hp)
    lr = common.learning_rate(hp["lr"], state.update, n_updates, bool(config.anneal_lr))
    params, opt_state, gnorm = optimizer.apply(state.params, state.opt_state, grads, lr,
                                               hp["max_grad_norm"])
    ep_return = jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), axis=0)    # [B]
    metrics = {"loss": loss, "grad_norm": gnorm, "lr": lr, **m,
               "return": ep_return.mean(),
               "episode_length": jnp.sum(traj.valid, axis=0).astype(jnp.float32).mean(),
               "advantage_std": jnp.sqrt(episodes.masked_mean(
                   jnp.square(adv - episodes.masked_mean(adv, traj.valid)), traj.valid))}
    if with_success:
      metrics["success"] = jnp.mean((ep_return > 0).astype(jnp.float32))
    return common.TrainState(params=params, opt_state=opt_state, key=key,
                             update=state.update + 1, aux=state.aux), metrics

  return common.Train(
      config=config, init_fn=init_fn, update_fn=update_fn,
      default_hparams={k: config[k] for k in hparam_names}, num_updates=n_updates,
      env_steps_per_update=num_envs * horizon,
      headline=("success", "return") if with_success else ("return",))
