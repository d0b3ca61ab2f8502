"""GoalGrid-v0: a goal-conditioned gridworld with several target cells.

An open `size` x `size` grid. Each episode draws its goal uniformly among the target
cells (`targets`: default the four corners; `"all"` makes every cell a target, so any
cell an episode ends on is a goal the task itself poses, which keeps hindsight-relabeled
goals inside the task's goal distribution) and its start uniformly among the other
cells (32-bit words modulo the count: exact for powers of two, else off uniform by less
than count / 2**32 relative). Actions: 0 up, 1 right, 2 down, 3 left; moves into a wall
leave the agent in place. With probability `params.slip_prob` (default 0, a pytree leaf
so a sweep over it is a vmap) the move taken is a uniformly random one instead.
Stepping onto the goal gives reward 1.0 and terminates; otherwise the reward is 0.0
and the time limit `params.max_steps_in_episode` (default 3 * size) truncates the
episode.

Observation (float32, `[2 * size * size]`): one-hot agent cell, then one-hot goal cell
(the goal part). With `observation="coords"` it is `[4]` instead: agent (row, col), then
goal (row, col), each scaled to [-1, 1] (`2 * v / (size - 1) - 1`), so a policy's input
does not grow with the grid (the large grids of the horizon remedies,
credit_jax/experiments/horizon/remedies.py). Goal API (see `goal.py`): the achieved goal is the agent's cell
`[row, col]` int32 (at the episode's end, the cell it ends on); the goal is checked on
every step.

Actions are cast to int32; an action outside `[0, 4)` does not move the agent (unless a
slip replaces it), so it can never reach a goal by itself.
"""
from __future__ import annotations

import operator
from typing import Any, Dict, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from credit_jax.envs import base, goal

# Row and column change of actions 0..3 (up, right, down, left).
_MOVES = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]], np.int32)


@struct.dataclass
class GoalGridState(environment.EnvState):
  pos: jax.Array    # [2] int32  agent (row, col)
  goal: jax.Array   # [2] int32  goal (row, col), one of the targets
  time: jax.Array   # [] int32   steps taken in this episode


@struct.dataclass
class GoalGridParams(environment.EnvParams):
  max_steps_in_episode: int = 21  # time limit; make() sets it to 3 * size
  slip_prob: float = 0.0          # probability that a move is replaced by a random one


class GoalGrid(goal.GoalEnvMixin, base.CreditEnv):
  """GoalGrid-v0. See the module docstring."""

  name = "GoalGrid-v0"
  num_actions = 4

  def __init__(self, size: int = 7,
               targets: Sequence[Sequence[int]] | str | None = None,
               observation: str = "onehot"):
    super().__init__()
    if observation not in ("onehot", "coords"):
      raise ValueError(f"observation must be 'onehot' or 'coords', got {observation!r}")
    self.observation = observation
    # Cells are numbered in int32 and the limit is 3 * size steps.
    self.size = base.check_int("size", size, minimum=2, maximum=46340)
    if targets is None:
      last = self.size - 1
      targets = ((0, 0), (0, last), (last, 0), (last, last))
    elif isinstance(targets, str):
      if targets != "all":
        raise ValueError(f"targets must be a sequence of (row, col) pairs or 'all', "
                         f"got {targets!r}")
      targets = [(r, c) for r in range(self.size) for c in range(self.size)]
    try:
      cells = [tuple(operator.index(v) for v in cell) for cell in targets]  # no floats
    except (TypeError, ValueError) as error:
      raise ValueError(f"targets must be a sequence of (row, col) pairs, got "
                       f"{targets!r}") from error
    if not cells or any(len(c) != 2 for c in cells):
      raise ValueError(f"targets must be a non-empty sequence of (row, col) pairs, "
                       f"got {targets!r}")
    if any(not 0 <= v < self.size for c in cells for v in c):
      raise ValueError(f"targets must lie inside the {self.size}x{self.size} grid, "
                       f"got {targets!r}")
    if len(set(cells)) != len(cells):
      raise ValueError(f"targets must be distinct cells, got {targets!r}")
    self.targets = tuple(cells)
    self._targets = jnp.asarray(cells, jnp.int32)
    self._moves = jnp.asarray(_MOVES)
    self.goal_shape = (2,)
    self.goal_obs_size = 2 if observation == "coords" else self.size * self.size
    self.obs_shape = (2 * self.goal_obs_size,)

  @property
  def default_params(self) -> GoalGridParams:
    return GoalGridParams(max_steps_in_episode=3 * self.size)

  def validate_params(self, params: GoalGridParams) -> None:
    super().validate_params(params)
    base.check_param_range("slip_prob", params.slip_prob, 0.0, 1.0)

  def reset_env(self, key: jax.Array, params: GoalGridParams
                ) -> Tuple[jax.Array, GoalGridState]:
    words = jax.random.bits(key, (2,), jnp.uint32)
    goal_cell = self._targets[words[0] % len(self.targets)]
    # Uniform over the size**2 - 1 cells that are not the goal: skip over its index.
    start = (words[1] % (self.size * self.size - 1)).astype(jnp.int32)
    start = start + (start >= self._cell_index(goal_cell))
    pos = jnp.stack([start // self.size, start % self.size]).astype(jnp.int32)
    state = GoalGridState(pos=pos, goal=goal_cell, time=jnp.zeros((), jnp.int32))
    return self.get_obs(state), state

  def step_env(self, key: jax.Array, state: GoalGridState, action: Any,
               params: GoalGridParams
               ) -> Tuple[jax.Array, GoalGridState, jax.Array, jax.Array, Dict]:
    words = jax.random.bits(key, (2,), jnp.uint32)
    # 24-bit uniform in [0, 1): slip_prob 0 never slips, 1 always does.
    slipped = (words[0] >> 8).astype(jnp.float32) * 2.0**-24 < params.slip_prob
    action = jnp.where(slipped, (words[1] % 4).astype(jnp.int32),
                       jnp.asarray(action, jnp.int32))
    in_range = jnp.logical_and(action >= 0, action < 4)
    move = jnp.where(in_range, self._moves[jnp.clip(action, 0, 3)], 0)
    pos = jnp.clip(state.pos + move, 0, self.size - 1)
    state = state.replace(pos=pos, time=state.time + 1)
    return self.reach_goal_outcome(state, params)

  def is_terminated(self, state: GoalGridState, params: Any) -> jax.Array:
    return jnp.all(state.pos == state.goal)

  def get_obs(self, state: GoalGridState, params: Any = None, key: Any = None
              ) -> jax.Array:
    """[2 * goal_obs_size] float32: agent cell, then goal cell (`encode_goal` each)."""
    return jnp.concatenate([self.encode_goal(state.pos), self.encode_goal(state.goal)])

  def achieved_goal(self, state: GoalGridState) -> jax.Array:
    return state.pos

  def encode_goal(self, cell: jax.Array) -> jax.Array:
    """cell: [..., 2] int (row, col) -> [..., size**2] float32 one-hot, or with
    `observation="coords"` [..., 2] float32 (row, col) scaled to [-1, 1]."""
    if self.observation == "coords":
      return 2.0 * jnp.asarray(cell).astype(jnp.float32) / (self.size - 1) - 1.0
    index = self._cell_index(jnp.asarray(cell))
    return (index[..., None] == jnp.arange(self.size * self.size)).astype(jnp.float32)

  def _cell_index(self, cell: jax.Array) -> jax.Array:
    return cell[..., 0] * self.size + cell[..., 1]
