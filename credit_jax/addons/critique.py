"""Self-critique: retry episodes with a critique channel, and the critics that fill it.

Reflexion (arXiv 2303.11366): after a failed attempt a critic writes a critique that
points at the step responsible; it is stored, and the next attempt at the *same* task
sees it. `RetryWrapper(env, attempts=R, critic=...)` turns any of credit_jax's
environments (KeyChain, the goal environments) into such retry episodes:

  * An episode of the wrapper is up to R attempts at one task. Each attempt starts from
    the task's start state (restored, not re-drawn) and is scored by the task's own
    verifier: the attempt succeeded iff the inner environment paid a positive reward on
    the step that ended it. The wrapper's episode terminates on the first success or at
    the end of attempt R; its reward is the inner reward (1.0 for the solving attempt).
  * After a failed attempt (not the last) the critic is called with the task's start
    state and the attempt's actions and writes one critique into the first free slot of
    the state's critique store `[R - 1, 3]` (the last slot when none is free); later
    attempts see every stored critique. A store may start non-empty (`with_critiques`:
    critiques remembered from earlier episodes of the task, `credit_jax/experiments/critique/memory.py`).
  * A **critique** is a float32 `[3]` array `(step, suggestion, confidence)`: the step
    index inside an attempt that the critic blames, the action it suggests there, and a
    confidence in [0, 1]; `NO_CRITIQUE = (-1, -1, 0)` is an empty slot.
  * Observation: the inner observation (flat `[D]`) followed by `[A + 2]` critique
    features for the current step: `sum_c confidence_c * onehot(suggestion_c)` over the
    stored critiques whose step is the current step, 1.0 when any stored critique exists,
    and `attempt / max(R - 1, 1)`. A memoryless policy can therefore follow a critique.

Critics (`critic(env, start_state, actions [T], length [], key, params) -> [3]`, all
jittable; `params` is the wrapper's `RetryParams`, whose `noise` and `critic_params` are
traced leaves, so a sweep over noise or over learned critics is a vmap):
  * `no_critic`: always `NO_CRITIQUE` (a plain retry).
  * `keychain_oracle`: external validation from KeyChain's ground truth
    (`KeyChain.oracle`): the first pivotal step answered wrong and its right action,
    confidence 1; `NO_CRITIQUE` when no pivotal step was wrong.
  * `keychain_noisy`: the oracle, except that with probability `noise` it is confidently
    wrong: it blames a uniformly drawn pivotal step of the task and suggests a uniformly
    drawn wrong action for it, still with confidence 1.
  * `bitflip_oracle`: the same external validation for BitFlip-v0 (a goal environment):
    the first flip of a bit that already matched the goal, and a bit still to flip.
  * a learned critic, the critique study's (`learned_critic` in
    credit_jax/experiments/critique/critic_training.py, passed to the wrapper as a
    function), reads its parameters from `RetryParams.critic_params`.
`first_wrong_step` is the oracle's core on plain arrays (what the tests check by hand).
"""
from __future__ import annotations

from typing import Any, Callable

import jax
from jax import Array
import jax.numpy as jnp
from flax import struct

from credit_jax.config import require
from credit_jax.envs import base, wrappers

NO_CRITIQUE = (-1.0, -1.0, 0.0)
CRITIQUE_SIZE = 3


def no_critique() -> Array:
  """[3] float32 empty critique (step -1, suggestion -1, confidence 0)."""
  return jnp.asarray(NO_CRITIQUE, jnp.float32)


