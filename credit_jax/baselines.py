"""Baselines without a value function: group-relative advantages and per-task averages.

When K rollouts of the same task share a start state, the other K - 1 returns are a
baseline for free (GRPO, RLOO, Dr. GRPO). A group whose K rewards are all equal carries
no learning signal: its advantages are exactly 0 (never the 0/0 of a zero std) and it is
reported in a mask, because the fraction of such groups is what decides whether GRPO
still learns on a hard task. When K rollouts per task are too expensive, a per-task
exponential average of past rewards (`RunningBaseline`) plays the same role.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Tuple

import jax
from jax import Array
import jax.numpy as jnp
import numpy as np

KINDS = ("grpo", "rloo", "drgrpo", "mean")


def _check_float_array(name: str, x: Any) -> None:
  if not hasattr(x, "dtype"):
    raise ValueError(f"{name} must be an array, got {type(x).__name__}")
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise ValueError(f"{name} must have a floating dtype, got {x.dtype} "
                     f"(shape {np.shape(x)})")


def _check_concrete_range(name: str, x: Any, low: float, high: float) -> None:
  if isinstance(x, jax.core.Tracer):
    return  # traced hyperparameters (sweeps) cannot be checked before running
  value = np.asarray(x)
  if value.shape != ():
    raise ValueError(f"{name} must be a scalar, got shape {value.shape}")
  if not low <= float(value) <= high:
    raise ValueError(f"{name} must lie in [{low}, {high}], got {float(value)}")


def group_advantages(rewards: Any, kind: str = "grpo",
                     eps: Any = 1e-6) -> Tuple[Array, Array]:
  """Advantages of each sample relative to the other samples of its group.

  Kinds, with `mean` and `std` over the K samples of a group:
    "grpo":   (r - mean) / (std + eps), with the *sample* std (ddof = 1), as google/tunix
              and TRL ship it. With K = 2 and rewards {0, 1} this gives -/+0.707 (the
              population std would give -/+1). Deliberately the same convention as the
              implementations whose results we reproduce.
    "rloo":   r_i - mean_{j != i} r_j, the leave-one-out baseline (unbiased: the
              baseline does not depend on the sample it scores); equals
              K / (K - 1) * (r - mean).
    "drgrpo": r - mean, Dr. GRPO's advantage (no std normalisation, which over-weights
              near-degenerate groups).
    "mean":   r - mean, the plain group-mean baseline. Identical in value to "drgrpo"
              here; Dr. GRPO differs from it only in how the loss aggregates tokens,
              which is the recipe's business, not the advantage's.

  Args:
    rewards: [..., K] float, one scalar reward (or return) per sample; the group is
      the last axis, any leading dims are independent groups.
    kind: one of `KINDS`.
    eps: [] float >= 0 added to the std for "grpo" (a pytree leaf: may be traced).

  Returns:
    (advantages [..., K] float, degenerate [...] bool). A degenerate group (all K
    rewards equal) has advantages exactly 0.

  Rewards are not checked for NaN/inf (that would cost a device sync): in a group with
  a NaN reward, or an inf among finite rewards, every advantage is non-finite (NaN or
  +-inf) and the group is not degenerate; other groups are unaffected. Finite rewards up
  to 1e30 in magnitude give finite advantages (tests/test_fuzz.py).

  Raises:
    ValueError: for an unknown kind, K < 2, non-float rewards, or a negative eps.
  """
  _check_float_array("rewards", rewards)
  shape = np.shape(rewards)
  if len(shape) < 1:
    raise ValueError(f"rewards must be [..., K] with the group on the last axis, got "
                     f"shape {shape}")
  if shape[-1] < 2:
    raise ValueError(f"a group needs K >= 2 samples to form a baseline, got K = "
                     f"{shape[-1]} (rewards shape {shape})")
  if kind not in KINDS:
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
  _check_concrete_range("eps", eps, 0.0, np.inf)
  return _group_advantages(rewards, eps, kind=kind)


def _group_advantages_impl(rewards, eps, kind):
  num = rewards.shape[-1]
  degenerate = jnp.max(rewards, axis=-1) == jnp.min(rewards, axis=-1)
  mean = jnp.mean(rewards, axis=-1, keepdims=True)
  if kind == "grpo":
    # std = scale * sqrt(sum((d / scale)^2) / (K - 1)) with scale = max |d|: the same
    # value, but the squares cannot overflow (float32 squares overflow above ~1e19).
    # The scale is a constant for the gradient (the std does not depend on it).
    dev = rewards - mean
    scale = jax.lax.stop_gradient(jnp.max(jnp.abs(dev), axis=-1, keepdims=True))
    # A degenerate group takes scale 1 and the sqrt of 1 instead of 0: its result is
    # replaced below anyway, and this keeps the inf of sqrt'(0), the 0/0 of eps = 0 and
    # of d / scale out of the gradients as well as the values.
    scale = jnp.where(degenerate[..., None], jnp.ones((), scale.dtype), scale)
    var = jnp.sum((dev / scale) ** 2, axis=-1, keepdims=True) / (num - 1)
    var = jnp.where(degenerate[..., None], jnp.ones((), var.dtype), var)
    adv = dev / (scale * jnp.sqrt(var) + eps)
  elif kind == "rloo":
    others = (jnp.sum(rewards, axis=-1, keepdims=True) - rewards) / (num - 1)
    adv = rewards - others
  else:
    adv = rewards - mean
  # Rounding can leave r - mean at a few ulps in a constant group, and grpo then divides
  # by std + eps ~ eps: force the exact 0 the mask promises.
  adv = jnp.where(degenerate[..., None], jnp.zeros((), adv.dtype), adv)
  return adv, degenerate


_group_advantages = jax.jit(_group_advantages_impl, static_argnames="kind")


class RunningBaseline(NamedTuple):
  """Per-task exponential average of rewards, for when K rollouts per task cost too much.

  `mean[i]` is task i's baseline; `count[i]` how many rewards it has absorbed. Until a
  task has seen `1 / (1 - decay)` rewards its mean is the plain sample mean (the step
  size is `max(1 - decay, n_new / count)`), so the first update lands on the observed
  rewards instead of being pulled toward the initial 0, as a bias-corrected EMA would.
  """
  mean: Array    # [num_tasks] float32
  count: Array   # [num_tasks] int32


def running_baseline_init(num_tasks: int) -> RunningBaseline:
  """A baseline of 0 with no rewards seen, for tasks `0 .. num_tasks - 1`."""
  if (isinstance(num_tasks, bool) or not isinstance(num_tasks, (int, np.integer))
      or num_tasks < 1):
    raise ValueError(f"num_tasks must be a positive int, got {num_tasks!r}")
  return RunningBaseline(mean=jnp.zeros((num_tasks,), jnp.float32),
                         count=jnp.zeros((num_tasks,), jnp.int32))


def _check_batch(state: RunningBaseline, task_ids: Any, rewards: Any) -> None:
  if not isinstance(state, RunningBaseline):
    raise ValueError(f"state must be a RunningBaseline, got {type(state).__name__}")
  if not hasattr(task_ids, "dtype") or not jnp.issubdtype(task_ids.dtype, jnp.integer):
    raise ValueError("task_ids must be an integer array, got "
                     f"{getattr(task_ids, 'dtype', type(task_ids).__name__)}")
  _check_float_array("rewards", rewards)
  if np.shape(task_ids) != np.shape(rewards):
    raise ValueError(f"task_ids {np.shape(task_ids)} and rewards {np.shape(rewards)} "
                     "must have the same shape (one task id per reward)")
  if not isinstance(task_ids, jax.core.Tracer) and np.size(task_ids):
    ids = np.asarray(task_ids)
    num_tasks = state.mean.shape[0]
    if ids.min() < 0 or ids.max() >= num_tasks:
      raise ValueError(f"task_ids must lie in [0, {num_tasks}), got values in "
                       f"[{ids.min()}, {ids.max()}]")


def running_baseline_update(state: RunningBaseline, task_ids: Any, rewards: Any,
                            decay: Any = 0.99) -> RunningBaseline:
  """Folds a batch of rewards into their tasks' averages; jit- and vmap-safe.

  Args:
    state: the current `RunningBaseline`.
    task_ids: [...] int in [0, num_tasks), the task of each reward.
    rewards: [...] float, same shape as `task_ids`.
    decay: [] float in [0, 1], the EMA decay per reward once warmed up (may be traced;
      1 keeps the plain sample mean of every reward seen).

  Returns:
    The new state: tasks absent from the batch are unchanged; a task with n rewards in
    the batch moves toward their mean by `max(1 - decay, n / count_after)`. Rewards are
    not checked for NaN/inf: a non-finite reward makes its own task's mean non-finite
    for good, other tasks are unaffected. An empty batch changes nothing.
  """
  _check_batch(state, task_ids, rewards)
  _check_concrete_range("decay", decay, 0.0, 1.0)
  return _update(state, task_ids, rewards, decay)


@jax.jit
def _update(state, task_ids, rewards, decay):
  num_tasks = state.mean.shape[0]
  ids = jnp.ravel(task_ids)
  sums = jax.ops.segment_sum(jnp.ravel(rewards).astype(jnp.float32), ids, num_tasks)
  seen = jax.ops.segment_sum(jnp.ones_like(ids), ids, num_tasks)
  count = state.count + seen
  step = jnp.maximum(1.0 - decay, seen / jnp.maximum(count, 1))
  batch_mean = sums / jnp.maximum(seen, 1)
  mean = jnp.where(seen > 0, state.mean + step * (batch_mean - state.mean), state.mean)
  return RunningBaseline(mean=mean.astype(state.mean.dtype), count=count)


def running_baseline_advantages(state: RunningBaseline, task_ids: Any,
                                rewards: Any) -> Array:
  """`rewards - mean[task_ids]`; a task never seen has baseline 0.

  Call it before `running_baseline_update` with the same rewards, so that no reward is
  scored against a baseline that already contains it.

  Args:
    state: a `RunningBaseline`.
    task_ids: [...] int in [0, num_tasks).
    rewards: [...] float.

  Returns:
    [...] float advantages.
  """
  _check_batch(state, task_ids, rewards)
  return rewards - state.mean[task_ids].astype(rewards.dtype)
