"""Anchor-state groups: GiGPO's step-level advantages from states equal across a group.

GiGPO (Feng et al., 2025, arXiv 2505.10978) adds to GRPO's episode-level advantage a
step-level one, with no critic and no extra rollout: the K trajectories of a task group
start from one state, and wherever two of their steps stand in the *same* environment
state (an "anchor state"), the discounted returns that followed are samples of the same
state's value, so they can be compared like the K episode returns of a GRPO group:

    A_step(t, k) = (G^(k)_t - mean_g G) / (std_g G + eps),  g = the steps in state s^(k)_t
    A(t, k)      = A_episode(k) + step_weight * A_step(t, k)

A state is a pytree (the env state, or the observation where no state is exposed), so an
anchor group is an equality class of pytrees, formed here inside jit: every step's leaves
are flattened to 32-bit words, hashed, and the steps sorted by (valid, hash, words). The
hash orders almost every comparison on its own; the words after it resolve collisions, so
two steps share a group exactly when their states are bitwise equal (floats compare by
their bits: 0.0 and -0.0 differ, a NaN equals an identical NaN). Cost: one sort of T K
entries per group, `O(T K log(T K))`, and segment sums.

A group of one step, or one whose returns are all equal, carries no signal: its step
advantages are exactly 0 and it is counted as degenerate, as a degenerate episode group is
in `baselines.group_advantages`.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

__all__ = ["AnchorGroups", "state_words", "hash_words", "anchor_groups",
           "anchor_advantages", "gigpo_advantages", "KINDS"]

KINDS = ("grpo", "mean")


class AnchorGroups(NamedTuple):
  """The anchor groups of one task group's T x K steps."""
  group: jax.Array   # [T, K] int32  group index, 0..num_groups-1 (valid steps first)
  size: jax.Array    # [T, K] int32  steps in the step's group (0 at invalid steps)
  num_groups: jax.Array  # [] int32  distinct states among the valid steps


def state_words(tree: Any, lead: int) -> jax.Array:
  """`[*lead_dims, W]` uint32: every leaf's trailing entries as 32-bit words.

  Args:
    tree: pytree whose leaves share their first `lead` dims (e.g. `[T, K]`).
    lead: how many leading dims index the steps.
  Bools and integers of <= 32 bits become one word each, float32 its bits, wider types
  two words (the low and high halves), narrower floats their float32 bits.
  """
  leaves = jax.tree.leaves(tree)
  if not leaves:
    raise ValueError("the state pytree has no leaves to compare")
  dims = leaves[0].shape[:lead]
  words = []
  for x in leaves:
    if x.shape[:lead] != dims:
      raise ValueError(f"every leaf must start with the step dims {dims}, got {x.shape}")
    x = x.reshape(dims + (-1,))
    if x.dtype == jnp.bool_:
      x = x.astype(jnp.uint32)
    elif jnp.issubdtype(x.dtype, jnp.floating):
      x = x.astype(jnp.float32) if x.dtype.itemsize < 4 else x
      x = jax.lax.bitcast_convert_type(x, jnp.uint32)
    elif x.dtype.itemsize < 4:
      x = x.astype(jnp.int32)
    if x.dtype.itemsize == 8:   # a uint32 pair per entry
      x = jax.lax.bitcast_convert_type(x, jnp.uint32).reshape(dims + (-1,))
    words.append(jax.lax.bitcast_convert_type(x, jnp.uint32)
                 if x.dtype != jnp.uint32 else x)
  return jnp.concatenate(words, axis=-1)


def hash_words(words: jax.Array) -> jax.Array:
  """`[...]` uint32 hash of `words: [..., W]` uint32 (murmur3-style word mixing)."""
  h = jnp.full(words.shape[:-1], 0x811C9DC5, jnp.uint32)
  for i in range(words.shape[-1]):
    k = words[..., i] * jnp.uint32(0xCC9E2D51)
    k = (k << 15) | (k >> 17)
    h = h ^ (k * jnp.uint32(0x1B873593))
    h = ((h << 13) | (h >> 19)) * jnp.uint32(5) + jnp.uint32(0xE6546B64)
  h = h ^ jnp.uint32(words.shape[-1] * 4)
  h = (h ^ (h >> 16)) * jnp.uint32(0x85EBCA6B)
  h = (h ^ (h >> 13)) * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


