"""Counter-based randomness for environment steps: a 32-bit hash of (seed, step).

gymnax computes a reset on every step (the auto-reset selects it), so anything an episode
needs at each of its T steps (a fake cue, a reward's noise, a corridor cell's content)
cannot be drawn at reset without making every step cost O(T). Instead the reset draws one
32-bit seed and a step derives its randomness from `mix32(seed, t)`: O(1) per step, no
bit generator inside the step, and the same value however often it is recomputed.

For a fixed `t`, `mix32(., t)` is a bijection of the 32-bit seeds (an xor with a
constant, then murmur3's invertible finaliser), so with a uniformly drawn seed each step's
word is exactly uniform on [0, 2**32), and so is every group of its bits. Words of two
different steps are not independent in the strict sense (one seed fixes them all); they
pass as independent for the uses here, and tests compare their statistics with the
independent model.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["mix32", "centred_unit_noise"]

_GOLDEN = 0x9E3779B9


def mix32(seed, t) -> jax.Array:
  """uint32 hash of (seed: uint32, t: int), shapes broadcast.

  murmur3's finaliser of `seed ^ (t * 0x9E3779B9)` (mod 2**32).
  """
  x = jnp.asarray(seed, jnp.uint32) ^ (jnp.asarray(t, jnp.uint32) * jnp.uint32(_GOLDEN))
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x85EBCA6B)
  x = x ^ (x >> 13)
  x = x * jnp.uint32(0xC2B2AE35)
  return x ^ (x >> 16)


def centred_unit_noise(seed, t) -> jax.Array:
  """float32 noise of (seed, t) with mean exactly 0 and variance 1 - 2**-48.

  The top 24 bits of `mix32(seed, t)` pick one of 2**24 points placed symmetrically
  around 0 on [-sqrt(3), sqrt(3)] (a discretised unit-variance uniform): over a uniform
  seed every point is equally likely, so the mean is 0 exactly.
  """
  u = ((mix32(seed, t) >> 8).astype(jnp.float32) + 0.5) / float(1 << 24)
  return (2.0 * u - 1.0) * np.float32(np.sqrt(3.0))
