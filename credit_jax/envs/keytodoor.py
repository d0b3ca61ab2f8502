"""KeyToDoor-v0: pick up a key, collect apples for a long while, then open a door with it.

The standard long-range credit test (TVT, arXiv 1810.06721; Synthetic Returns; COCOA),
on a small grid. An episode has three phases in rooms of `room_size` x `room_size` (W)
cells; the agent starts each phase in the centre cell and moves with 4 actions
(0 up, 1 down, 2 left, 3 right; a move into a wall stays put):

  1. key phase, `key_phase` steps (static): a key lies on one random cell other than the
     centre; stepping onto it picks it up. The step that picks up the key is the
     **pivotal step** (`info["pivotal"]`): the only action in the episode that decides
     whether the final reward is possible.
  2. distractor phase, `params.distractor_length` (L) steps (a traced param, 0 <=
     L <= `max_distractor`, so one compiled rollout of the longest episode serves every
     L): every cell holds an apple; stepping onto one eats it for a reward of
     `apple_reward + apple_noise * u_t` (u_t a unit-variance uniform noise, fixed per
     episode and step), and it grows back `regrow` steps later. The apples' return is
     independent of the key and only adds variance to the episode return.
  3. door phase, `door_phase` steps (static): the door is the top-left cell. Stepping onto
     it while holding the key opens it: reward `door_reward`, `info["success"]`, and the
     episode terminates. Without the key the door stays shut.

The episode terminates when the door opens or after `key_phase + L + door_phase` steps;
`params.max_steps_in_episode` can only cut it short (a truncation). Success = the door
was opened with the key (apples never count), so success cannot be read off the return.

Observation (float32, `[2 W^2 + 3]`): `[0:W^2]` one-hot agent cell; `[W^2:2W^2]` the
current room's objects (key phase: the key's cell until picked; distractor phase: cells
holding an apple; door phase: the door's cell); `[2W^2:2W^2+3]` one-hot phase. Whether
the agent holds the key is not observed (as in TVT), though acting well needs no memory:
fetch the key, later walk to the door.

info: "pivotal" (bool, the key was picked up this step), "success" (bool, the door was
opened), "has_key" (bool, after the step), "phase" (int32, phase of the step taken: 0, 1,
2), "apple_reward" (float32, the distractor reward of the step).

Dependencies that grow with L (static options; their defaults keep the layout above):

| option (default)              | the shortcut it removes                                  |
|-------------------------------|----------------------------------------------------------|
| `phase_growth=g` (0.0)        | key and door phases of fixed length: they last           |
|                               | `key_phase + floor(g L)` and `door_phase + floor(g L)`   |
|                               | steps, so exploring and returning scale with the episode |
| `carry_position=True` (False) | the reset to the centre at each phase: the agent starts  |
|                               | each phase where the last one left it, so the distractor |
|                               | phase's moves decide how far the door is                 |
Apples are the distractor variance: `apple_reward` (their mean; 0 turns them off) and
`apple_noise` (the standard deviation around it). Longer phases make a random walk likelier
to find the key and the door in a small room; `room_size` is the dial that keeps it hard.
`random_success(params)` and `optimal_success(params)` give both rates exactly, by
dynamic programming over (cell, key held) for every key cell; the horizon to roll out is
`max_episode_length`.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from credit_jax.envs import base, hashing, keytodoor_dp

NEVER = -(1 << 20)   # eaten_at of an apple never eaten
DOOR_CELL = 0        # the door is the top-left cell
_MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))   # up, down, left, right as (row, col)


@struct.dataclass
class KeyToDoorState(environment.EnvState):
  time: jax.Array         # [] int32   steps taken in this episode
  pos: jax.Array          # [] int32   agent cell, row * W + col
  key_cell: jax.Array     # [] int32   the key's cell (never the centre)
  has_key: jax.Array      # [] bool    the key was picked up
  door_open: jax.Array    # [] bool    the door was opened (the episode is over)
  eaten_at: jax.Array     # [W^2] int32 time each apple was last eaten (NEVER if not)
  noise_seed: jax.Array   # [] uint32  seed of this episode's apple noise


@struct.dataclass
class KeyToDoorParams(environment.EnvParams):
  distractor_length: int = 30   # L, steps of the distractor phase (<= max_distractor)
  apple_reward: float = 0.1     # mean reward of an apple
  apple_noise: float = 0.0      # standard deviation of an apple's reward around its mean
  door_reward: float = 1.0      # reward for opening the door with the key
  regrow: int = 4               # steps until an eaten apple grows back (>= 1)
  max_steps_in_episode: int = 1 << 30   # time limit; make() sets the longest episode


def _noise_unit(seed, t):
  """Unit-variance uniform noise of (seed: uint32, t: int32), same shapes broadcast.

  The top 24 bits of `hashing.mix32(seed, t)` give u in [0, 1), mapped to
  `(2u - 1) sqrt(3)`. Cheap (no bit generator in the step) and reproducible.
  """
  u = (hashing.mix32(seed, t) >> 8).astype(jnp.float32) / float(1 << 24)
  return (2.0 * u - 1.0) * np.float32(np.sqrt(3.0))


class KeyToDoor(base.CreditEnv):
  """KeyToDoor-v0. See the module docstring for the task, observation and info."""

  name = "KeyToDoor-v0"
  num_actions = 4
  deterministic_transitions = True  # step_env ignores its key; the noise is per episode

  def __init__(self, room_size: int = 3, key_phase: int = 4, door_phase: int = 4,
               max_distractor: int = 30, phase_growth: float = 0.0,
               carry_position: bool = False):
    super().__init__()
    self.room_size = base.check_int("room_size", room_size, minimum=2, maximum=15)
    self.key_phase = base.check_int("key_phase", key_phase, minimum=1)
    self.door_phase = base.check_int("door_phase", door_phase, minimum=1)
    self.max_distractor = base.check_int("max_distractor", max_distractor, minimum=0)
    self.phase_growth = base.check_nonnegative("phase_growth", phase_growth)
    self.carry_position = base.check_bool("carry_position", carry_position)
    w = self.room_size
    self.num_cells = w * w
    self.start_cell = (w // 2) * w + w // 2
    self.obs_shape = (2 * self.num_cells + 3,)
    # move_table[cell, action] -> next cell
    table = np.zeros((self.num_cells, 4), np.int32)
    for cell in range(self.num_cells):
      r, c = divmod(cell, w)
      for a, (dr, dc) in enumerate(_MOVES):
        nr, nc = min(max(r + dr, 0), w - 1), min(max(c + dc, 0), w - 1)
        table[cell, a] = nr * w + nc
    self._move_table = jnp.asarray(table)

  @property
  def max_episode_length(self) -> int:
    """Steps of the longest episode (L = max_distractor): the rollout horizon to use."""
    first, last = self.phase_lengths(self.max_distractor)
    return int(first) + self.max_distractor + int(last)

  def phase_lengths(self, distractor_length):
    """(key phase, door phase) lengths at distractor length L: the static `key_phase`
    and `door_phase`, each plus `floor(phase_growth * L)` (ints for a Python L and no
    growth, else [] int32; the product is rounded to 4 decimals before the floor)."""
    if self.phase_growth == 0.0:
      return self.key_phase, self.door_phase
    grown = jnp.floor(jnp.round(np.float32(self.phase_growth)
                                * jnp.asarray(distractor_length, jnp.float32), 4))
    grown = grown.astype(jnp.int32)
    return self.key_phase + grown, self.door_phase + grown

  @property
  def default_params(self) -> KeyToDoorParams:
    return KeyToDoorParams(distractor_length=self.max_distractor,
                           max_steps_in_episode=self.max_episode_length)

  def validate_params(self, params: KeyToDoorParams) -> None:
    super().validate_params(params)
    base.check_param_range("distractor_length", params.distractor_length, 0,
                           self.max_distractor)
    base.check_param_range("apple_noise", params.apple_noise, 0.0)
    base.check_param_range("regrow", params.regrow, 1)

  def reset_env(self, key: jax.Array, params: KeyToDoorParams
                ) -> Tuple[jax.Array, KeyToDoorState]:
    words = jax.random.bits(key, (2,), jnp.uint32)
    # The key's cell: one of the W^2 - 1 cells other than the centre.
    offset = ((words[0] >> 16) * jnp.uint32(self.num_cells - 1)) >> 16
    key_cell = offset.astype(jnp.int32)
    key_cell = key_cell + (key_cell >= self.start_cell).astype(jnp.int32)
    state = KeyToDoorState(
        time=jnp.zeros((), jnp.int32), pos=jnp.asarray(self.start_cell, jnp.int32),
        key_cell=key_cell, has_key=jnp.array(False), door_open=jnp.array(False),
        eaten_at=jnp.full((self.num_cells,), NEVER, jnp.int32), noise_seed=words[1])
    return self.get_obs(state, params), state

  def phase_of(self, t: jax.Array, params: KeyToDoorParams) -> jax.Array:
    """[] int32: the phase (0 key, 1 distractor, 2 door) of step index `t`."""
    t = jnp.asarray(t, jnp.int32)
    first, _ = self.phase_lengths(params.distractor_length)
    return ((t >= first).astype(jnp.int32)
            + (t >= first + params.distractor_length).astype(jnp.int32))

  def step_env(self, key: jax.Array, state: KeyToDoorState, action: Any,
               params: KeyToDoorParams
               ) -> Tuple[jax.Array, KeyToDoorState, jax.Array, jax.Array, Dict]:
    del key  # Deterministic transitions (see deterministic_transitions).
    t = state.time
    phase = self.phase_of(t, params)
    action = jnp.clip(jnp.asarray(action, jnp.int32), 0, 3)
    new_pos = self._move_table[state.pos, action]
    picked = (phase == 0) & (new_pos == state.key_cell) & ~state.has_key
    has_key = state.has_key | picked
    apple = (phase == 1) & (t - state.eaten_at[new_pos] >= params.regrow)
    apple_r = jnp.where(apple, params.apple_reward
                        + params.apple_noise * _noise_unit(state.noise_seed, t), 0.0)
    eaten_at = jnp.where(apple, state.eaten_at.at[new_pos].set(t), state.eaten_at)
    opened = (phase == 2) & (new_pos == DOOR_CELL) & has_key
    reward = (apple_r + jnp.where(opened, params.door_reward, 0.0)).astype(jnp.float32)
    t1 = t + 1
    if not self.carry_position:
      first, _ = self.phase_lengths(params.distractor_length)
      phase_change = (t1 == first) | (t1 == first + params.distractor_length)
      new_pos = jnp.where(phase_change, self.start_cell, new_pos).astype(jnp.int32)
    state = state.replace(time=t1, pos=new_pos, has_key=has_key, door_open=opened,
                          eaten_at=eaten_at)
    info = {"pivotal": picked, "success": opened, "has_key": has_key,
            "phase": phase, "apple_reward": apple_r.astype(jnp.float32)}
    return (self.get_obs(state, params), state, reward,
            self.is_terminated(state, params), info)

  def is_terminated(self, state: KeyToDoorState, params: KeyToDoorParams) -> jax.Array:
    first, last = self.phase_lengths(params.distractor_length)
    end = first + params.distractor_length + last
    return state.door_open | (state.time >= end)

  def get_obs(self, state: KeyToDoorState, params: Any = None, key: Any = None
              ) -> jax.Array:
    """[2 W^2 + 3] float32 observation of an unbatched state (layout in the module doc)."""
    if params is None:
      params = self.default_params
    cells = jnp.arange(self.num_cells)
    phase = self.phase_of(state.time, params)
    key_map = (cells == state.key_cell) & ~state.has_key
    apple_map = state.time - state.eaten_at >= params.regrow
    door_map = cells == DOOR_CELL
    objects = jnp.where(phase == 0, key_map, jnp.where(phase == 1, apple_map, door_map))
    return jnp.concatenate([(cells == state.pos).astype(jnp.float32),
                            objects.astype(jnp.float32),
                            (jnp.arange(3) == phase).astype(jnp.float32)])

  def random_success(self, params: KeyToDoorParams | None = None) -> float:
    """Exact success probability of the uniform random policy (host float, by dynamic
    programming over cells and the key for each of the equally likely key cells; the
    key cell's multiply-shift draw is uniform up to 2**-16)."""
    return keytodoor_dp.success(self, self.default_params if params is None else params,
                                optimal=False)

  def optimal_success(self, params: KeyToDoorParams | None = None) -> float:
    """Success probability of the best policy (one that sees the key's cell): the share
    of key cells from which the key, then the door, can be reached in time."""
    return keytodoor_dp.success(self, self.default_params if params is None else params,
                                optimal=True)
