"""How many GRPO groups carry no signal, measured and as `p^K + (1 - p)^K`, the range
of success rates where at most a given share of the groups is degenerate, and the tabular
policy's logits that succeed at a chosen rate (the GRPO degradation study,
credit_jax/experiments/grpo_degradation/study.py)."""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from credit_jax import baselines

Array = jax.Array

def degenerate_fraction(rewards: Array) -> Array:
  """Fraction of groups whose K rewards are all equal (GRPO advantage exactly 0).

  Args:
    rewards: [..., K] float, the group on the last axis (as `cj.group_advantages`).
  Returns:
    [] float.
  """
  _, degenerate = baselines.group_advantages(rewards, kind="grpo")
  return jnp.mean(degenerate.astype(jnp.float32))


def analytic_degenerate_fraction(success_rate: Any, group_size: int) -> Array:
  """`p^K + (1 - p)^K`: the chance that K independent 0/1 rewards are all equal.

  Args:
    success_rate: [...] float p in [0, 1] (per-sample success probability).
    group_size: K >= 1.
  Returns:
    [...] float.
  """
  if int(group_size) < 1:
    raise ValueError(f"group_size must be >= 1, got {group_size}")
  p = jnp.asarray(success_rate, jnp.float32)
  return p ** group_size + (1.0 - p) ** group_size


def informative_success_range(group_size: int, max_degenerate: float = 0.5
                              ) -> tuple:
  """(p_low, p_high): success rates whose analytic degenerate fraction is <= a bound.

  `p^K + (1 - p)^K` falls from 1 at p = 0 to its minimum 2^(1-K) at p = 1/2 and is
  symmetric about it, so the range is an interval around 1/2, found by bisection.

  Args:
    group_size: K >= 2.
    max_degenerate: the bound, in [2^(1-K), 1).
  Returns:
    Python floats (host-side analysis, not for use under jit).
  """
  if int(group_size) < 2:
    raise ValueError(f"group_size must be >= 2, got {group_size}")
  floor = 2.0 ** (1 - group_size)
  if not floor <= max_degenerate < 1.0:
    raise ValueError(f"max_degenerate must lie in [{floor:g}, 1) for K = {group_size}, "
                     f"got {max_degenerate}")
  low, high = 0.0, 0.5
  for _ in range(60):
    mid = 0.5 * (low + high)
    if mid ** group_size + (1.0 - mid) ** group_size > max_degenerate:
      low = mid
    else:
      high = mid
  return high, 1.0 - high


def biased_logits(num_actions: int, q: Any) -> Array:
  """[A + 1, A] logits that answer a pivotal step right with probability q.

  Row 1 + c puts `beta = log(q (A - 1) / (1 - q))` on action c and 0 elsewhere, so
  `softmax(row)[c] = q`; the distractor row is uniform. `q = 1/A` is the uniform
  policy; `q` may be traced (a sweep over it is a vmap).

  Args:
    num_actions: A >= 2 (static).
    q: [] float in (0, 1).
  """
  if num_actions < 2:
    raise ValueError(f"num_actions must be >= 2, got {num_actions}")
  if not isinstance(q, jax.core.Tracer) and not 0.0 < float(q) < 1.0:
    raise ValueError(f"q must lie in (0, 1), got {float(q)}")
  q = jnp.asarray(q, jnp.float32)
  beta = jnp.log(q * (num_actions - 1) / (1.0 - q))
  eye = jnp.eye(num_actions, dtype=jnp.float32)
  return jnp.concatenate([jnp.zeros((1, num_actions), jnp.float32), beta * eye])
