"""Hindsight relabeling: a failed attempt at goal A that achieved B is a success at B.

Everything here is a pure, jittable transformation of time-major trajectories from a
goal environment (BitFlip-v0, GoalGrid-v0, TextEdit-v0; see `credit_jax/envs/goal.py`),
so the on-policy recipes and the off-policy learner share it:

  env = envs.DesiredGoalWrapper(env)                 # adds info["desired_goal"]
  traj = rollout.collect_episodes(env, ...)          # [T, B]
  out = relabel.relabel(env, traj, key, strategy="future", num_goals=4,
                          relabel_weight=relabel.relabel_schedule(success, 1.0, 0.5))
  out.traj                                           # [T, B, 1 + num_goals]; copy 0 = original

Strategies (where the new goals come from; `num_goals` = k draws each):
  "final":   the goal achieved at the episode's last step (all k draws coincide, so use
             k = 1); one goal per episode.
  "episode": goals achieved at any step of the episode; one goal per episode and draw.
  "future":  per step t, goals achieved at steps s >= t of t's episode (HER's `future`);
             the goal changes from step to step, so the copies are transitions, not
             episodes (for replay), while "final"/"episode" copies are whole episodes
             (for on-policy re-evaluation).

Verification, never assumption: a goal is a candidate only if it was achieved at a
step where the environment checks its goal (`info["goal_checked"]`: every step for
BitFlip/GoalGrid, submit steps for TextEdit), that step is valid, and the goal differs
from what the episode had achieved before its first action (a goal that was already
achieved is no achievement: relabeling to it would reward, e.g., submitting TextEdit's
untouched buffer; the goal envs never pose such goals). Relabeled rewards
are recomputed with the environment's verifier, `goal_checked * env.goal_reward(
info["achieved_goal"], new_goal)`; an episode with no checked step (a TextEdit episode
cut by the time limit) yields no relabeled example. The original example is always kept
(copy 0, weight 1 on its valid steps); relabeled copies carry `relabel_weight`.

Episode ends under a new goal follow from the goal environments' one rule, "success
ends the episode": a step terminates under the new goal if it succeeds under it, or if
it terminated under the original goal without succeeding there (TextEdit's failed
submit ends the episode whatever the goal). A relabeled whole episode ("final",
"episode") therefore ends at the first step that reaches its new goal; later steps are
invalid in it. Boundaries inside a column (auto-reset rollouts) are respected: goals
never come from another episode.

`relabel_schedule` is the warm start: relabel at full weight while the real success rate
is low, ramp the weight down as it rises and switch it off above a threshold, where
relabeled data only dilutes real successes. `goal_importance_weights` gives the
clipped ratio of a trajectory's probability under the new and the original goal, the
correction that makes on-policy use of relabeled episodes unbiased (up to the clip).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
from jax import Array
import jax.numpy as jnp

from credit_jax.types import Trajectory

STRATEGIES = ("final", "episode", "future")
_NEEDED_INFO = ("achieved_goal", "goal_checked", "desired_goal", "prev_achieved_goal")


class Relabeled(NamedTuple):
  """Original and relabeled examples side by side on a trailing copy axis `M = 1 + k`.

  Copy 0 is the original trajectory, copies 1..k the relabeled ones. Shapes use the
  input trajectory's `[T, B...]`.
  """
  traj: Trajectory     # [T, B..., M, ...]: goal part of obs/final_obs replaced, rewards,
                       #   terminated, truncated, valid recomputed; log_probs and extras
                       #   are still the behaviour's (under the ORIGINAL goal)
  weights: Array       # [T, B..., M] float32: 1 on valid original steps, relabel_weight
                       #   on valid relabeled steps, 0 elsewhere
  relabeled: Array     # [T, B..., M] bool: a relabeled example exists at this step
  goals: Array         # [T, B..., M, *goal_shape] int32: the goal of each example
  original_goal: Array  # [T, B..., *goal_shape] int32: the goal it was relabeled from
  source_step: Array   # [T, B..., M] int32: step whose achieved goal became the goal
                       #   (-1 for originals and missing relabels)


def relabel_schedule(success_rate: Array, weight: Array, threshold: Array,
                     ramp: Array = 0.0) -> Array:
  """Warm-start weight for relabeled examples given the real success rate.

  `weight` while `success_rate <= threshold - ramp`, then linearly down to 0 at
  `threshold`, and 0 above it (`ramp = 0`: a hard switch at the threshold).

  Args:
    success_rate: [...] real (unrelabeled) success rate, e.g. a running mean.
    weight, threshold, ramp: [] or broadcastable floats (traced, so sweepable).
  Returns:
    [...] float32 relabel weight.
  """
  success_rate = jnp.asarray(success_rate, jnp.float32)
  ramp = jnp.asarray(ramp, jnp.float32)
  below = (threshold - success_rate) / jnp.maximum(ramp, 1e-12)
  frac = jnp.where(ramp > 0, jnp.clip(below, 0.0, 1.0),
                   (success_rate < threshold).astype(jnp.float32))
  return weight * jnp.where(success_rate >= threshold, 0.0, frac)


def episode_bounds(dones: Array) -> tuple[Array, Array]:
  """First and last step of the episode each step belongs to, along axis 0.

  Args:
    dones: [T, ...] bool, an episode ended at step t.
  Returns:
    (start [T, ...] int32, end [T, ...] int32), inclusive; an episode still running at
    step T - 1 ends there.
  """
  dones = jnp.asarray(dones, bool)
  if dones.ndim < 1:
    raise ValueError(f"dones must be [T, ...], got shape {dones.shape}")
  num_steps = dones.shape[0]
  steps = jnp.arange(num_steps, dtype=jnp.int32).reshape((-1,) + (1,) * (dones.ndim - 1))
  ended_at = jax.lax.cummax(jnp.where(dones, steps, -1), axis=0)
  start = jnp.concatenate([jnp.zeros_like(ended_at[:1]), ended_at[:-1] + 1], axis=0)
  end = jax.lax.cummin(jnp.where(dones, steps, num_steps - 1), axis=0, reverse=True)
  return start, end


def _exclusive_cumsum_at(x: Array, index: Array) -> Array:
  """`sum(x[:index[t]])` along axis 0 for `x: [T, ...]`, `index: [T, ..., k]`."""
  c = jnp.cumsum(x, axis=0)
  c = jnp.concatenate([jnp.zeros_like(c[:1]), c], axis=0)  # c[i] = sum(x[:i])
  if index.ndim > c.ndim:
    c = c[..., None]
  return jnp.take_along_axis(c, index, axis=0)


def _source_steps(candidate: Array, dones: Array, valid: Array, uniforms: Array,
                  strategy: str) -> tuple[Array, Array]:
  """Which step's achieved goal each relabeled copy uses.

  Args:
    candidate: [T, N] bool, a verified (checked, valid) achieved goal exists at s.
    dones, valid: [T, N] bool.
    uniforms: [T, N, k] float32 in [0, 1).
  Returns:
    (source [T, N, k] int32, exists [T, N, k] bool).
  """
  start, end = episode_bounds(dones)
  num_goals = uniforms.shape[-1]
  start_k = jnp.repeat(start[..., None], num_goals, axis=-1)
  end_k = jnp.repeat(end[..., None], num_goals, axis=-1)
  if strategy == "future":
    steps = jnp.arange(candidate.shape[0], dtype=jnp.int32)[:, None, None]
    low = jnp.broadcast_to(steps, uniforms.shape)
    u = uniforms
  else:
    low = start_k
    # One draw per episode (the one at its first step), so every step of a relabeled
    # episode carries the same goal.
    u = jnp.take_along_axis(uniforms, start_k, axis=0)
  cand = candidate.astype(jnp.int32)
  if strategy == "final":
    source = end_k
    exists = jnp.take_along_axis(candidate[..., None], end_k, axis=0)
  else:
    before_low = _exclusive_cumsum_at(cand, low)         # candidates before `low`
    through_end = _exclusive_cumsum_at(cand, end_k + 1)  # candidates up to `end`
    count = through_end - before_low
    pick = jnp.minimum((u * count).astype(jnp.int32), jnp.maximum(count - 1, 0))
    rank = before_low + pick + 1                         # the rank-th candidate overall
    inclusive = jnp.cumsum(cand, axis=0)                 # [T, N]
    # The first step whose inclusive count reaches `rank`: the number of steps below
    # it (a count over T, cheaper to compile than a vmapped binary search).
    below = jnp.moveaxis(inclusive, 0, -1)[None, :, None, :] < rank[..., None]
    source = jnp.minimum(jnp.sum(below, axis=-1, dtype=jnp.int32),
                         candidate.shape[0] - 1)
    exists = count > 0
  exists = jnp.logical_and(exists, valid[..., None])
  return jnp.where(exists, source, -1), exists


def _check_traj(env: Any, traj: Trajectory) -> None:
  missing = [k for k in _NEEDED_INFO if k not in traj.info]
  if missing:
    raise ValueError(
        f"traj.info lacks {missing}: collect from a goal environment wrapped in "
        f"credit_jax.envs.DesiredGoalWrapper (goal envs report achieved_goal/goal_checked)")
  lead = traj.rewards.shape
  if len(lead) < 1:
    raise ValueError(f"traj.rewards must be [T, B...], got shape {lead}")
  goal_shape = tuple(env.goal_shape)
  for name in ("achieved_goal", "desired_goal", "prev_achieved_goal"):
    shape = tuple(traj.info[name].shape)
    if shape != lead + goal_shape:
      raise ValueError(f"traj.info[{name!r}] must have shape [T, B...] + goal shape "
                       f"= {lead + goal_shape}, got {shape}")
  for name, x in (("terminated", traj.terminated), ("truncated", traj.truncated),
                  ("valid", traj.valid), ("info['goal_checked']",
                                          traj.info["goal_checked"])):
    if tuple(x.shape) != lead:
      raise ValueError(f"traj.{name} must have shape [T, B...] = {lead}, got {x.shape}")
  if traj.obs.shape[:len(lead)] != lead or traj.obs.ndim != len(lead) + 1:
    raise ValueError(f"traj.obs must be flat observations [T, B..., D] with [T, B...] = "
                     f"{lead}, got {traj.obs.shape}")


def _relabel_to_goals(env: Any, traj: Trajectory, goals: Array, exists: Array, *,
                     whole_episodes: bool) -> Trajectory:
  """`traj` re-scored under given goals: k copies, the verifier deciding the rewards.

  Args:
    env: the goal environment (`goal_shape`, `goal_reward`, `obs_with_goal`).
    traj: Trajectory [T, B...] as for `relabel`.
    goals: [T, B..., k, *goal_shape] int, the goal of each copy at each step (for whole
      episodes, constant over each episode's steps).
    exists: [T, B..., k] bool, where a copy exists at all (invalid elsewhere).
    whole_episodes: True when the copies are whole episodes (they end at the first step
      that reaches their goal; later steps are invalid), False for independent
      transitions (every valid step where the copy exists stays valid).
  Returns:
    Trajectory [T, B..., k, ...]: obs/final_obs with the goal replaced, rewards,
    terminated, truncated and valid recomputed, `info["desired_goal"]` = goals;
    actions, log_probs (under the ORIGINAL goal), extras and other info repeated.
  """
  _check_traj(env, traj)
  lead = traj.rewards.shape
  num_steps, goal_shape = lead[0], tuple(env.goal_shape)
  num_goals = exists.shape[-1] if jnp.ndim(exists) == len(lead) + 1 else -1
  if (tuple(jnp.shape(exists)) != lead + (num_goals,)
      or tuple(jnp.shape(goals)) != lead + (num_goals,) + goal_shape):
    raise ValueError(f"goals must be [T, B..., k, *goal_shape] and exists [T, B..., k] "
                     f"with [T, B...] = {lead}, goal shape {goal_shape}; got "
                     f"{jnp.shape(goals)} and {jnp.shape(exists)}")
  flat = lambda x: x.reshape((num_steps, -1) + x.shape[len(lead):])
  achieved = flat(traj.info["achieved_goal"]).astype(jnp.int32)   # [T, N, *g]
  desired = flat(traj.info["desired_goal"]).astype(jnp.int32)     # [T, N, *g]
  checked = flat(traj.info["goal_checked"]).astype(bool)          # [T, N]
  valid, terminated = flat(traj.valid), flat(traj.terminated)
  truncated = flat(traj.truncated)
  goals = flat(jnp.asarray(goals, jnp.int32))                     # [T, N, k, *g]
  new_valid = jnp.logical_and(flat(jnp.asarray(exists, bool)), valid[..., None])

  checked_f = checked.astype(jnp.float32)[..., None]
  success_new = checked_f * env.goal_reward(achieved[:, :, None], goals) > 0  # [T,N,k]
  success_orig = checked_f[..., 0] * env.goal_reward(achieved, desired) > 0   # [T,N]
  if whole_episodes:
    # A relabeled episode ends at the first step that reaches its goal.
    start, _ = episode_bounds(jnp.logical_or(terminated, truncated))
    start_k = jnp.repeat(start[..., None], num_goals, axis=-1)
    hits = success_new.astype(jnp.int32)
    steps_k = jnp.broadcast_to(jnp.arange(num_steps, dtype=jnp.int32)[:, None, None],
                               hits.shape)
    earlier = _exclusive_cumsum_at(hits, steps_k) - _exclusive_cumsum_at(hits, start_k)
    new_valid = jnp.logical_and(new_valid, earlier == 0)
  new_term = jnp.logical_and(
      new_valid, jnp.logical_or(success_new, (terminated & ~success_orig)[..., None]))
  new_trunc = new_valid & truncated[..., None] & ~success_new

  def repeat(x):  # [T, B..., ...] -> [T, B..., k, ...]
    x = flat(x)[:, :, None]
    x = jnp.broadcast_to(x, x.shape[:2] + (num_goals,) + x.shape[3:])
    return x.reshape(lead + x.shape[2:])

  unflat = lambda x: x.reshape(lead + x.shape[2:])
  info = {k: repeat(v) for k, v in traj.info.items()}
  info["desired_goal"] = unflat(goals)
  return Trajectory(
      obs=env.obs_with_goal(repeat(traj.obs), unflat(goals)),
      actions=repeat(traj.actions),
      rewards=unflat(jnp.where(new_valid, success_new.astype(jnp.float32), 0.0)),
      terminated=unflat(new_term), truncated=unflat(new_trunc),
      log_probs=repeat(traj.log_probs),
      final_obs=env.obs_with_goal(repeat(traj.final_obs), unflat(goals)),
      valid=unflat(new_valid), extras=jax.tree.map(repeat, traj.extras), info=info)


def relabel(env: Any, traj: Trajectory, key: Array, *, strategy: str,
            num_goals: int = 1, relabel_weight: Array = 1.0) -> Relabeled:
  """Adds `num_goals` relabeled copies of every example of `traj` (see module doc).

  Args:
    env: the goal environment the trajectory came from (wrapped or not): provides
      `goal_shape`, `goal_reward` and `obs_with_goal`.
    traj: Trajectory [T, B...] with flat obs [T, B..., D] and info entries
      "achieved_goal", "desired_goal", "prev_achieved_goal" ([T, B..., *goal_shape];
      `envs.DesiredGoalWrapper` adds the last two) and "goal_checked" ([T, B...] bool).
    key: PRNG key for the goal draws.
    strategy: "final", "episode" or "future" (static).
    num_goals: k >= 1 relabeled copies per example (static).
    relabel_weight: [] float weight of relabeled examples (e.g. `relabel_schedule`).
  Returns:
    `Relabeled` with a trailing copy axis of size `1 + num_goals`.
  """
  if strategy not in STRATEGIES:
    raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
  if isinstance(num_goals, bool) or not isinstance(num_goals, int) or num_goals < 1:
    raise ValueError(f"num_goals must be a Python int >= 1, got {num_goals!r}")
  _check_traj(env, traj)
  lead = traj.rewards.shape
  num_steps, goal_shape = lead[0], tuple(env.goal_shape)
  flat = lambda x: x.reshape((num_steps, -1) + x.shape[len(lead):])
  achieved = flat(traj.info["achieved_goal"]).astype(jnp.int32)   # [T, N, *g]
  valid = flat(traj.valid)
  dones = jnp.logical_or(flat(traj.terminated), flat(traj.truncated))
  # What each episode had achieved before its first action is no achievement.
  start, _ = episode_bounds(dones)
  index = start.reshape(start.shape + (1,) * len(goal_shape))
  at_start = jnp.take_along_axis(flat(traj.info["prev_achieved_goal"]).astype(jnp.int32),
                                 index, axis=0)
  candidate = (flat(traj.info["goal_checked"]).astype(bool) & valid
               & ~(env.goal_reward(achieved, at_start) > 0))
  uniforms = jax.random.uniform(key, valid.shape + (num_goals,))
  source, exists = _source_steps(candidate, dones, valid, uniforms, strategy)
  g_index = jnp.maximum(source, 0).reshape(source.shape + (1,) * len(goal_shape))
  goals = jnp.take_along_axis(achieved[:, :, None], g_index, axis=0)  # [T, N, k, *g]
  unflat = lambda x: x.reshape(lead + x.shape[2:])
  new = _relabel_to_goals(env, traj, unflat(goals), unflat(exists),
                         whole_episodes=strategy != "future")

  def with_original(orig, copies):  # [T, B..., ...], [T, B..., k, ...] -> [.., M, ..]
    return jnp.concatenate([jnp.expand_dims(orig, len(lead)), copies], axis=len(lead))

  out_traj = jax.tree.map(with_original, traj, new)
  relabeled = with_original(jnp.zeros(lead, bool), new.valid)
  weight = jnp.asarray(relabel_weight, jnp.float32)
  weights = jnp.where(relabeled, weight, out_traj.valid.astype(jnp.float32))
  source = jnp.where(new.valid, unflat(source), -1)
  return Relabeled(
      traj=out_traj, weights=weights, relabeled=relabeled,
      goals=out_traj.info["desired_goal"], original_goal=traj.info["desired_goal"],
      source_step=with_original(jnp.full(lead, -1, jnp.int32), source))


def goal_importance_weights(log_probs_new: Array, log_probs_orig: Array, valid: Array,
                            dones: Array, clip: Array) -> tuple[Array, Array]:
  """Clipped ratio of each episode's probability under the new and the original goal.

  For an episode relabeled from goal g to g', `rho = prod_t pi(a_t | s_t, g') /
  pi(a_t | s_t, g)` over its valid steps is the importance weight that turns a sample
  of pi(. | g) into one of pi(. | g') (the goal environments reward only the step that
  ends the episode, so the per-decision weights of every step equal the whole episode's
  ratio). It is truncated at `clip` from above (bias for bounded variance).

  Args:
    log_probs_new: [T, ...] log pi(a_t | s_t, g') of the taken actions.
    log_probs_orig: [T, ...] log pi(a_t | s_t, g), same shape.
    valid: [T, ...] bool, steps that belong to the (relabeled) episode.
    dones: [T, ...] bool episode ends (episodes never share a ratio).
    clip: [] float > 0, the largest weight.
  Returns:
    (weights [T, ...] float32: the episode's clipped ratio on its valid steps, 0
     elsewhere; log_rho [T, ...] float32: the unclipped log-ratio of the episode).
  """
  shapes = {tuple(jnp.shape(x)) for x in (log_probs_new, log_probs_orig, valid, dones)}
  if len(shapes) != 1 or jnp.ndim(valid) < 1:
    raise ValueError(f"log_probs_new, log_probs_orig, valid and dones must share one "
                     f"shape [T, ...], got {jnp.shape(log_probs_new)}, "
                     f"{jnp.shape(log_probs_orig)}, {jnp.shape(valid)}, "
                     f"{jnp.shape(dones)}")
  diff = jnp.where(valid, log_probs_new - log_probs_orig, 0.0)
  start, end = episode_bounds(dones)
  log_rho = _exclusive_cumsum_at(diff, end + 1) - _exclusive_cumsum_at(diff, start)
  weights = jnp.where(valid, jnp.minimum(jnp.exp(jnp.minimum(log_rho, 60.0)), clip), 0.0)
  return weights, jnp.where(valid, log_rho, 0.0)


__all__ = ["Relabeled", "STRATEGIES", "episode_bounds", "goal_importance_weights",
           "relabel", "relabel_schedule"]