def anchor_groups(states: Any, valid: jax.Array,
                  hash_fn: Optional[Callable[[jax.Array], jax.Array]] = None
                  ) -> AnchorGroups:
  """Groups the valid steps of ONE task group by equal state (vmap over task groups).

  Args:
    states: pytree of [T, K, ...]: the state (or observation) each step acted in.
    valid: [T, K] bool; invalid steps join no group.
    hash_fn: `words [M, W] uint32 -> [M] uint32`, default `hash_words`; any function
      gives the same groups (tests force collisions with a constant).
  Returns:
    `AnchorGroups`, group indices numbered in sorted order.
  """
  if valid.ndim != 2 or valid.dtype != jnp.bool_:
    raise ValueError(f"valid must be [T, K] bool, got {valid.shape} {valid.dtype}")
  words = state_words(states, 2)
  if words.shape[:2] != valid.shape:
    raise ValueError(f"states must be [T, K, ...] = {valid.shape} + ..., got "
                     f"{words.shape[:2]}")
  m = math.prod(valid.shape)
  words = words.reshape(m, -1)
  hashed = (hash_fn or hash_words)(words).astype(jnp.uint32)
  invalid = jnp.logical_not(valid.reshape(m)).astype(jnp.uint32)
  keys = (invalid, hashed) + tuple(words.T)
  out = jax.lax.sort(keys + (jnp.arange(m, dtype=jnp.int32),), num_keys=len(keys))
  order = out[-1]
  changed = jnp.zeros((m - 1,), bool)
  for k in out[:-1]:
    changed = changed | (k[1:] != k[:-1])
  rank = jnp.concatenate([jnp.zeros((1,), jnp.int32),
                          jnp.cumsum(changed.astype(jnp.int32))])
  group = jnp.zeros((m,), jnp.int32).at[order].set(rank)
  flat_valid = valid.reshape(m)
  size = jax.ops.segment_sum(flat_valid.astype(jnp.int32), group, num_segments=m)[group]
  size = jnp.where(flat_valid, size, 0)
  # Invalid steps sort last (their flag is the first key), so the groups of valid steps
  # are those whose head has the flag 0.
  heads = jnp.concatenate([jnp.ones((1,), bool), changed]) & (out[0] == 0)
  num_groups = jnp.sum(heads).astype(jnp.int32)
  return AnchorGroups(group=group.reshape(valid.shape), size=size.reshape(valid.shape),
                      num_groups=num_groups)


def anchor_advantages(states: Any, step_returns: jax.Array, valid: jax.Array, *,
                      kind: str = "grpo", eps: Any = 1e-6,
                      hash_fn: Optional[Callable[[jax.Array], jax.Array]] = None):
  """GiGPO's step advantages for ONE task group (vmap over task groups and seeds).

  Args:
    states: pytree of [T, K, ...], the state (or observation) of each step.
    step_returns: [T, K] float, each step's discounted return-to-go in its trajectory.
    valid: [T, K] bool.
    kind: "grpo" ((G - mean) / (sample std + eps)) or "mean" (G - mean).
    eps: [] added to the std (may be traced).
    hash_fn: as in `anchor_groups`.
  Returns:
    `(advantages [T, K] float32, stats)`: 0 at invalid steps and in degenerate groups;
    `stats` has `num_groups` [] (distinct anchor states), `degenerate` [] (groups of one
    step or of equal returns) and `anchored_steps` [] (valid steps in a group with
    signal).
  """
  if kind not in KINDS:
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
  if step_returns.shape != valid.shape:
    raise ValueError(f"step_returns must be [T, K] = {valid.shape}, got "
                     f"{step_returns.shape}")
  groups = anchor_groups(states, valid, hash_fn)
  m = math.prod(valid.shape)
  g = groups.group.reshape(m)
  v = valid.reshape(m)
  x = jnp.where(v, step_returns.reshape(m).astype(jnp.float32), 0.0)
  count = jnp.maximum(groups.size.reshape(m), 1).astype(jnp.float32)
  total = jax.ops.segment_sum(x, g, num_segments=m)
  mean = (total[g] / count)
  sq = jax.ops.segment_sum(jnp.where(v, (x - mean) ** 2, 0.0), g, num_segments=m)[g]
  high = jax.ops.segment_max(jnp.where(v, x, -jnp.inf), g, num_segments=m)[g]
  low = jax.ops.segment_min(jnp.where(v, x, jnp.inf), g, num_segments=m)[g]
  signal = v & (groups.size.reshape(m) >= 2) & (high > low)
  centred = x - mean
  if kind == "grpo":
    centred = centred / (jnp.sqrt(sq / jnp.maximum(count - 1.0, 1.0)) + eps)
  adv = jnp.where(signal, centred, 0.0).reshape(valid.shape)
  # One representative per group: the valid step that heads it in sorted order.
  heads = jax.ops.segment_sum(jnp.where(v, 1, 0), g, num_segments=m) > 0
  with_signal = jax.ops.segment_max(signal.astype(jnp.int32), g, num_segments=m) > 0
  stats = {"num_groups": groups.num_groups,
           "degenerate": jnp.sum(heads & ~with_signal).astype(jnp.int32),
           "anchored_steps": jnp.sum(signal).astype(jnp.int32)}
  return adv, stats


def gigpo_advantages(episode_advantages: jax.Array, step_advantages: jax.Array,
                     valid: jax.Array, step_weight: Any) -> jax.Array:
  """`A(t, k) = A_episode(k) + step_weight * A_step(t, k)` at valid steps, else 0.

  Args:
    episode_advantages: [..., K] (GRPO's, `baselines.group_advantages`).
    step_advantages, valid: [T, ..., K].
    step_weight: [] (may be traced).
  """
  if step_advantages.shape[1:] != episode_advantages.shape or \
      valid.shape != step_advantages.shape:
    raise ValueError(f"step_advantages and valid must be [T, ..., K] with [..., K] = "
                     f"episode_advantages' {episode_advantages.shape}, got "
                     f"{step_advantages.shape} and {valid.shape}")
  adv = episode_advantages[None] + step_weight * step_advantages
  return jnp.where(valid, adv, 0.0)
