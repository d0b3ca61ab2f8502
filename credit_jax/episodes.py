"""Episode statistics the recipes report: masked means, success, and the returns and
success of episodes that end inside fixed-length, auto-resetting rollouts."""
from __future__ import annotations

from typing import Tuple

import jax
from jax import Array
import jax.numpy as jnp

from credit_jax import envs


def masked_mean(x: Array, mask: Array) -> Array:
  """Mean of `x` over entries where `mask` is True (0 when none is); same shapes."""
  mask = mask.astype(x.dtype)
  return jnp.sum(x * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def has_success(config, env=None) -> bool:
  """Whether `config.env_name` has a notion of success the recipes report as `success`.

  credit_jax's own environments (`envs.CreditEnv`: KeyChain and the goal environments)
  pay a reward of 1 for solving the task and 0 otherwise, so an episode succeeded iff its
  return is positive; those whose return is no guide (KeyToDoor's apples, bsuite's
  chains, `credit_jax/envs/bsuite.py`) report `info["success"]` instead (see
  `success_signal`). gymnax's environments (CartPole, ...) have none, except the ids of
  `credit_jax/envs/success.py` whose rule the recipes' test agrees with (Catch,
  MemoryChain: the final reward is the only one). `env`: what `envs.make` gave for
  `config` (None: made here).
  """
  if env is None:
    try:
      env, _ = envs.make(config.env_name, **dict(config.get("env_kwargs", {}) or {}))
    except ValueError:
      return False
  rule = envs.success.rule_for(config.env_name)
  return isinstance(env, envs.CreditEnv) or (rule is not None and rule.recipes_agree)


def success_signal(traj) -> Array:
  """[T, ...] float32, positive at the steps that show their episode succeeded.

  The environment's `info["success"]` where it reports one (KeyToDoor, bsuite's chains:
  there a positive reward is no guide), else the reward itself (`traj.rewards`).
  """
  succ = traj.info.get("success") if isinstance(traj.info, dict) else None
  return traj.rewards if succ is None else succ.astype(jnp.float32)


def _ended_totals(x: Array, dones: Array, running: Array) -> Tuple[Array, Array]:
  """Per-episode sums of `x` [T, B] over episodes that end inside the rollout.

  Returns `(ended [T, B], running [B])`: at a step where an episode ends, its total
  (including the carried `running` part), else 0; and the carried partial totals.
  """
  # Vectorised rather than scanned: a sequential scan over T costs more on CPU than the
  # whole bookkeeping. c[t] is the running total including the carried partial sum;
  # an episode ending at t summed c[t] minus c at the previous end (or 0).
  num_steps = x.shape[0]
  totals = running[None] + jnp.cumsum(x, axis=0)                       # [T, B]
  steps = jnp.arange(num_steps)[:, None]
  last_end = jax.lax.cummax(jnp.where(dones, steps, -1), axis=0)       # [T, B]
  prev_end = jnp.concatenate([jnp.full_like(last_end[:1], -1), last_end[:-1]], axis=0)
  offset = jnp.where(prev_end >= 0,
                     jnp.take_along_axis(totals, jnp.maximum(prev_end, 0), axis=0), 0.0)
  ended = jnp.where(dones, totals - offset, 0.0)
  final_end = last_end[-1]                                              # [B]
  running = totals[-1] - jnp.where(
      final_end >= 0, jnp.take_along_axis(totals, jnp.maximum(final_end, 0)[None],
                                          axis=0)[0], 0.0)
  return ended, running


def _check_continuing(rewards: Array, dones: Array, running: Array) -> None:
  if rewards.shape != dones.shape or rewards.shape[1:] != running.shape:
    raise ValueError(
        f"rewards [T, B], dones [T, B] and running [B] disagree: {rewards.shape}, "
        f"{dones.shape}, {running.shape}")


def continuing_episode_stats(rewards: Array, dones: Array, running: Array,
                             previous_mean: Array) -> Tuple[Array, Array, Array]:
  """Returns of episodes that end inside a fixed-length, auto-resetting rollout.

  Args:
    rewards: [T, B] rewards.
    dones: [T, B] bool, an episode ended at step t.
    running: [B] return accumulated so far by each env's current episode.
    previous_mean: [] the value to report when no episode ended in this rollout.

  Returns:
    `(running [B], mean_return [], num_episodes [])`: the carried partial returns, the
    mean return of the episodes that ended (or `previous_mean`), and how many ended.
  """
  _check_continuing(rewards, dones, running)
  ended, running = _ended_totals(rewards, dones, running)
  count = jnp.sum(dones)
  mean = jnp.where(count > 0, jnp.sum(ended) / jnp.maximum(count, 1), previous_mean)
  return running, mean, count.astype(jnp.float32)


def continuing_episode_success(rewards: Array, dones: Array, running_hits: Array,
                               previous: Array) -> Tuple[Array, Array]:
  """Success rate of episodes that end inside a fixed-length, auto-resetting rollout.

  An episode succeeded iff one of its rewards is positive (see `has_success`).

  Args:
    rewards: [T, B] rewards; dones: [T, B] bool, an episode ended at step t.
    running_hits: [B] positive rewards so far in each env's current episode.
    previous: [] the value to report when no episode ended in this rollout.

  Returns:
    `(running_hits [B], success [])`.
  """
  _check_continuing(rewards, dones, running_hits)
  ended, running_hits = _ended_totals((rewards > 0).astype(jnp.float32), dones,
                                      running_hits)
  count = jnp.sum(dones)
  hits = jnp.sum(jnp.logical_and(dones, ended > 0))
  success = jnp.where(count > 0, hits / jnp.maximum(count, 1), previous)
  return running_hits, success.astype(jnp.float32)


def continuing_init(num_envs: int, with_success: bool) -> dict:
  """The carry `continuing_update` reads, before any step: `running_return [B]`,
  `last_return []` and, when `with_success`, `running_hits [B]`, `last_success []`."""
  carry = {"running_return": jnp.zeros((num_envs,), jnp.float32),
           "last_return": jnp.zeros((), jnp.float32)}
  if with_success:
    carry.update(running_hits=jnp.zeros((num_envs,), jnp.float32),
                 last_success=jnp.zeros((), jnp.float32))
  return carry


def continuing_update(rewards: Array, dones: Array, aux: dict, with_success: bool,
                      signal: Array | None = None) -> Tuple[dict, dict]:
  """PPO's per-update episode bookkeeping over a continuing rollout, in one place.

  Args:
    rewards: [T, B] rewards; dones: [T, B] bool (an episode ended at step t).
    signal: [T, B] the success signal (`success_signal`); None: `rewards`.
    aux: the recipe's carry with `running_return [B]`, `last_return []` and, when
      `with_success`, `running_hits [B]`, `last_success []`.

  Returns:
    `(metrics, carry)`: metrics `return`, `episodes` (and `success`), all `[]`; the carry's
    new entries for the keys above.
  """
  running, mean_return, num_episodes = continuing_episode_stats(
      rewards, dones, aux["running_return"], aux["last_return"])
  metrics = {"return": mean_return, "episodes": num_episodes}
  carry = {"running_return": running, "last_return": mean_return}
  if with_success:
    hits, success = continuing_episode_success(
        rewards if signal is None else signal, dones, aux["running_hits"],
        aux["last_success"])
    metrics["success"] = success
    carry.update(running_hits=hits, last_success=success)
  return metrics, carry
