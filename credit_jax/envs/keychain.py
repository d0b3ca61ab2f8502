"""KeyChain-v0: a credit-assignment probe with a known answer.

An episode lasts exactly `horizon` (T) steps. `num_pivotal` (k) of them are pivotal: at
a pivotal step the right action, one of `num_actions` (A), is named by a cue; every other
step is a distractor whose action has no effect. The single reward, 1.0 or 0.0, comes at
the last step and is 1.0 iff every pivotal action was right. A policy that ignores the
cues therefore succeeds with probability exactly `(1/A)^k`: difficulty is a dial, and
the environment knows which steps deserved the credit.

Observation (float32, `[A + 2]`):
  `[0:A]`  one-hot cue: the correct action of the pivotal step `cue_delay` steps ahead
           (with `cue_delay=0`, of the current step); all zeros when there is none.
  `[A]`    1.0 when the current step is pivotal.
  `[A+1]`  time feature `t / T`.
With `cue_delay > 0` the cue is shown only `cue_delay` steps before its pivotal step,
never at it, so acting right needs memory.

Pivotal positions (`positions=`):
  "random" (default): drawn per episode, one uniformly inside each of k equal segments of
     the steps `[cue_delay, T)` (a stratified draw: O(k) per reset, spread over the
     whole episode, and every step of `[cue_delay, T)` can be pivotal);
  "fixed": the centres of those segments, the same in every episode.
Cues are drawn uniformly per episode. A reset spends one random 32-bit word per pivotal
step (gymnax computes a reset on every step, and the bit generator is its main cost):
16 bits pick the cue, reduced modulo A (exact when A is a power of two, else each cue's
probability is off by less than A / 2**16 relative), and 16 bits the offset inside the
segment by multiply-shift (off by less than segment length / 2**16 relative). Ranges
above 2**16 fall back to a full word each. The random-policy success rate `(1/A)^k`
holds exactly for any cue distribution.

Episode end: reaching step T is a **termination** (the task is over and its reward
given; nothing to bootstrap). `params.max_steps_in_episode` (default T) is a time limit
that can only cut an episode short, as a truncation with no reward.

Oracle: `info["pivotal"]` (bool, the step just taken was pivotal),
`info["correct_action"]` (int32, its right action, -1 at distractor steps) and
`info["correct"]` (bool, pivotal and the action taken was right); `oracle(state)` gives
the whole episode's mask and answers. `oracle_feature(state)` ([2] float32, jittable) is
what an oracle-state critic may see of the hidden state (never the actor): whether every
pivotal step so far was answered right, and the fraction of pivotal steps still ahead
(see `credit_jax/algos/ppo_critics.py`).

Actions are cast to int32. An action outside `[0, A)` (possible under jit, where nothing
can raise) is a wrong answer at a pivotal step and has no effect elsewhere: it can never
produce a success.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from credit_jax.envs import base

POSITION_MODES = ("random", "fixed")


@struct.dataclass
class KeyChainState(environment.EnvState):
  positions: jax.Array    # [k] int32  pivotal step indices, ascending, in [cue_delay, T)
  cues: jax.Array         # [k] int32  correct action at each pivotal step, in [0, A)
  all_correct: jax.Array  # [] bool    every pivotal step so far was answered right
  time: jax.Array         # [] int32   steps taken in this episode


@struct.dataclass
class KeyChainParams(environment.EnvParams):
  max_steps_in_episode: int = 100  # time limit; make() sets it to the horizon


class KeyChain(base.CreditEnv):
  """KeyChain-v0. See the module docstring for the task, observation and oracle."""

  deterministic_transitions = True  # step_env ignores its key

  def __init__(self, horizon: int = 100, num_pivotal: int = 3, num_actions: int = 4,
               cue_delay: int = 0, positions: str = "random"):
    super().__init__()
    self.horizon = base.check_int("horizon", horizon, minimum=1,
                                  maximum=base.MAX_STEPS)
    self.num_pivotal = base.check_int("num_pivotal", num_pivotal, minimum=1,
                                      maximum=self.horizon)
    self._num_actions = base.check_int("num_actions", num_actions, minimum=2)
    self.cue_delay = base.check_int("cue_delay", cue_delay, minimum=0)
    if self.horizon - self.cue_delay < self.num_pivotal:
      raise ValueError(
          f"cue_delay={cue_delay} would show a cue before the episode starts: the "
          f"{num_pivotal} pivotal steps must lie in [cue_delay, horizon) = "
          f"[{cue_delay}, {horizon}), so cue_delay must be <= "
          f"{self.horizon - self.num_pivotal}")
    if positions not in POSITION_MODES:
      raise ValueError(f"positions must be one of {POSITION_MODES}, got {positions!r}")
    self.positions = positions
    # Stratification of [cue_delay, T) into k segments of (nearly) equal length >= 1.
    span = self.horizon - self.cue_delay
    edges = self.cue_delay + (np.arange(self.num_pivotal + 1) * span) // self.num_pivotal
    self._seg_start = jnp.asarray(edges[:-1], jnp.int32)
    self._seg_len = jnp.asarray(edges[1:] - edges[:-1], jnp.uint32)
    self._fixed_positions = jnp.asarray(
        edges[:-1] + (edges[1:] - edges[:-1]) // 2, jnp.int32)
    self.obs_shape = (self._num_actions + 2,)
    self._packed_draws = max(int(np.max(edges[1:] - edges[:-1])),
                             self._num_actions) <= 1 << 16

  @property
  def name(self) -> str:
    return "KeyChain-v0"

  @property
  def num_actions(self) -> int:
    return self._num_actions

  @property
  def default_params(self) -> KeyChainParams:
    return KeyChainParams(max_steps_in_episode=self.horizon)

  def reset_env(self, key: jax.Array, params: KeyChainParams
                ) -> Tuple[jax.Array, KeyChainState]:
    # gymnax evaluates reset_env on every step (auto-reset selects it) and the bit
    # generator dominates its cost, so each pivotal step gets one 32-bit word: the low
    # half picks its cue, the high half its position inside its segment.
    k = self.num_pivotal
    if self._packed_draws:
      words = jax.random.bits(key, (k,), jnp.uint32)
      low, high = words & 0xFFFF, words >> 16
    else:
      words = jax.random.bits(key, (2, k), jnp.uint32)
      low, high = words[0], words[1]
    cues = (low % self._num_actions).astype(jnp.int32)
    if self.positions == "fixed":
      positions = self._fixed_positions
    elif self._packed_draws:
      positions = self._seg_start + ((high * self._seg_len) >> 16).astype(jnp.int32)
    else:
      positions = self._seg_start + (high % self._seg_len).astype(jnp.int32)
    state = KeyChainState(positions=positions, cues=cues,
                          all_correct=jnp.array(True),
                          time=jnp.zeros((), jnp.int32))
    return self.get_obs(state), state

  def step_env(self, key: jax.Array, state: KeyChainState, action: Any,
               params: KeyChainParams
               ) -> Tuple[jax.Array, KeyChainState, jax.Array, jax.Array, Dict]:
    del key  # Deterministic transitions (see deterministic_transitions).
    pivotal, correct_action = self._answer_at(state, state.time)
    correct = jnp.logical_and(pivotal, jnp.asarray(action, jnp.int32) == correct_action)
    all_correct = jnp.logical_and(state.all_correct,
                                  jnp.logical_or(correct, jnp.logical_not(pivotal)))
    state = state.replace(all_correct=all_correct, time=state.time + 1)
    terminated = self.is_terminated(state, params)
    reward = jnp.logical_and(terminated, all_correct).astype(jnp.float32)
    info = {"pivotal": pivotal, "correct_action": correct_action, "correct": correct}
    return self.get_obs(state), state, reward, terminated, info

  def is_terminated(self, state: KeyChainState, params: Any) -> jax.Array:
    return state.time >= self.horizon

  def get_obs(self, state: KeyChainState, params: Any = None, key: Any = None
              ) -> jax.Array:
    """[A + 2] float32 observation of an unbatched state (layout in the module doc)."""
    pivotal, _ = self._answer_at(state, state.time)
    has_cue, cue = self._answer_at(state, state.time + self.cue_delay)
    cue_onehot = jnp.logical_and(jnp.arange(self._num_actions) == cue, has_cue)
    extra = jnp.stack([pivotal.astype(jnp.float32),
                       state.time.astype(jnp.float32) / self.horizon])
    return jnp.concatenate([cue_onehot.astype(jnp.float32), extra])

  def _answer_at(self, state: KeyChainState, t: jax.Array
                 ) -> Tuple[jax.Array, jax.Array]:
    """([] bool, [] int32): whether step t is pivotal, and its answer (-1 if not)."""
    match = state.positions == t
    answer = jnp.sum(jnp.where(match, state.cues + 1, 0)) - 1
    return jnp.any(match), answer

  def correct_action(self, state: KeyChainState) -> jax.Array:
    """[] int32: the right action at the state's current step; -1 at a distractor."""
    return self._answer_at(state, state.time)[1]

  # Names of `oracle_feature`'s entries, in order.
  ORACLE_FEATURES = ("all_correct", "pivotal_left")

  def oracle_feature(self, state: KeyChainState) -> jax.Array:
    """[2] float32 ground truth about an (unbatched) state, for an oracle-state critic.

    [0] `all_correct`: 1.0 iff every pivotal step taken so far was answered right (1.0 at
        an episode's start; after the last step, 1.0 iff the episode succeeded).
    [1] `pivotal_left`: the fraction of the k pivotal steps not yet taken,
        `#{i : positions[i] >= time} / k` (1.0 at the start, 0.0 after the last step).

    With the observation's time feature these determine the success probability of any
    policy that acts on the current observation alone (`cue_delay = 0`): it is
    `all_correct * q^(k * pivotal_left)`, q its chance of answering one pivotal step
    right. The bit alone would not: with random positions the observation does not say
    whether the pivotal step of the current segment has passed.
    """
    left = jnp.sum(state.positions >= state.time).astype(jnp.float32)
    return jnp.stack([state.all_correct.astype(jnp.float32), left / self.num_pivotal])

  def draw_probabilities(self) -> Tuple[np.ndarray, np.ndarray]:
    """The exact distribution of a reset's draws (host-side NumPy, float64).

    Returns:
      position_probs: [k, T], row i the probability that pivotal step i is at step t
        (zero outside segment i; one entry 1.0 with `positions="fixed"`).
      cue_probs: [A], the probability of each cue (the same for every pivotal step).
    The k positions and the k cues are independent draws. Computed from the bits each
    draw uses (module docstring): uniform up to the stated 2**-16 relative error.
    """
    k, horizon = self.num_pivotal, self.horizon
    starts = np.asarray(self._seg_start, np.int64)
    lengths = np.asarray(self._seg_len, np.int64)
    bits = 16 if self._packed_draws else 32
    position_probs = np.zeros((k, horizon), np.float64)
    for i in range(k):
      if self.positions == "fixed":
        position_probs[i, int(np.asarray(self._fixed_positions)[i])] = 1.0
        continue
      j = np.arange(lengths[i], dtype=np.int64)
      if self._packed_draws:   # offset = (h * L) >> 16: #{h : floor(h L / 2^16) = j}
        counts = -((-(j + 1) << 16) // lengths[i]) + ((-j << 16) // lengths[i])
      else:                    # offset = h % L
        counts = (2 ** 32 - 1 - j) // lengths[i] + 1
      position_probs[i, starts[i]:starts[i] + lengths[i]] = counts / float(2 ** bits)
    c = np.arange(self._num_actions, dtype=np.int64)
    cue_probs = ((2 ** bits - 1 - c) // self._num_actions + 1) / float(2 ** bits)
    return position_probs, cue_probs

  def oracle(self, state: KeyChainState) -> Tuple[jax.Array, jax.Array]:
    """The episode's ground truth, from any state of it (unbatched).

    Returns:
      pivotal: [T] bool, True at the pivotal steps.
      correct_actions: [T] int32, the right action at pivotal steps, -1 elsewhere.
    """
    pivotal = jnp.zeros((self.horizon,), bool).at[state.positions].set(True)
    answers = jnp.full((self.horizon,), -1, jnp.int32).at[state.positions].set(
        state.cues)
    return pivotal, answers
