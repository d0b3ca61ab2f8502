"""RunningSum-v0: a chain-of-thought task whose every step is checkably right or wrong.

A problem is `num_terms` (N) numbers `x_1..x_N` in `[0, M)` (`modulus` M). A solution is a
chain of steps; the i-th *progress* step states the partial sum `S_i = (x_1 + .. + x_i) mod M`
and the last one, `S_N`, is the final answer. The episode terminates when the N-th
progress step is taken, with reward 1.0 iff that final answer is right (0.0 otherwise);
`horizon` (T >= N, up to any length: 500 is fine) is a time limit: an episode that has not
answered by then is truncated with no reward, or, with `time_limit_terminates=True`,
terminated with no reward. The time is observed and nothing can be earned after the limit,
so the limit is part of the task: an actor-critic that bootstraps at a truncation (PPO)
bootstraps from the value of a state it never trains on (time = T), and padding until the
limit collects that extrapolated value; `time_limit_terminates=True` is the right setting
for it (the PRM experiment's part E).

Actions (`A = 2 (M + 1)`), `a = style * (M + 1) + u`:
  `u < M`   progress step: "the next partial sum is u". It is right iff `u == S_i`.
  `u == M`  padding step: restates the current partial sum. It is *valid* (right iff the
            sum stated so far is right) but makes no progress: the two gaming routes of a
            process reward model are built in: a sum-form dense reward pays for padding
            forever, and
  `style`   a surface feature (1: "nicely formatted") with no effect on rightness. Data
            written by a careful demonstrator (`credit_jax.addons.prm.demo_policy`) uses style 1
            mostly on right steps, so a PRM trained on it learns to like the style.

Observation (float32, `[2 M + 2]`): `[0:M]` one-hot of the next term `x_i` (zeros once all
are consumed), `[M:2M]` one-hot of the partial sum stated so far (the agent's claim, right
or wrong), `[2M]` progress `i / N`, `[2M+1]` time `t / T`. The truth is not observed.

Per-step ground truth in `info`: `step_correct` (bool, the step just taken is right),
`padding` (bool, it was a padding step), `surface` (bool, style 1), `progress` (bool),
`post_state` (the state after the step, before any auto-reset: Monte-Carlo step labels
restore it and run completions from it).
`check_step` is the step checker as a pure function. Actions outside `[0, A)` are wrong
padding steps (nothing changes, never right).
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment

from credit_jax.envs import base


@struct.dataclass
class RunningSumState(environment.EnvState):
  terms: jax.Array       # [N] int32  the numbers to add, in [0, M)
  pointer: jax.Array     # [] int32   progress steps taken (terms consumed)
  claimed: jax.Array     # [] int32   the partial sum the agent stated last (0 at start)
  true_sum: jax.Array    # [] int32   the right partial sum of the consumed terms
  time: jax.Array        # [] int32   steps taken in this episode


@struct.dataclass
class RunningSumParams(environment.EnvParams):
  max_steps_in_episode: int = 16  # time limit; make() sets it to the horizon


def check_step(terms: jax.Array, pointer: jax.Array, claimed: jax.Array,
               true_sum: jax.Array, action: jax.Array, modulus: int) -> Dict[str, jax.Array]:
  """The step checker: what `action` does from a state, and whether it is right.

  Args:
    terms: [N] int32; pointer, claimed, true_sum, action: [] int32; modulus: M (static).
  Returns:
    dict of [] arrays: `correct`, `padding`, `surface`, `progress` (bool) and the next
    `pointer`, `claimed`, `true_sum` (int32).
  """
  m = int(modulus)
  action = jnp.asarray(action, jnp.int32)
  in_range = jnp.logical_and(action >= 0, action < 2 * (m + 1))
  u = jnp.where(in_range, action % (m + 1), m)
  surface = jnp.logical_and(in_range, action // (m + 1) == 1)
  has_term = pointer < terms.shape[0]
  progress = jnp.logical_and(u < m, has_term)
  x = terms[jnp.minimum(pointer, terms.shape[0] - 1)]
  next_true = jnp.where(progress, (true_sum + x) % m, true_sum)
  next_claimed = jnp.where(progress, u, claimed)
  correct = jnp.logical_and(in_range, next_claimed == next_true)
  return {"correct": correct, "padding": jnp.logical_not(progress), "surface": surface,
          "progress": progress, "pointer": pointer + progress.astype(jnp.int32),
          "claimed": next_claimed, "true_sum": next_true}


class RunningSum(base.CreditEnv):
  """RunningSum-v0. See the module docstring for the task, actions and ground truth."""

  name = "RunningSum-v0"
  deterministic_transitions = True  # step_env ignores its key

  def __init__(self, num_terms: int = 4, modulus: int = 4, horizon: int = 16,
               time_limit_terminates: bool = False):
    super().__init__()
    self.num_terms = base.check_int("num_terms", num_terms, minimum=1)
    self.modulus = base.check_int("modulus", modulus, minimum=2)
    self.horizon = base.check_int("horizon", horizon, minimum=self.num_terms)
    self.time_limit_terminates = bool(time_limit_terminates)
    self.obs_shape = (2 * self.modulus + 2,)

  @property
  def num_actions(self) -> int:
    return 2 * (self.modulus + 1)

  @property
  def default_params(self) -> RunningSumParams:
    return RunningSumParams(max_steps_in_episode=self.horizon)

  def reset_env(self, key: jax.Array, params: RunningSumParams
                ) -> Tuple[jax.Array, RunningSumState]:
    terms = jax.random.randint(key, (self.num_terms,), 0, self.modulus, jnp.int32)
    zero = jnp.zeros((), jnp.int32)
    state = RunningSumState(terms=terms, pointer=zero, claimed=zero, true_sum=zero,
                            time=zero)
    return self.get_obs(state), state

  def step_env(self, key: jax.Array, state: RunningSumState, action: Any,
               params: RunningSumParams
               ) -> Tuple[jax.Array, RunningSumState, jax.Array, jax.Array, Dict]:
    del key  # Deterministic transitions.
    c = check_step(state.terms, state.pointer, state.claimed, state.true_sum, action,
                   self.modulus)
    state = state.replace(pointer=c["pointer"], claimed=c["claimed"],
                          true_sum=c["true_sum"], time=state.time + 1)
    terminated = self.is_terminated(state, params)
    answered = state.pointer >= self.num_terms
    reward = jnp.logical_and(answered, state.claimed == state.true_sum).astype(jnp.float32)
    info = {"step_correct": c["correct"], "padding": c["padding"],
            "surface": c["surface"], "progress": c["progress"], "post_state": state}
    return self.get_obs(state), state, reward, terminated, info

  def is_terminated(self, state: RunningSumState, params: Any) -> jax.Array:
    answered = state.pointer >= self.num_terms
    if not self.time_limit_terminates:
      return answered
    return jnp.logical_or(answered, state.time >= params.max_steps_in_episode)

  def get_obs(self, state: RunningSumState, params: Any = None, key: Any = None
              ) -> jax.Array:
    """[2 M + 2] float32 observation of an unbatched state (layout in the module doc)."""
    m = self.modulus
    has_term = state.pointer < self.num_terms
    x = state.terms[jnp.minimum(state.pointer, self.num_terms - 1)]
    term = jnp.logical_and(jnp.arange(m) == x, has_term).astype(jnp.float32)
    claim = (jnp.arange(m) == state.claimed).astype(jnp.float32)
    extra = jnp.stack([state.pointer.astype(jnp.float32) / self.num_terms,
                       state.time.astype(jnp.float32) / self.horizon])
    return jnp.concatenate([term, claim, extra])

  def correct_value(self, state: RunningSumState) -> jax.Array:
    """[] int32: the right next partial sum (the current one once all terms are used)."""
    x = state.terms[jnp.minimum(state.pointer, self.num_terms - 1)]
    return jnp.where(state.pointer < self.num_terms, (state.true_sum + x) % self.modulus,
                     state.true_sum)
