"""BitFlip-v0: the n-bit flipping task of the HER paper (Andrychowicz et al., 2017).

The state is a string of `num_bits` (n) bits and the goal another one; action i flips
bit i. Reaching the goal gives reward 1.0 and terminates the episode; otherwise the
reward is 0.0 and the time limit `params.max_steps_in_episode` (default n, as in the
paper) truncates it. Because the goal differs from the start in at most n bits, an
optimal policy always succeeds within n steps; a random one almost never does for
large n, which is what makes it the classic hindsight-relabeling benchmark.

Start and goal: the start bits are uniform; the goal is the start XOR a uniform mask,
with an all-zero mask replaced by a single random bit so the goal never equals the
start (the episode always needs at least one action). That bit is a 32-bit word modulo
n: exact for n a power of two, else off uniform by < n / 2**32 relative.

Observation (float32, `[2n]`): `[bits, goal]`. Goal API (see `goal.py`): the achieved
goal is the current bit string, `[n]` int32; the goal is checked on every step.

Actions are cast to int32; an action outside `[0, n)` flips nothing (a no-op), so it
can never produce a success by itself.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment

from credit_jax.envs import base, goal


@struct.dataclass
class BitFlipState(environment.EnvState):
  bits: jax.Array   # [n] int32 in {0, 1}  current bit string
  goal: jax.Array   # [n] int32 in {0, 1}  target bit string
  time: jax.Array   # [] int32             steps taken in this episode


@struct.dataclass
class BitFlipParams(environment.EnvParams):
  max_steps_in_episode: int = 10  # time limit; make() sets it to num_bits


class BitFlip(goal.GoalEnvMixin, base.CreditEnv):
  """BitFlip-v0. See the module docstring."""

  name = "BitFlip-v0"
  deterministic_transitions = True  # step_env ignores its key

  def __init__(self, num_bits: int = 10):
    super().__init__()
    self.num_bits = base.check_int("num_bits", num_bits, minimum=1,
                                   maximum=base.MAX_STEPS)
    self.goal_shape = (self.num_bits,)
    self.goal_obs_size = self.num_bits
    self.obs_shape = (2 * self.num_bits,)

  @property
  def num_actions(self) -> int:
    return self.num_bits

  @property
  def default_params(self) -> BitFlipParams:
    return BitFlipParams(max_steps_in_episode=self.num_bits)

  def reset_env(self, key: jax.Array, params: BitFlipParams
                ) -> Tuple[jax.Array, BitFlipState]:
    # One call of the bit generator (gymnax runs reset_env on every step): words
    # [0, m) give the start bits, [m, 2m) the mask, the last word the fallback bit.
    m = -(-self.num_bits // 32)
    words = jax.random.bits(key, (2 * m + 1,), jnp.uint32)
    unpack = lambda w: ((w[:, None] >> jnp.arange(32, dtype=jnp.uint32)) & 1).reshape(
        -1)[:self.num_bits].astype(jnp.int32)
    bits, mask = unpack(words[:m]), unpack(words[m:2 * m])
    one_bit = jnp.arange(self.num_bits) == words[2 * m] % self.num_bits
    mask = jnp.where(jnp.any(mask == 1), mask, one_bit.astype(jnp.int32))
    state = BitFlipState(bits=bits, goal=bits ^ mask, time=jnp.zeros((), jnp.int32))
    return self.get_obs(state), state

  def step_env(self, key: jax.Array, state: BitFlipState, action: Any,
               params: BitFlipParams
               ) -> Tuple[jax.Array, BitFlipState, jax.Array, jax.Array, Dict]:
    del key  # Deterministic transitions (see deterministic_transitions).
    flip = (jnp.arange(self.num_bits) == jnp.asarray(action, jnp.int32))
    state = state.replace(bits=state.bits ^ flip.astype(jnp.int32),
                          time=state.time + 1)
    return self.reach_goal_outcome(state, params)

  def is_terminated(self, state: BitFlipState, params: Any) -> jax.Array:
    return jnp.all(state.bits == state.goal)

  def get_obs(self, state: BitFlipState, params: Any = None, key: Any = None
              ) -> jax.Array:
    """[2n] float32: the bits, then the goal."""
    return jnp.concatenate([state.bits.astype(jnp.float32),
                            self.encode_goal(state.goal)])

  def achieved_goal(self, state: BitFlipState) -> jax.Array:
    return state.bits

  def encode_goal(self, goal_bits: jax.Array) -> jax.Array:
    return jnp.asarray(goal_bits).astype(jnp.float32)
