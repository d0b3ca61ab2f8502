"""ConveyorTreasure-v0: COCOA's linear key-to-door ("treasure conveyor") as its code runs it.

Meulemans et al., "Would I have gotten that reward? Long-term credit assignment by
counterfactual contribution analysis" (NeurIPS 2023, arXiv 2306.16803). Read from their
repository seijin-kobayashi/cocoa (`ccoa/envs/treasure_conveyor.py` with the settings of
`configs/canonical_conveyorlength_performance.py`, one key) and written here; nothing is
copied. A corridor of L cells walked one cell per step whatever the agent does; the
episode is L steps (a termination at step L).

  cell 0        the key. PICK_KEY (0) picks it up: the pivotal step.
  cells 1..L-3  the **fixed** apple layout, the same in every episode: their code draws
                it once, `numpy.random.default_rng(2022).choice([0, 1, 2], size=L - 3,
                p=[0.2, 0.4, 0.4])` (`distractor_prob` 0.8, `random_distractors=False`);
                0 empty, 1 a left apple, 2 a right apple. Stored below as `_LAYOUT` (the
                first 1000 draws; the draw for any L is a prefix of it, so L <= 1003),
                tested equal to a fresh draw (tests/test_conveyor_treasure.py).
  cell L-2      the door. OPEN_DOOR (3) opens it when the key is held.
  cell L-1      the treasure when the door was opened, else empty.
Eating an apple needs the matching action (PICK_LEFT 1 for a left apple, PICK_RIGHT 2 for
a right one) and pays a value **drawn when it is eaten**, from the step's key: 0.1 or 0.9
with probability 1/2 each, times `reward_scale` = 23 / L. So episodes from one reset (a
GRPO group) draw their apple values independently. Standing on the treasure pays 0.2 x
23 / L whatever the action. Other actions do nothing.

Observation (float32, [9], their order): `[0]` t / L; `[1:7]` one-hot of the current
cell's content, in their order EMPTY 0, APPLE_LEFT 1, APPLE_RIGHT 2, DOOR 3, KEY 4,
TREASURE 5; `[7:9]` one-hot of the number of keys held (0 or 1). At t = L (the final
observation) their code indexes the grid at L, which JAX clamps to L - 1: the treasure
cell's content is shown, and so it is here.

How `LinearKeyToDoor-v0` (`credit_jax/envs/linear_keytodoor.py`) differs: it redraws the
layout every episode from a hash of the reset key and ties each apple's value to the
layout, so one reset fixes the apple values of a whole GRPO group and the group baseline
cancels them; its observation orders the parts differently ([content 6, key flag, t/L])
and numbers the contents differently.

Success is the treasure, `info["success"]`. A uniform random policy gets the treasure
with probability exactly 1/16 (key 1/4, door 1/4) and eats each apple with probability
1/4. info: "pivotal" (the key step), "correct_action" (PICK_KEY at 0, OPEN_DOOR at L-2,
-1 elsewhere), "correct", "success", "apple" (an apple eaten this step),
"apple_available", "apple_reward" (what it paid), as LinearKeyToDoor-v0.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from credit_jax.envs import base
from credit_jax.envs.linear_keytodoor import Corridor

PICK_KEY, PICK_LEFT, PICK_RIGHT, OPEN_DOOR = 0, 1, 2, 3   # as LinearKeyToDoor's actions
EMPTY, APPLE_LEFT, APPLE_RIGHT, DOOR, KEY, TREASURE = 0, 1, 2, 3, 4, 5
NUM_CONTENTS = 6
PAPER_LENGTH = 23          # their reward scale is 23 / L
LAYOUT_SEED, DISTRACTOR_PROB = 2022, 0.8

# numpy.random.default_rng(2022).choice([0, 1, 2], size=1000, p=[0.2, 0.4, 0.4]), as
# digits: the contents of cells 1, 2, ... of every corridor.
_LAYOUT = (
    "10202200122111122222102210100101010100211121121022011220222101112111010011211102"
    "22021212220222221122121221220210011022212110222010102012202122212011102122121200"
    "21221221121112211021211211222011111011121212212102112111002212102212021021102222"
    "20222121101020122212212111221121212211210110201121211111101020102211111210001122"
    "11011121220122200221122221222111221110121121211011201102102210011011211122010111"
    "22100221010101012121100202120220012110010200122121200212121200011222222120112202"
    "20112210001210121211102110110011101121211012011220221122121111222211210111112002"
    "20212222101210112112022020021121011220122021222122122011102212202112120221011020"
    "21212112220112112100201200122210022110012001112022200210011121101012112011222120"
    "00211201212212012201201112211211012201211011220001001222012112101022211200221212"
    "21201110212201112211220211022220211120101202112211221112002122212212201222112022"
    "12121210222202110122121212001021222121102012112111022102212020020020021021011202"
    "0111111101221202211212110110111222101102"
)
_MAX_LENGTH = len(_LAYOUT) + 3


def layout_cells(length: int) -> np.ndarray:
  """[L] int32 (host): every cell's content at the start of an episode (door closed)."""
  cells = np.zeros(length, np.int32)
  cells[0] = KEY
  cells[1:length - 2] = np.frombuffer(_LAYOUT[:length - 3].encode(), np.uint8) - ord("0")
  cells[length - 2] = DOOR
  return cells


