"""KeyChain-v0: a credit-assignment probe with a known answer.

An episode lasts exactly `horizon` (T) steps. `num_pivotal` (k) of them are pivotal: at
a pivotal step the right action, one of `num_actions` (A), is named by a cue; every other
step is a distractor whose action has no effect. The single reward, 1.0 or 0.0, comes at
the last step and is 1.0 iff every pivotal action was right. A policy that ignores the
cues therefore succeeds with probability exactly `(1/A)^k`: difficulty is a dial, and
the environment knows which steps deserved the credit.

Observation (float32, `[A + 2]` with the default switches):
  `[0:A]`  one-hot cue: the cue of the pivotal step `cue_delay` steps ahead
           (with `cue_delay=0`, of the current step); all zeros when there is none.
  `[A]`    1.0 when the current step is pivotal.
  `[A+1]`  time feature `t / T`.
With `cue_delay > 0` the cue is shown only `cue_delay` steps before its pivotal step,
never at it, so acting right needs memory.

Shortcut switches. With their defaults KeyChain is easy in ways that have nothing to do
with the horizon; each switch removes one of those properties, alone or with the others
(defaults keep every earlier result bit-identical):

| switch (default)              | the shortcut it removes                                  |
|-------------------------------|----------------------------------------------------------|
| `pivotal_flag=False` (True)   | the flag input: a pivotal step is known only by its cue   |
| `distractor_cues=True` (False)| zero-feature distractors: every step shows a cue from the |
|                               | same uniform distribution; a distractor's cue and action  |
|                               | have no effect, so steps cannot be told apart by shape    |
| `distinct_rules=True` (False) | one rule for all pivotal steps: pivotal index i answers   |
|                               | `rules[i, cue]` (a permutation per index), so credit that |
|                               | teaches one index does not teach the others               |
| `cues_at_start=True` (False)  | the answer at the decision: all k cues appear only in the |
|                               | first observation (memory across the whole episode)       |
| `pivotal_density=rho` (0: off)| difficulty constant in T: k = ceil(rho T), so random      |
|                               | success (1/A)^k falls with T (overrides `num_pivotal`)    |
| `distractor_reward_std=s` (0) | a clean return: every step's reward gets zero-mean noise  |
|                               | of std s (bsuite umbrella's distractor reward), so the    |
|                               | terminal bit sits under T steps of noise; the noise is a  |
|                               | hash of the episode's seed and the actions so far, so     |
|                               | episodes of one reset (a group) that act differently draw |
|                               | different noise, as bsuite's per-step draws would         |

The credit probe. Two options make a probe whose right answer is linear in the policy's
inputs, so that failing it says something about credit and not about representation:
  `segment_cue_onehot=True` (False): the observation carries one one-hot of the pair
      (segment of the current step, cue shown), `context` [k A], in place of the separate
      `cue` and `index` parts. Under `distinct_rules` the answer `rules[i, c]` is an
      XOR-like function of (i, c) that a policy whose logits are additive in separate
      one-hots of i and c cannot represent in general; on the pair's one-hot it is a table
      lookup, one linear layer. Needs `cue_delay = 0` and no `cues_at_start`.
  `episode_noise_std=sigma` (0: off): reward noise as its own axis, per-step std
      `sigma / sqrt(T)`, so the episode's summed noise has std sigma at every T (the
      same hashed draw as `distractor_reward_std`, which fixes the per-step std instead;
      at most one of the two may be > 0).
The probe of docs/results/probes.md ("credit_probe") is `segment_cue_onehot`,
`distinct_rules`, `distractor_cues`, `pivotal_flag=False`, k fixed (no
`pivotal_density`), with `episode_noise_std` as a separate axis.

Observation layout under the switches (parts in this order, `t/T` always last):
  `context` [kA]    only with `segment_cue_onehot`, in place of `cue` and `index`: row i,
                    column c is 1 when the current step lies in segment i and shows cue
                    c (the `cue` slot's cue, real or fake); zeros where that slot is
                    empty or outside [cue_delay, T).
  `cue` [A]         the per-step cue slot. Without `distractor_cues` as above. With it,
                    every observation holds one cue: the real one where the default
                    would show it, else a fake drawn uniformly (a hash of the
                    episode's seed and t). With `cues_at_start` the slot never holds a
                    real cue (zeros, or only fakes with `distractor_cues`).
  `flag` [1]        only with `pivotal_flag=True`.
  `index` [k]       only with `distinct_rules`: one-hot of the segment the current step
                    lies in (pivotal step i is always in segment i, see positions), shown
                    at every step so it says nothing about whether a step is pivotal; all
                    zeros before `cue_delay` and at t = T.
  `start_cues` [kA] only with `cues_at_start`: at t = 0 row i is the one-hot cue of
                    pivotal step i; zeros at every later step.
  `time` [1]        `t / T`.
`observation_layout` gives the (start, stop) of each part. `cues_at_start` needs
`cue_delay = 0`. Every combination stays solvable by a policy with memory of the
episode (the oracle policy `correct_action(state)` succeeds always); see
`random_success` for a policy that ignores the observation.

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
above 2**16 fall back to a full word each. With `distractor_cues` or reward noise
(`distractor_reward_std` or `episode_noise_std` > 0) the reset draws two more words, the
seeds of the fake cues and of the reward noise (`credit_jax/envs/hashing.py`), and the state is a
`KeyChainProbeState`. The random-policy success rate `(1/A)^k` holds exactly for any
cue distribution.

Episode end: reaching step T is a **termination** (the task is over and its reward
given; nothing to bootstrap). `params.max_steps_in_episode` (default T) is a time limit
that can only cut an episode short, as a truncation with no reward.

Oracle: `info["pivotal"]` (bool, the step just taken was pivotal),
`info["correct_action"]` (int32, its right action, -1 at distractor steps: under
`distinct_rules` the permuted answer, not the cue) and `info["correct"]` (bool, pivotal
and the action taken was right); `oracle(state)` gives the whole episode's mask and
answers. When any switch is off its default, `info["success"]` (bool, this step ended a
successful episode) is reported too: with reward noise a positive return no longer means
success. At the defaults it is left out so default rollouts stay bit-identical (success
is then exactly a positive return). `oracle_feature(state)` ([2] float32, jittable) is
what an oracle-state critic may see of the hidden state (never the actor): whether every
pivotal step so far was answered right, and the fraction of pivotal steps still ahead
(see `credit_jax/algos/ppo_agent.py`).

Actions are cast to int32. An action outside `[0, A)` (possible under jit, where nothing
can raise) is a wrong answer at a pivotal step and has no effect elsewhere: it can never
produce a success.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from credit_jax.envs import base, hashing
from credit_jax.envs import keychain_switches

_POSITION_MODES = ("random", "fixed")


@struct.dataclass
class KeyChainState(environment.EnvState):
  positions: jax.Array    # [k] int32  pivotal step indices, ascending, in [cue_delay, T)
  cues: jax.Array         # [k] int32  cue of each pivotal step, in [0, A)
  all_correct: jax.Array  # [] bool    every pivotal step so far was answered right
  time: jax.Array         # [] int32   steps taken in this episode


@struct.dataclass
class KeyChainProbeState(KeyChainState):
  seeds: jax.Array        # [2] uint32 hash seeds: fake cues; reward noise (walks
                          #     with the actions taken)


@struct.dataclass
class KeyChainParams(environment.EnvParams):
  max_steps_in_episode: int = 100  # time limit; make() sets it to the horizon


class KeyChain(base.CreditEnv):
  """KeyChain-v0. See the module docstring for the task, observation and oracle."""

  name = "KeyChain-v0"
  deterministic_transitions = True  # step_env ignores its key

  def __init__(self, horizon: int = 100, num_pivotal: int = 3, num_actions: int = 4,
               cue_delay: int = 0, positions: str = "random", pivotal_flag: bool = True,
               distractor_cues: bool = False, distinct_rules: bool = False,
               cues_at_start: bool = False, pivotal_density: float = 0.0,
               distractor_reward_std: float = 0.0, rule_seed: int = 0,
               segment_cue_onehot: bool = False, episode_noise_std: float = 0.0):
    super().__init__()
    self.horizon = base.check_int("horizon", horizon, minimum=1,
                                  maximum=base.MAX_STEPS)
    num_pivotal = base.check_int("num_pivotal", num_pivotal, minimum=1)
    self.pivotal_density = base.check_nonnegative("pivotal_density", pivotal_density)
    self.num_pivotal = keychain_switches.num_pivotal_of(self.horizon, num_pivotal,
                                               self.pivotal_density)
    if self.num_pivotal > self.horizon:
      name = "pivotal_density" if self.pivotal_density else "num_pivotal"
      raise ValueError(f"{name} gives k={self.num_pivotal} pivotal steps; k must be <= "
                       f"horizon = {self.horizon}")
    self._num_actions = base.check_int("num_actions", num_actions, minimum=2)
    self.cue_delay = base.check_int("cue_delay", cue_delay, minimum=0)
    if self.horizon - self.cue_delay < self.num_pivotal:
      raise ValueError(
          f"cue_delay={cue_delay} would show a cue before the episode starts: the "
          f"{self.num_pivotal} pivotal steps must lie in [cue_delay, horizon) = "
          f"[{cue_delay}, {horizon}), so cue_delay must be <= "
          f"{self.horizon - self.num_pivotal}")
    if positions not in _POSITION_MODES:
      raise ValueError(f"positions must be one of {_POSITION_MODES}, got {positions!r}")
    self.positions = positions
    self.pivotal_flag = base.check_bool("pivotal_flag", pivotal_flag)
    self.distractor_cues = base.check_bool("distractor_cues", distractor_cues)
    self.distinct_rules = base.check_bool("distinct_rules", distinct_rules)
    self.cues_at_start = base.check_bool("cues_at_start", cues_at_start)
    if self.cues_at_start and self.cue_delay:
      raise ValueError(f"cues_at_start shows every cue at t = 0 and needs cue_delay = 0, "
                       f"got cue_delay={cue_delay}")
    self.distractor_reward_std = base.check_nonnegative("distractor_reward_std",
                                                    distractor_reward_std)
    self.rule_seed = base.check_int("rule_seed", rule_seed, minimum=0)
    self.segment_cue_onehot = base.check_bool("segment_cue_onehot", segment_cue_onehot)
    if self.segment_cue_onehot and (self.cue_delay or self.cues_at_start):
      raise ValueError("segment_cue_onehot shows the current step's (segment, cue) and "
                       f"needs cue_delay = 0 and cues_at_start = False, got cue_delay="
                       f"{cue_delay}, cues_at_start={cues_at_start}")
    self.episode_noise_std = base.check_nonnegative("episode_noise_std", episode_noise_std)
    if self.episode_noise_std > 0.0 and self.distractor_reward_std > 0.0:
      raise ValueError("episode_noise_std and distractor_reward_std both set the reward "
                       "noise; set at most one of them > 0")
    # Per-step std of the reward noise (0: none).
    self._noise_std = self.distractor_reward_std or (
        self.episode_noise_std / math.sqrt(self.horizon))
    # Stratification of [cue_delay, T) into k segments of (nearly) equal length >= 1.
    span = self.horizon - self.cue_delay
    edges = self.cue_delay + (np.arange(self.num_pivotal + 1) * span) // self.num_pivotal
    self._seg_start = jnp.asarray(edges[:-1], jnp.int32)
    self._seg_len = jnp.asarray(edges[1:] - edges[:-1], jnp.uint32)
    self._fixed_positions = jnp.asarray(
        edges[:-1] + (edges[1:] - edges[:-1]) // 2, jnp.int32)
    self._packed_draws = max(int(np.max(edges[1:] - edges[:-1])),
                             self._num_actions) <= 1 << 16
    self._rules_np = keychain_switches.rule_table(self.num_pivotal, self._num_actions,
                                         self.distinct_rules, self.rule_seed)
    self._rules = jnp.asarray(self._rules_np)
    self.observation_layout = keychain_switches.observation_layout(
        self._num_actions, self.num_pivotal, self.pivotal_flag, self.distinct_rules,
        self.cues_at_start, self.segment_cue_onehot)
    self.obs_shape = (self.observation_layout["time"][1],)
    # Seeds are drawn only for the switches that hash per step.
    self._seeded = self.distractor_cues or self._noise_std > 0.0

  @property
  def num_actions(self) -> int:
    return self._num_actions

  @property
  def default_params(self) -> KeyChainParams:
    return KeyChainParams(max_steps_in_episode=self.horizon)

  @property
  def switches(self) -> Dict[str, Any]:
    """{switch: value} of the six shortcut switches (module docstring)."""
    return {name: getattr(self, name) for name in keychain_switches.SWITCHES}

  @property
  def shortcuts_removed(self) -> Tuple[str, ...]:
    """Names of the switches and credit-probe options set away from their default
    (empty: the original probe)."""
    options = {**keychain_switches.SWITCHES, **keychain_switches.PROBE_OPTIONS}
    return tuple(name for name, default in options.items()
                 if getattr(self, name) != default)

  @property
  def onehot_groups(self) -> Tuple[Tuple[int, int], ...]:
    """(start, stop) of each discrete part of the observation (every part but `time`):
    what a table policy (`credit_jax/nets/tabular.py`) indexes by."""
    groups = []
    for name, (start, stop) in self.observation_layout.items():
      if name == "start_cues":   # k one-hots, one per pivotal step
        a = self._num_actions
        groups += [(s, s + a) for s in range(start, stop, a)]
      elif name != "time":
        groups.append((start, stop))
    return tuple(groups)

  @property
  def rules(self) -> np.ndarray:
    """[k, A] int32 (host): `rules[i, c]`, the right action of pivotal index i for cue c
    (the identity in every row unless `distinct_rules`)."""
    return self._rules_np.copy()

  def random_success(self, q: float | None = None) -> float:
    """Exact success probability of a policy that answers each pivotal step right with
    probability q independently (default 1/A: any policy whose action is uniform
    whatever it observes): `q^k`, under every combination of switches, for a time limit
    no shorter than T. The cue distribution does not enter (the answer is matched with
    probability 1/A whatever it is), nor do the fake cues or the reward noise (success
    is the task's, not a positive return)."""
    q = 1.0 / self._num_actions if q is None else float(q)
    return q ** self.num_pivotal

  def reset_env(self, key: jax.Array, params: KeyChainParams
                ) -> Tuple[jax.Array, KeyChainState]:
    # gymnax evaluates reset_env on every step (auto-reset selects it) and the bit
    # generator dominates its cost, so each pivotal step gets one 32-bit word: the low
    # half picks its cue, the high half its position inside its segment.
    k = self.num_pivotal
    extra = 2 if self._seeded else 0
    if self._packed_draws:
      words = jax.random.bits(key, (k + extra,), jnp.uint32)
      low, high = words[:k] & 0xFFFF, words[:k] >> 16
    else:
      words = jax.random.bits(key, (2 * k + extra,), jnp.uint32)
      low, high = words[:k], words[k:2 * k]
    cues = (low % self._num_actions).astype(jnp.int32)
    if self.positions == "fixed":
      positions = self._fixed_positions
    elif self._packed_draws:
      positions = self._seg_start + ((high * self._seg_len) >> 16).astype(jnp.int32)
    else:
      positions = self._seg_start + (high % self._seg_len).astype(jnp.int32)
    fields = dict(positions=positions, cues=cues, all_correct=jnp.array(True),
                  time=jnp.zeros((), jnp.int32))
    if self._seeded:
      state = KeyChainProbeState(**fields, seeds=words[-2:])
    else:
      state = KeyChainState(**fields)
    return self.get_obs(state), state

  def step_env(self, key: jax.Array, state: KeyChainState, action: Any,
               params: KeyChainParams
               ) -> Tuple[jax.Array, KeyChainState, jax.Array, jax.Array, Dict]:
    del key  # Deterministic transitions (see deterministic_transitions).
    t = state.time
    pivotal, correct_action = self._answer_at(state, t)
    correct = jnp.logical_and(pivotal, jnp.asarray(action, jnp.int32) == correct_action)
    all_correct = jnp.logical_and(state.all_correct,
                                  jnp.logical_or(correct, jnp.logical_not(pivotal)))
    state = state.replace(all_correct=all_correct, time=t + 1)
    terminated = self.is_terminated(state, params)
    success = jnp.logical_and(terminated, all_correct)
    reward = success.astype(jnp.float32)
    if self._noise_std > 0.0:
      # The noise seed walks with the actions (a bijection of the seed for each step and
      # action, so every step's noise stays exactly uniform): episodes from one reset that
      # act differently (a GRPO group) draw different noise; the same actions replay it.
      history = hashing.mix32(hashing.mix32(state.seeds[1], t),
                              jnp.asarray(action, jnp.int32))
      state = state.replace(seeds=state.seeds.at[1].set(history))
      reward = reward + np.float32(self._noise_std) * \
          hashing.centred_unit_noise(history, t)
    info = {"pivotal": pivotal, "correct_action": correct_action, "correct": correct}
    if self.shortcuts_removed:
      info["success"] = success
    return self.get_obs(state), state, reward, terminated, info

  def is_terminated(self, state: KeyChainState, params: Any) -> jax.Array:
    return state.time >= self.horizon

  def get_obs(self, state: KeyChainState, params: Any = None, key: Any = None
              ) -> jax.Array:
    """Float32 observation of an unbatched state, `[A + 2]` at the default switches
    (layout in the module doc; `observation_layout` for any switches)."""
    a = self._num_actions
    pivotal, _ = self._answer_at(state, state.time)
    if self.cues_at_start:
      has_cue, cue = jnp.array(False), jnp.int32(-1)
    else:
      has_cue, cue = self._lookup(state, state.cues, state.time + self.cue_delay)
    if self.distractor_cues:   # a fake cue wherever no real one is shown
      fake = ((hashing.mix32(state.seeds[0], state.time) >> 16) % a).astype(jnp.int32)
      cue_onehot = jnp.arange(a) == jnp.where(has_cue, cue, fake)
    else:
      cue_onehot = jnp.logical_and(jnp.arange(a) == cue, has_cue)
    if self.segment_cue_onehot:
      context = self._segment_onehot(state.time)[:, None] * cue_onehot[None, :]
      parts = [context.reshape(-1).astype(jnp.float32)]
    else:
      parts = [cue_onehot.astype(jnp.float32)]
    if self.pivotal_flag:
      parts.append(pivotal.astype(jnp.float32)[None])
    if self.distinct_rules and not self.segment_cue_onehot:
      parts.append(self._segment_onehot(state.time))
    if self.cues_at_start:
      start = jnp.logical_and(state.time == 0,
                              jnp.arange(a)[None, :] == state.cues[:, None])   # [k, A]
      parts.append(start.reshape(-1).astype(jnp.float32))
    parts.append((state.time.astype(jnp.float32) / self.horizon)[None])
    return jnp.concatenate(parts)

  def _segment_onehot(self, t: jax.Array) -> jax.Array:
    """[k] float32 one-hot of the segment holding step t; zeros outside [cue_delay, T)."""
    seg = jnp.sum(t >= self._seg_start) - 1
    inside = jnp.logical_and(t >= self.cue_delay, t < self.horizon)
    return jnp.logical_and(jnp.arange(self.num_pivotal) == seg, inside).astype(jnp.float32)

  def _lookup(self, state: KeyChainState, values: jax.Array, t: jax.Array
              ) -> Tuple[jax.Array, jax.Array]:
    """([] bool, [] int32): whether step t is pivotal, and `values` [k] there (-1 if not)."""
    match = state.positions == t
    answer = jnp.sum(jnp.where(match, values + 1, 0)) - 1
    return jnp.any(match), answer

  def answers(self, state: KeyChainState) -> jax.Array:
    """[k] int32: the right action of each pivotal step (its cue unless distinct_rules)."""
    if not self.distinct_rules:
      return state.cues
    return self._rules[jnp.arange(self.num_pivotal), state.cues]

  def _answer_at(self, state: KeyChainState, t: jax.Array
                 ) -> Tuple[jax.Array, jax.Array]:
    """([] bool, [] int32): whether step t is pivotal, and its answer (-1 if not)."""
    return self._lookup(state, self.answers(state), t)

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
    whether the pivotal step of the current segment has passed. Both entries keep their
    meaning under every switch.
    """
    left = jnp.sum(state.positions >= state.time).astype(jnp.float32)
    return jnp.stack([state.all_correct.astype(jnp.float32), left / self.num_pivotal])

  def draw_probabilities(self) -> Tuple[np.ndarray, np.ndarray]:
    """The exact distribution of a reset's draws (host-side NumPy, float64).

    Returns:
      position_probs: [k, T], row i the probability that pivotal step i is at step t
        (zero outside segment i; one entry 1.0 with `positions="fixed"`).
      cue_probs: [A], the probability of each cue (the same for every pivotal step);
        the answer of pivotal index i is `rules[i, cue]`.
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
      correct_actions: [T] int32, the right action at pivotal steps (under
        `distinct_rules` the permuted answer), -1 elsewhere.
    """
    pivotal = jnp.zeros((self.horizon,), bool).at[state.positions].set(True)
    answers = jnp.full((self.horizon,), -1, jnp.int32).at[state.positions].set(
        self.answers(state))
    return pivotal, answers