def first_wrong_step(pivotal: Array, answers: Array, actions: Array, length) -> Array:
  """The oracle's critique from ground truth: the first pivotal step answered wrong.

  Args:
    pivotal: [T] bool, the task's pivotal steps.
    answers: [T] int, the right action at each pivotal step (any value elsewhere).
    actions: [T] int, the attempt's actions (entries at or after `length` are ignored).
    length: [] int, the number of steps the attempt took.
  Returns:
    [3] float32 `(t, answers[t], 1.0)` for the first `t < length` with `pivotal[t]` and
    `actions[t] != answers[t]`; `NO_CRITIQUE` when there is none.
  """
  pivotal, answers, actions = jnp.asarray(pivotal), jnp.asarray(answers), jnp.asarray(actions)
  if pivotal.ndim != 1 or answers.shape != pivotal.shape or actions.shape != pivotal.shape:
    raise ValueError(f"pivotal, answers and actions must all be [T]; got {pivotal.shape}, "
                     f"{answers.shape}, {actions.shape}")
  steps = jnp.arange(pivotal.shape[0])
  wrong = pivotal & (actions.astype(jnp.int32) != answers.astype(jnp.int32)) & (steps < length)
  t = jnp.argmax(wrong)
  found = jnp.any(wrong)
  crit = jnp.stack([t.astype(jnp.float32), answers[t].astype(jnp.float32),
                    jnp.ones((), jnp.float32)])
  return jnp.where(found, crit, no_critique())


def no_critic(env, start_state, actions, length, key, params) -> Array:
  """A plain retry: never critiques."""
  del env, start_state, actions, length, key, params
  return no_critique()


def keychain_oracle(env, start_state, actions, length, key, params) -> Array:
  """KeyChain's oracle critic (external validation); see `first_wrong_step`."""
  del key, params
  pivotal, answers = env.oracle(start_state)
  return first_wrong_step(pivotal, answers, actions, length)


def keychain_noisy(env, start_state, actions, length, key, params) -> Array:
  """The oracle, confidently wrong with probability `params.noise` (module doc)."""
  truth = keychain_oracle(env, start_state, actions, length, key, params)
  k_flip, k_step, k_act = jax.random.split(key, 3)
  j = jax.random.randint(k_step, (), 0, start_state.positions.shape[0])
  step = start_state.positions[j]
  offset = jax.random.randint(k_act, (), 1, env.num_actions)
  wrong_action = (start_state.cues[j] + offset) % env.num_actions
  lie = jnp.stack([step.astype(jnp.float32), wrong_action.astype(jnp.float32),
                   jnp.ones((), jnp.float32)])
  return jnp.where(jax.random.uniform(k_flip) < params.noise, lie, truth)


def bitflip_oracle(env, start_state, actions, length, key, params) -> Array:
  """BitFlip's oracle critic (a goal environment): replaying the attempt from the start
  state, the first step that flipped a bit already equal to the goal (or no bit), with the
  lowest bit still differing from the goal at that step as the suggestion; confidence 1.
  Steps after the goal was reached do not count. A BitFlip attempt of n steps that fails
  always has such a step."""
  del key, params
  n = env.num_bits
  actions = jnp.asarray(actions, jnp.int32)
  steps = jnp.arange(actions.shape[0])

  def step(bits, a):
    reached = jnp.all(bits == start_state.goal)      # steps after the goal do not count
    valid = (a >= 0) & (a < n)
    useful = valid & (bits[jnp.clip(a, 0, n - 1)] != start_state.goal[jnp.clip(a, 0, n - 1)])
    suggestion = jnp.argmax(bits != start_state.goal)
    return bits ^ (jnp.arange(n) == a).astype(bits.dtype), (~useful & ~reached, suggestion)

  _, (wrong, suggestion) = jax.lax.scan(step, start_state.bits, actions)
  wrong = wrong & (steps < length)
  t = jnp.argmax(wrong)
  crit = jnp.stack([t.astype(jnp.float32), suggestion[t].astype(jnp.float32),
                    jnp.ones((), jnp.float32)])
  return jnp.where(jnp.any(wrong), crit, no_critique())


CRITICS = {"none": no_critic, "oracle": keychain_oracle, "noisy": keychain_noisy,
           "bitflip_oracle": bitflip_oracle}


def _make_critic(name: str) -> Callable:
  """The critic function called `name` (one of `CRITICS`)."""
  if name not in CRITICS:
    raise ValueError(f"critic must be one of {tuple(CRITICS)}, got {name!r}")
  return CRITICS[name]


@struct.dataclass
class RetryParams:
  inner: Any                 # the wrapped environment's params
  noise: Any = 0.0           # [] float  the critic's error probability (traced; sweepable)
  critic_params: Any = None  # a learned critic's parameters