@struct.dataclass
class ConveyorTreasureState(environment.EnvState):
  time: jax.Array       # [] int32 steps taken = the agent's cell
  has_key: jax.Array    # [] bool  the key was picked up
  door_open: jax.Array  # [] bool  the door was opened


@struct.dataclass
class ConveyorTreasureParams(environment.EnvParams):
  apple_low: float = 0.1         # an eaten apple's value, one of two equally likely
  apple_high: float = 0.9        # ... the other
  treasure_reward: float = 0.2   # the treasure's value
  reward_scale: float = 1.0      # every reward's factor; the default is 23 / L
  max_steps_in_episode: int = 23  # time limit; the default is L


class ConveyorTreasure(Corridor):
  """ConveyorTreasure-v0. See the module docstring."""

  name = "ConveyorTreasure-v0"
  deterministic_transitions = False   # apple values come from the step's key
  CONTENTS = (APPLE_LEFT, APPLE_RIGHT, KEY, DOOR, TREASURE)

  def __init__(self, length: int = 103):
    super().__init__()
    self.length = base.check_int("length", length, minimum=3, maximum=_MAX_LENGTH)
    self.horizon = self.length
    self.obs_shape = (1 + NUM_CONTENTS + 2,)
    self._cells_np = layout_cells(self.length)
    self._cells = jnp.asarray(self._cells_np)

  # The observation's discrete parts (content one-hot, keys one-hot), for table policies.
  onehot_groups = ((1, 1 + NUM_CONTENTS), (1 + NUM_CONTENTS, 3 + NUM_CONTENTS))

  @property
  def default_params(self) -> ConveyorTreasureParams:
    return ConveyorTreasureParams(reward_scale=PAPER_LENGTH / self.length,
                                  max_steps_in_episode=self.length)

  @property
  def cells(self) -> np.ndarray:
    """[L] int32 (host): the layout, `layout_cells(L)` (the same in every episode)."""
    return self._cells_np.copy()

  def reset_env(self, key: jax.Array, params: ConveyorTreasureParams
                ) -> Tuple[jax.Array, ConveyorTreasureState]:
    del key   # the layout is fixed; nothing is drawn at a reset
    state = ConveyorTreasureState(time=jnp.zeros((), jnp.int32),
                                  has_key=jnp.array(False), door_open=jnp.array(False))
    return self.get_obs(state, params), state

  def content_at(self, state: ConveyorTreasureState, cell: jax.Array) -> jax.Array:
    """[] int32: what the agent sees at `cell` (the last cell: the treasure iff the door
    was opened; cells past it show the last one, as their code's clamped index does)."""
    content = self._cells[jnp.minimum(cell, self.length - 1)]
    return jnp.where((cell >= self.length - 1) & state.door_open, TREASURE, content)

  def step_env(self, key: jax.Array, state: ConveyorTreasureState, action: Any,
               params: ConveyorTreasureParams
               ) -> Tuple[jax.Array, ConveyorTreasureState, jax.Array, jax.Array, Dict]:
    action = jnp.asarray(action, jnp.int32)
    high = (jax.random.bits(key, (), jnp.uint32) & 1) == 1    # a fair coin per step
    value = jnp.where(high, params.apple_high, params.apple_low) * params.reward_scale
    state, reward, info = self.corridor_step(state, action, self.content_at(
        state, state.time), value, params)
    return (self.get_obs(state, params), state, reward,
            self.is_terminated(state, params), info)

  def get_obs(self, state: ConveyorTreasureState, params: Any = None, key: Any = None
              ) -> jax.Array:
    """[9] float32 observation of an unbatched state (layout in the module doc)."""
    content = jnp.arange(NUM_CONTENTS) == self.content_at(state, state.time)
    keys = jnp.arange(2) == state.has_key.astype(jnp.int32)
    return jnp.concatenate([(state.time.astype(jnp.float32) / self.length)[None],
                            content.astype(jnp.float32), keys.astype(jnp.float32)])

  def num_apples(self) -> int:
    """Apples in the (fixed) layout."""
    return int(np.sum((self._cells_np == APPLE_LEFT) | (self._cells_np == APPLE_RIGHT)))

  def expected_apples(self, params) -> float:
    """Expected apple reward of an eater: n v s, n apples in the layout,
    v = (apple_low + apple_high) / 2, s = reward_scale."""
    return self.num_apples() * 0.5 * (float(params.apple_low) + float(
        params.apple_high)) * float(params.reward_scale)
