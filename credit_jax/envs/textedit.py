"""TextEdit-v0: a tiny editor whose goal is a target buffer (the agentic-coding analogue).

The buffer holds up to `buffer_len` (L) tokens from a vocabulary of `vocab_size` (V);
unused slots hold `PAD` (-1). A cursor sits between tokens, in `[0, length]`. Actions:

  0 `LEFT`, 1 `RIGHT`    move the cursor (no-op at either end);
  2 `DELETE`             backspace: remove the token before the cursor (no-op at 0);
  3 `SUBMIT`             end the episode; reward 1.0 iff buffer == goal, else 0.0;
  4 + v (`WRITE` + v)    insert token v at the cursor and move past it (no-op when full).

Each episode starts from `start_len` uniform tokens with the cursor at 0; the goal is
the start with `num_edits` distinct positions changed to a different token, so an editor
must move, delete and write to reach it. With `goal_edits="any"` the goal is instead the
start after `num_edits` random edits, each a substitution, an insertion (when there is
room) or a deletion at a uniform position (a goal equal to the start falls back to the
substitution goal), so buffers that random editing ends on, which is where hindsight
relabeling takes its goals, are goals the task itself poses. `goal_edits="upto"` draws
the number of such edits uniformly from 1..num_edits. `goal_edits="all"` poses every
buffer (any length 0..L) other than the start as a goal, uniformly (`num_edits` unused;
the analogue of GoalGrid's `targets="all"`), so every buffer an episode can end on is a
task goal. (Tokens come from 32-bit words modulo V: exact for V a power of two, else off
uniform by < V / 2**32 relative; the same holds for the edit count and the "all" goal.)
Submitting terminates; otherwise the time limit `params.max_steps_in_episode` (default
4 * L) truncates with reward 0.

Observation (float32, `[L*V + (L+1) + L*V]`): one-hot buffer (PAD rows all zero), one-hot
cursor, one-hot goal buffer (the goal part). Goal API (see `goal.py`): the achieved goal
is the buffer, `[L]` int32 with PAD; the goal is checked on submit steps only, so the
achieved goal of an episode is the buffer at submit or at the horizon.

Actions are cast to int32; an action outside `[0, 4 + V)` is a no-op, so it can never
submit or produce a success by itself.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment

from credit_jax.envs import base, goal

PAD = -1
_GOAL_EDITS = ("substitute", "any", "upto", "all")
LEFT, RIGHT, DELETE, SUBMIT, WRITE = 0, 1, 2, 3, 4


@struct.dataclass
class TextEditState(environment.EnvState):
  buffer: jax.Array     # [L] int32  tokens in [0, V), PAD after `length`
  length: jax.Array     # [] int32   number of tokens in the buffer
  cursor: jax.Array     # [] int32   in [0, length]
  goal: jax.Array       # [L] int32  target buffer, PAD-padded
  submitted: jax.Array  # [] bool    the last action was SUBMIT
  time: jax.Array       # [] int32   steps taken in this episode


@struct.dataclass
class TextEditParams(environment.EnvParams):
  max_steps_in_episode: int = 32  # time limit; make() sets it to 4 * buffer_len


class TextEdit(goal.GoalEnvMixin, base.CreditEnv):
  """TextEdit-v0. See the module docstring."""

  name = "TextEdit-v0"
  deterministic_transitions = True  # step_env ignores its key

  def __init__(self, buffer_len: int = 8, vocab_size: int = 4, start_len: int = 6,
               num_edits: int = 2, goal_edits: str = "substitute"):
    super().__init__()
    if goal_edits not in _GOAL_EDITS:
      raise ValueError(f"goal_edits must be one of {_GOAL_EDITS}, got {goal_edits!r}")
    self.goal_edits = goal_edits
    self.buffer_len = base.check_int("buffer_len", buffer_len, minimum=1,
                                     maximum=base.MAX_STEPS // 4)  # limit 4 * len
    self.vocab_size = base.check_int("vocab_size", vocab_size, minimum=2)
    self.start_len = base.check_int("start_len", start_len, minimum=0,
                                    maximum=self.buffer_len)
    self.num_edits = base.check_int("num_edits", num_edits, minimum=0,
                                    maximum=self.start_len)
    # "all": buffers are numbered by length, then as base-V numbers; slot l of
    # `_offsets` is the number of buffers shorter than l (int32 must hold them all).
    self._offsets = [sum(self.vocab_size ** j for j in range(l))
                     for l in range(self.buffer_len + 2)]
    if goal_edits == "all" and self._offsets[-1] >= 2 ** 31:
      raise ValueError(f"goal_edits='all' needs fewer than 2**31 buffers; buffer_len="
                       f"{self.buffer_len}, vocab_size={self.vocab_size} has "
                       f"{self._offsets[-1]}")
    self.goal_shape = (self.buffer_len,)
    self.goal_obs_size = self.buffer_len * self.vocab_size
    self.obs_shape = (2 * self.goal_obs_size + self.buffer_len + 1,)

  @property
  def num_actions(self) -> int:
    return WRITE + self.vocab_size

  @property
  def default_params(self) -> TextEditParams:
    return TextEditParams(max_steps_in_episode=4 * self.buffer_len)

  def reset_env(self, key: jax.Array, params: TextEditParams
                ) -> Tuple[jax.Array, TextEditState]:
    # One call of the bit generator (gymnax runs reset_env on every step): L words
    # for the tokens, start_len to rank the positions, num_edits for the new tokens
    # (and 3 per edit for goal_edits="any", one more for "upto" and "all").
    n_len, n_start = self.buffer_len, self.start_len
    n_any = 3 * self.num_edits if self.goal_edits in ("any", "upto") else 0
    n_extra = 1 if self.goal_edits in ("upto", "all") else 0
    words = jax.random.bits(key, (n_len + n_start + self.num_edits + n_any + n_extra,),
                            jnp.uint32)
    slots = jnp.arange(n_len)
    tokens = (words[:n_len] % self.vocab_size).astype(jnp.int32)
    buffer = jnp.where(slots < n_start, tokens, PAD)
    target = buffer
    if self.num_edits:
      # The smallest random ranks pick distinct positions (a stable sort breaks ties).
      where = jnp.argsort(words[n_len:n_len + n_start])[:self.num_edits]
      # A nonzero shift mod V makes every edited token differ from the start.
      shift = 1 + (words[n_len + n_start:n_len + n_start + self.num_edits]
                   % (self.vocab_size - 1)).astype(jnp.int32)
      target = buffer.at[where].set((buffer[where] + shift) % self.vocab_size)
    if n_any:
      # "upto": edits past the drawn count (1..num_edits) are skipped.
      count = (1 + words[-1] % self.num_edits if n_extra else self.num_edits)
      edit_words = words[-n_any - n_extra:len(words) - n_extra]
      edited = self._random_edits(buffer, edit_words.reshape(self.num_edits, 3), count)
      target = jnp.where(jnp.all(edited == buffer), target, edited)
    if self.goal_edits == "all":
      target = self._other_buffer(buffer, words[-1])
    state = TextEditState(buffer=buffer, length=jnp.asarray(n_start, jnp.int32),
                          cursor=jnp.zeros((), jnp.int32), goal=target,
                          submitted=jnp.array(False), time=jnp.zeros((), jnp.int32))
    return self.get_obs(state), state

  def _other_buffer(self, buffer: jax.Array, word: jax.Array) -> jax.Array:
    """buffer: [L] int32 (PAD-padded); word: [] uint32 -> [L] int32, a buffer other
    than `buffer`, uniform over all buffers of length 0..L (for V a power of two, the
    count not a power of two: off uniform by < count / 2**32 relative)."""
    v, n_len = self.vocab_size, self.buffer_len
    offsets = jnp.asarray(self._offsets, jnp.int32)                    # [L + 2]
    slots = jnp.arange(n_len)
    length = jnp.sum(buffer != PAD)
    # Buffer index: shorter buffers first, then the tokens as a base-V number.
    place = jnp.where(slots < length, v ** jnp.maximum(length - 1 - slots, 0), 0)
    own = offsets[length] + jnp.sum(jnp.where(slots < length, buffer, 0) * place)
    # Uniform over the other buffers: skip over the start's own index.
    index = (word % jnp.uint32(self._offsets[-1] - 1)).astype(jnp.int32)
    index = index + (index >= own)
    new_len = jnp.sum(index >= offsets[1:n_len + 1])
    rank = index - offsets[new_len]
    place = v ** jnp.maximum(new_len - 1 - slots, 0)
    return jnp.where(slots < new_len, (rank // place) % v, PAD).astype(jnp.int32)

  def _random_edits(self, buffer: jax.Array, words: jax.Array, count: Any = None
                    ) -> jax.Array:
    """buffer: [L] int32 (PAD-padded); words: [num_edits, 3] uint32 (kind, position,
    token); count: [] int (None: all) -> [L] int32, the buffer after the first `count`
    of those edits."""
    slots = jnp.arange(self.buffer_len)
    for i, (kind_word, pos_word, token_word) in enumerate(words):
      before = buffer
      length = jnp.sum(buffer != PAD)
      # 0 substitute, 1 insert, 2 delete; an impossible kind falls back to a possible one.
      kind = (kind_word % 3).astype(jnp.int32)
      kind = jnp.where((kind == 1) & (length >= self.buffer_len), 0, kind)
      kind = jnp.where(length == 0, 1, kind)
      pos = (pos_word % (jnp.maximum(length, 1) + (kind == 1))).astype(jnp.int32)
      token = (token_word % self.vocab_size).astype(jnp.int32)
      shift = 1 + (token_word % (self.vocab_size - 1)).astype(jnp.int32)
      substituted = buffer.at[pos].set((buffer[pos] + shift) % self.vocab_size)
      inserted = jnp.where(slots < pos, buffer,
                           jnp.where(slots == pos, token, jnp.roll(buffer, 1)))
      shifted = jnp.concatenate([buffer[1:], jnp.full((1,), PAD, buffer.dtype)])
      deleted = jnp.where(slots < pos, buffer, shifted)
      buffer = jnp.where(kind == 0, substituted, jnp.where(kind == 1, inserted, deleted))
      if count is not None:
        buffer = jnp.where(i < count, buffer, before)
    return buffer

  def step_env(self, key: jax.Array, state: TextEditState, action: Any,
               params: TextEditParams
               ) -> Tuple[jax.Array, TextEditState, jax.Array, jax.Array, Dict]:
    del key  # Deterministic transitions (see deterministic_transitions).
    action = jnp.asarray(action, jnp.int32)
    buf, length, cursor = state.buffer, state.length, state.cursor
    slots = jnp.arange(self.buffer_len)
    token = action - WRITE
    write = (action >= WRITE) & (token < self.vocab_size) & (length < self.buffer_len)
    delete = (action == DELETE) & (cursor > 0)
    left = (action == LEFT) & (cursor > 0)
    right = (action == RIGHT) & (cursor < length)
    # Insert: slots after the cursor take their left neighbour (slot 0 never does).
    inserted = jnp.where(slots < cursor, buf,
                         jnp.where(slots == cursor, token, jnp.roll(buf, 1)))
    # Backspace: slots from cursor - 1 on take their right neighbour, the last gets PAD.
    shifted = jnp.concatenate([buf[1:], jnp.full((1,), PAD, buf.dtype)])
    deleted = jnp.where(slots < cursor - 1, buf, shifted)
    buf = jnp.where(write, inserted, jnp.where(delete, deleted, buf))
    up = write.astype(jnp.int32) + right.astype(jnp.int32)
    down = delete.astype(jnp.int32) + left.astype(jnp.int32)
    state = state.replace(
        buffer=buf,
        length=length + write.astype(jnp.int32) - delete.astype(jnp.int32),
        cursor=cursor + up - down,
        submitted=action == SUBMIT,
        time=state.time + 1)
    terminated = self.is_terminated(state, params)
    reward = self.goal_reward(buf, state.goal) * terminated
    info = {"achieved_goal": buf, "goal_checked": terminated}
    return self.get_obs(state), state, reward, terminated, info

  def is_terminated(self, state: TextEditState, params: Any) -> jax.Array:
    return state.submitted

  def get_obs(self, state: TextEditState, params: Any = None, key: Any = None
              ) -> jax.Array:
    """[2*L*V + L + 1] float32: one-hot buffer, one-hot cursor, one-hot goal."""
    cursor = (jnp.arange(self.buffer_len + 1) == state.cursor).astype(jnp.float32)
    return jnp.concatenate([self.encode_goal(state.buffer), cursor,
                            self.encode_goal(state.goal)])

  def achieved_goal(self, state: TextEditState) -> jax.Array:
    return state.buffer

  def encode_goal(self, tokens: jax.Array) -> jax.Array:
    """tokens: [..., L] int (PAD allowed) -> [..., L*V] float32 one-hot (PAD: zeros)."""
    tokens = jnp.asarray(tokens)
    onehot = tokens[..., None] == jnp.arange(self.vocab_size)
    return onehot.reshape(tokens.shape[:-1] + (self.goal_obs_size,)).astype(
        jnp.float32)