@struct.dataclass
class RetryState:
  inner: Any         # the inner environment's state in the current attempt
  start: Any         # the inner state the task started from (restored for each attempt)
  start_obs: Array   # [D] the inner observation at the task's start
  attempt: Array     # [] int32 current attempt, 0-based
  t: Array           # [] int32 steps taken in the current attempt
  actions: Array     # [T] int32 the current attempt's actions (-1 not yet taken)
  critiques: Array   # [max(R - 1, 1), 3] float32 stored critiques, slot r from attempt r
  time: Array        # [] int32 steps taken in the whole retry episode


class RetryWrapper(base.CreditEnv, wrappers.Wrapper):
  """Up to `attempts` attempts at one task, with a critique channel (module doc).

  `info` adds, per step: `attempt` (int32, the attempt the step belongs to),
  `attempt_end` (bool, the step ended an attempt), `attempt_success` (bool, it ended it
  by solving the task) and `critique` ([3], what the critic wrote at this step; an empty
  critique except at the end of a failed attempt that is not the last).
  """

  wraps_state = True   # the inner state rides in RetryState.inner

  def __init__(self, env, attempts: int, critic: str | Callable = "none",
               max_attempt_steps: int | None = None):
    wrappers.Wrapper.__init__(self, env)
    self.attempts = base.check_int("attempts", attempts, minimum=1)
    self.critic = _make_critic(critic) if isinstance(critic, str) else critic
    # Steps per attempt: given, else the env's horizon, else its default time limit.
    steps = max_attempt_steps if max_attempt_steps is not None else getattr(
        env, "horizon", getattr(env.default_params, "max_steps_in_episode", None))
    if steps is None:
      raise ValueError("max_attempt_steps is required for an env without a `horizon` "
                       "or a default max_steps_in_episode")
    self.attempt_steps = base.check_int("max_attempt_steps", steps, minimum=1)
    inner_shape = tuple(env.observation_space(env.default_params).shape)
    if len(inner_shape) != 1:
      raise ValueError(f"RetryWrapper needs flat [D] observations, got {inner_shape}")
    self.inner_obs_size = inner_shape[0]
    self.obs_shape = (self.inner_obs_size + env.num_actions + 2,)

  @property
  def name(self) -> str:
    return f"Retry{self.attempts}({self._env.name})"

  @property
  def horizon(self) -> int:
    """The most steps a retry episode can take: attempts x steps per attempt."""
    return self.attempts * self.attempt_steps

  @property
  def default_params(self) -> RetryParams:
    return RetryParams(inner=self._env.default_params, noise=0.0)

  def critique_features(self, critiques: Array, t: Array, attempt: Array) -> Array:
    """[A + 2] float32 features of the stored `critiques` [N, 3] at attempt step `t`."""
    a = self.num_actions
    here = (critiques[:, 0] == t.astype(jnp.float32)) & (critiques[:, 2] > 0)
    onehot = jax.nn.one_hot(critiques[:, 1].astype(jnp.int32), a)
    suggest = jnp.sum(jnp.where(here[:, None], critiques[:, 2:3] * onehot, 0.0), axis=0)
    has = jnp.any(critiques[:, 2] > 0).astype(jnp.float32)
    frac = attempt.astype(jnp.float32) / max(self.attempts - 1, 1)
    return jnp.concatenate([suggest, jnp.stack([has, frac])])

  def _obs(self, inner_obs, critiques, t, attempt) -> Array:
    return jnp.concatenate([jnp.asarray(inner_obs, jnp.float32),
                            self.critique_features(critiques, t, attempt)])

  def reset_env(self, key: Array, params: RetryParams):
    obs, inner = self._env.reset_env(key, params.inner)
    state = RetryState(
        inner=inner, start=inner, start_obs=jnp.asarray(obs, jnp.float32),
        attempt=jnp.zeros((), jnp.int32), t=jnp.zeros((), jnp.int32),
        actions=jnp.full((self.attempt_steps,), -1, jnp.int32),
        critiques=jnp.tile(no_critique(), (max(self.attempts - 1, 1), 1)),
        time=jnp.zeros((), jnp.int32))
    return self._obs(obs, state.critiques, state.t, state.attempt), state

  def with_critiques(self, state: RetryState, critiques: Array):
    """(obs, state) of a freshly reset `state` with its critique store set to
    `critiques` ([max(R - 1, 1), 3], e.g. read from memory)."""
    if critiques.shape != state.critiques.shape:
      raise ValueError(f"critiques must be {state.critiques.shape}, got {critiques.shape}")
    state = state.replace(critiques=jnp.asarray(critiques, jnp.float32))
    return self._obs(state.start_obs, state.critiques, state.t, state.attempt), state

  def step_env(self, key: Array, state: RetryState, action, params: RetryParams):
    k_step, k_critic = jax.random.split(key)
    obs_i, inner, reward, term_i, info = self._env.step_env(k_step, state.inner, action,
                                                            params.inner)
    trunc_i = self._env.is_truncated(inner, params.inner)
    t1 = state.t + 1
    end = term_i | trunc_i | (t1 >= self.attempt_steps)
    success = end & (reward > 0)
    actions = state.actions.at[jnp.minimum(state.t, self.attempt_steps - 1)].set(
        jnp.asarray(action, jnp.int32))
    last = state.attempt >= self.attempts - 1
    write = end & ~success & ~last
    critique = jnp.where(write, self.critic(self._env, state.start, actions, t1,
                                            k_critic, params), no_critique())
    free = state.critiques[:, 2] <= 0
    slot = jnp.where(jnp.any(free), jnp.argmax(free), state.critiques.shape[0] - 1)
    critiques = jnp.where(write, state.critiques.at[slot].set(critique), state.critiques)
    terminated = end & (success | last)
    retry = end & ~terminated
    pick = lambda new, old: jax.tree.map(lambda a, b: jnp.where(retry, a, b), new, old)
    new_inner, new_obs = pick((state.start, state.start_obs), (inner, jnp.asarray(obs_i, jnp.float32)))
    state = RetryState(
        inner=new_inner, start=state.start, start_obs=state.start_obs,
        attempt=jnp.where(retry, state.attempt + 1, state.attempt),
        t=jnp.where(retry, 0, t1),
        actions=jnp.where(retry, jnp.full_like(actions, -1), actions),
        critiques=critiques, time=state.time + 1)
    info = {**info, "attempt": state.attempt - retry.astype(jnp.int32), "attempt_end": end,
            "attempt_success": success, "critique": critique}
    obs = self._obs(new_obs, critiques, state.t, state.attempt)
    return obs, state, jnp.asarray(reward, jnp.float32), terminated, info

  def is_terminated(self, state: RetryState, params) -> Array:
    # Termination is decided in step_env (success or the last attempt's end).
    return jnp.zeros((), bool)

  def is_truncated(self, state: RetryState, params) -> Array:
    return jnp.zeros((), bool)

  def validate_params(self, params: RetryParams) -> None:
    self._env.validate_params(params.inner)
    base.check_param_range("noise", params.noise, 0.0, 1.0)


def wrap_env_from_config(config, env, env_params):
  """`(RetryWrapper, RetryParams)` around `env` as `config.retry_attempts` (> 0),
  `retry_critic` (a name of `CRITICS`, default "none") and `retry_noise` (default 0)
  say; what `algos/train.make_env` applies (`addons/features.CONFIG_WRAPPERS`).

  Raises ConfigError naming `config.horizon` where a recipe's rollout (`config.horizon`)
  cannot hold a whole retry episode: it would cut every episode before its later
  attempts and train without retries, silently.
  """
  attempts = int(config.retry_attempts)
  env = RetryWrapper(env, attempts, str(config.get("retry_critic", "none")))
  if config.get("horizon") is not None:
    episode = int(env.horizon)
    require(int(config.horizon) >= episode, "horizon",
            f"{config.horizon} rollout steps cannot hold a retry episode of up to "
            f"{episode} steps (retry_attempts={attempts} x {episode // attempts} steps "
            f"per attempt); set horizon >= {episode}")
  return env, RetryParams(inner=env_params, noise=float(config.get("retry_noise", 0.0)))
