"""LinearKeyToDoor-v0: a corridor with a key at the start, apples, and a door at the end.

After the linear key-to-door of COCOA (Meulemans et al., "Would I have gotten that
reward? Long-term credit assignment by counterfactual contribution analysis", NeurIPS
2023, arXiv 2306.16803), built from the paper's description before their code was read.
**It is not COCOA's corridor**; `ConveyorTreasure-v0` (`credit_jax/envs/conveyor_treasure.py`)
is, read from their code. Kept for the results that used it. How it differs from theirs:
  * the apple layout is redrawn every episode (from the reset key); theirs is one fixed
    layout (NumPy seed 2022) for every episode;
  * an apple's value is a function of the layout seed, so every episode of one reset (a
    GRPO group) sees the same apple values and a group baseline cancels them exactly;
    theirs draws the value when the apple is eaten, from the step's key;
  * the observation is [content 6, key flag 1, t/L] with contents numbered (empty, apple
    A, apple B, key, door, treasure); theirs is [t/L, content 6, keys one-hot 2] numbered
    (empty, left, right, door, key, treasure).
The treasure, the reward scale 23 / L, the actions and the episode length are the same.

The agent walks a corridor of
`length` (L) cells one cell per step, whatever it does: at step t it stands on cell t,
and the episode terminates after L steps. Cells:

  0           the key. Action PICK_KEY (0) picks it up: the **pivotal step**, the one
              decision whose consequence shows only at the end.
  1 .. L-3    each holds an apple with probability `params.apple_prob` (default 0.8),
              of one of two kinds (each with probability 1/2). Eating needs the matching
              action (EAT_A = 1 or EAT_B = 2) and pays `reward_scale` times a value
              drawn per apple: `apple_low` or `apple_high` (0.1 or 0.9, each 1/2).
  L-2         the door. Action OPEN (3) opens it, but only when the key is held.
  L-1         the treasure room: if the door was opened the treasure is collected here
              (whatever the action) for `reward_scale * treasure_reward`.
Every other action at a cell does nothing. With the paper's scaling the default
`reward_scale` is 23 / L, so the apples' total keeps its size as L grows; the treasure
(0.2 x 23/L) is small next to it (the apples of an eating policy sum to about
0.8 * (L - 3) * 0.5 * 23 / L, ~9), and so is the variance the apples put into the return.

Success is the treasure, `info["success"]`, never a positive return (apples are
positive). A random policy (uniform over the 4 actions) has treasure rate exactly 1/16
at every L (1/4 for the key times 1/4 for the door) and apple rate 1/4;
`random_success`, `expected_return` give these and the returns of the optimal and of the
key-skipping policy over the layout distribution.

Observation (float32, `[8]`): `[0:6]` one-hot of the current cell's content (0 empty, 1
apple A, 2 apple B, 3 key, 4 door, 5 treasure: the treasure room after the door opened),
`[6]` 1.0 when the key is held, `[7]` the time feature `t / L`. The state is Markov in
the observation, so a memoryless policy can be optimal; the difficulty is credit: the
key's effect arrives L - 1 steps later, under the apples' rewards.

The layout is a function of a per-episode 32-bit seed (`credit_jax/envs/hashing.py`): cell
c's content and value come from `mix32(seed, c)` (top 24 bits: apple or not; bit 0: its
kind; bit 1: its value), so a reset costs O(1) whatever L. Over a uniform seed each cell
is an apple with probability `apple_prob` up to 2**-24, and its kind and value are exact
fair coins independent of that.

info: "pivotal" (bool, the key step, t = 0), "correct_action" (int32, the action success
needs at this step: PICK_KEY at the key, OPEN at the door, -1 elsewhere), "correct"
(bool, that action was taken), "success" (bool, the treasure was collected this step),
"apple" (bool, an apple was eaten this step), "apple_available" (bool, this cell held an
apple), "apple_reward" (float32, what the apple paid). Per episode, treasure rate = any
"success"; apple rate = eaten / available apples. `oracle(state)` and `layout(state)`
give the whole episode's ground truth from any of its states.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment

from credit_jax.envs import base, hashing

PICK_KEY, EAT_A, EAT_B, OPEN = 0, 1, 2, 3
EMPTY, APPLE_A, APPLE_B, KEY, DOOR, TREASURE = 0, 1, 2, 3, 4, 5
NUM_CONTENTS = 6
PAPER_LENGTH = 23   # the paper's shortest corridor; the default reward_scale is 23 / L


@struct.dataclass
class LinearKeyToDoorState(environment.EnvState):
  time: jax.Array       # [] int32  steps taken = the agent's cell
  seed: jax.Array       # [] uint32 this episode's layout seed
  has_key: jax.Array    # [] bool   the key was picked up
  door_open: jax.Array  # [] bool   the door was opened


@struct.dataclass
class LinearKeyToDoorParams(environment.EnvParams):
  apple_prob: float = 0.8        # probability that a middle cell holds an apple
  apple_low: float = 0.1         # an apple's value, one of two equally likely
  apple_high: float = 0.9        # ... the other
  treasure_reward: float = 0.2   # the treasure's value
  reward_scale: float = 1.0      # every reward's factor; make() sets 23 / L
  max_steps_in_episode: int = 23  # time limit; make() sets it to L


class Corridor(base.CreditEnv):
  """What the two corridors share (this one and `conveyor_treasure.ConveyorTreasure`):
  the walk, the actions, the transition at a cell, the oracle and the exact returns.

  A subclass sets `CONTENTS` (its codes of apple A, apple B, key, door, treasure), `length`,
  and `expected_apples(params)`, the expected apple reward of a policy that eats every
  apple. Its state has `time`, `has_key` and `door_open`; its params `treasure_reward`
  and `reward_scale`.
  """

  num_actions = 4
  CONTENTS: Tuple[int, int, int, int, int]
  length: int

  def validate_params(self, params) -> None:
    """The base checks, and every reward parameter a finite number (any sign)."""
    super().validate_params(params)
    for name in ("apple_low", "apple_high", "treasure_reward", "reward_scale"):
      base.check_param_range(name, getattr(params, name), -float("inf"))

  def corridor_step(self, state, action: jax.Array, content: jax.Array,
                    value: jax.Array, params) -> Tuple[Any, jax.Array, Dict]:
    """(next state, reward [] float32, info) of `action` ([] int32) on the current cell
    holding `content` ([] int32), whose apple pays `value` ([] float32, scaled)."""
    apple_a, apple_b, key, door, treasure_code = self.CONTENTS
    t = state.time
    picked = (content == key) & (action == PICK_KEY)
    eaten = ((content == apple_a) & (action == EAT_A)) | \
        ((content == apple_b) & (action == EAT_B))
    opened = (content == door) & (action == OPEN) & state.has_key
    treasure = content == treasure_code
    apple_r = jnp.where(eaten, value, 0.0).astype(jnp.float32)
    reward = apple_r + jnp.where(treasure, params.treasure_reward * params.reward_scale,
                                 0.0).astype(jnp.float32)
    needed = jnp.where(t == 0, PICK_KEY, jnp.where(t == self.length - 2, OPEN, -1))
    state = state.replace(time=t + 1, has_key=state.has_key | picked,
                          door_open=state.door_open | opened)
    info = {"pivotal": t == 0, "correct_action": needed.astype(jnp.int32),
            "correct": (needed >= 0) & (action == needed), "success": treasure,
            "apple": eaten, "apple_available": (content == apple_a) | (content == apple_b),
            "apple_reward": apple_r}
    return state, reward.astype(jnp.float32), info

  def is_terminated(self, state, params: Any) -> jax.Array:
    return state.time >= self.length

  def oracle(self, state) -> Tuple[jax.Array, jax.Array]:
    """pivotal: [L] bool (the key step only); correct_actions: [L] int32, the action
    success needs (PICK_KEY at 0, OPEN at L-2, -1 elsewhere)."""
    del state   # the key and the door are at fixed cells
    steps = jnp.arange(self.length)
    needed = jnp.where(steps == 0, PICK_KEY, jnp.where(steps == self.length - 2, OPEN, -1))
    return steps == 0, needed.astype(jnp.int32)

  def random_success(self) -> float:
    """Treasure rate of a policy uniform over the 4 actions: 1/16 at every L."""
    return 1.0 / 16.0

  def expected_apples(self, params) -> float:
    raise NotImplementedError

  def expected_return(self, policy: str, params: Any = None) -> float:
    """Exact expected episode return (host float) of "optimal" (key, every apple, door),
    "skip_key" (every apple, no key: no treasure) or "random" (uniform actions): the
    apples `expected_apples(params)` for an eater (a random policy eats each with
    probability 1/4), the treasure `reward_scale * treasure_reward` times 1, 0, 1/16."""
    if params is None:
      params = self.default_params
    apples = self.expected_apples(params)
    treasure = float(params.treasure_reward) * float(params.reward_scale)
    table = {"optimal": apples + treasure, "skip_key": apples,
             "random": apples / 4.0 + treasure / 16.0}
    if policy not in table:
      raise ValueError(f"policy must be one of {sorted(table)}, got {policy!r}")
    return table[policy]


class LinearKeyToDoor(Corridor):
  """LinearKeyToDoor-v0. See the module docstring for the task, observation and info."""

  name = "LinearKeyToDoor-v0"
  deterministic_transitions = True  # step_env ignores its key; the layout is per episode
  CONTENTS = (APPLE_A, APPLE_B, KEY, DOOR, TREASURE)

  def __init__(self, length: int = 103):
    super().__init__()
    self.length = base.check_int("length", length, minimum=3, maximum=base.MAX_STEPS)
    self.horizon = self.length
    self.obs_shape = (NUM_CONTENTS + 2,)

  # The observation's discrete parts (content one-hot, key flag), for table policies.
  onehot_groups = ((0, NUM_CONTENTS), (NUM_CONTENTS, NUM_CONTENTS + 1))

  @property
  def default_params(self) -> LinearKeyToDoorParams:
    return LinearKeyToDoorParams(reward_scale=PAPER_LENGTH / self.length,
                                 max_steps_in_episode=self.length)

  def validate_params(self, params: LinearKeyToDoorParams) -> None:
    super().validate_params(params)
    base.check_param_range("apple_prob", params.apple_prob, 0.0, 1.0)

  def reset_env(self, key: jax.Array, params: LinearKeyToDoorParams
                ) -> Tuple[jax.Array, LinearKeyToDoorState]:
    state = LinearKeyToDoorState(
        time=jnp.zeros((), jnp.int32), seed=jax.random.bits(key, (), jnp.uint32),
        has_key=jnp.array(False), door_open=jnp.array(False))
    return self.get_obs(state, params), state

  def _cell(self, state: LinearKeyToDoorState, cell: jax.Array, params
            ) -> Tuple[jax.Array, jax.Array]:
    """(content [] int32, apple value [] float32, scaled) of `cell` (any shape)."""
    cell = jnp.asarray(cell, jnp.int32)
    h = hashing.mix32(state.seed, cell)
    u = ((h >> 8).astype(jnp.float32) + 0.5) / float(1 << 24)
    middle = (cell >= 1) & (cell <= self.length - 3)
    apple = middle & (u < params.apple_prob)
    kind = jnp.where((h & 1) == 0, APPLE_A, APPLE_B)
    content = jnp.where(apple, kind, EMPTY)
    content = jnp.where(cell == 0, KEY, content)
    content = jnp.where(cell == self.length - 2, DOOR, content)
    content = jnp.where((cell == self.length - 1) & state.door_open, TREASURE, content)
    value = jnp.where(((h >> 1) & 1) == 0, params.apple_low, params.apple_high)
    value = jnp.where(apple, value * params.reward_scale, 0.0)
    return content.astype(jnp.int32), value.astype(jnp.float32)

  def step_env(self, key: jax.Array, state: LinearKeyToDoorState, action: Any,
               params: LinearKeyToDoorParams
               ) -> Tuple[jax.Array, LinearKeyToDoorState, jax.Array, jax.Array, Dict]:
    del key  # Deterministic transitions (see deterministic_transitions).
    t = state.time
    action = jnp.asarray(action, jnp.int32)
    content, value = self._cell(state, t, params)
    state, reward, info = self.corridor_step(state, action, content, value, params)
    return (self.get_obs(state, params), state, reward,
            self.is_terminated(state, params), info)

  def get_obs(self, state: LinearKeyToDoorState, params: Any = None, key: Any = None
              ) -> jax.Array:
    """[8] float32 observation of an unbatched state (layout in the module doc)."""
    if params is None:
      params = self.default_params
    content, _ = self._cell(state, state.time, params)
    content = jnp.where(state.time >= self.length, EMPTY, content)
    onehot = (jnp.arange(NUM_CONTENTS) == content).astype(jnp.float32)
    return jnp.concatenate([onehot, state.has_key.astype(jnp.float32)[None],
                            (state.time.astype(jnp.float32) / self.length)[None]])

  def layout(self, state: LinearKeyToDoorState, params: Any = None
             ) -> Tuple[jax.Array, jax.Array]:
    """The episode's corridor from any of its states (unbatched).

    Returns:
      contents: [L] int32, each cell's content at the start (the last cell EMPTY: the
        treasure appears only once the door is open).
      values: [L] float32, what eating each cell's apple pays (reward_scale included;
        0 where there is no apple).
    """
    if params is None:
      params = self.default_params
    start = state.replace(door_open=jnp.array(False))
    return self._cell(start, jnp.arange(self.length), params)

  def correct_action(self, state: LinearKeyToDoorState) -> jax.Array:
    """[] int32: the action the optimal policy takes now (the key, an apple's kind, the
    door; PICK_KEY where nothing matters), from the state (not only the observation)."""
    content, _ = self._cell(state, state.time, self.default_params)
    return jnp.select([content == APPLE_A, content == APPLE_B, content == DOOR],
                      [EAT_A, EAT_B, OPEN], PICK_KEY).astype(jnp.int32)

  def expected_apples(self, params) -> float:
    """Expected apple reward of an eater over layouts: n p v s, with n = L - 3 middle
    cells, p = apple_prob, v = (apple_low + apple_high) / 2, s = reward_scale."""
    return (self.length - 3) * float(params.apple_prob) * 0.5 * (
        float(params.apple_low) + float(params.apple_high)) * float(params.reward_scale)
