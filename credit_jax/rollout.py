"""The rollout engine: a policy and a gymnax environment in, a time-major Trajectory out.

Three ways to collect, all pure and jittable (wrap them in `jax.jit` with `env`,
`policy_fn` and the sizes static, or call them inside a jitted train step):

  * `collect`: `num_steps` steps of `B` auto-resetting environments, resumable from the
    returned `(env_state, obs)`; every step is valid.
  * `collect_episodes`: the first episode of each of `num_envs` fresh environments, run
    for `horizon` steps; `valid` is True up to and including the step where that episode
    ended and False after (those steps belong to the next, auto-reset episode). An
    episode still running at `horizon` has all steps valid and neither boundary flag at
    its last step: bootstrap it from `final_obs[-1]` if needed.
  * `collect_groups`: `group_size` episodes per task from the *same* start state (the
    GRPO group): each task is reset once and its state copied to every member; members
    get independent action and environment keys.

The policy is written for one observation, `policy_fn(params, obs, key) -> (action,
log_prob, extras)`, and vmapped here. A `PresampledPolicy` (what
`networks.make_policy_fn` returns) has its per-step noise drawn before the loop from the
same keys, so the actions are those of calling it with each step's key.

Sequence policies (`credit_jax.types.SequencePolicy`, e.g. from
`sequence_networks.make_sequence_policy`) carry a `PolicyState` (the network's carry,
the previous action and reward) through the scan. The engine resets it to the initial
state right after every step that ended an episode (terminated or truncated; the
auto-reset's new episode starts from it), so an episode never sees another's memory.
`collect` takes the state at the start of the window and returns the one after it: the
caller keeps the start state to replay the window's sequence in training
(`sequence_inputs` gives the replay's per-step inputs). `collect_episodes` and
`collect_groups` start every member from the initial state. Per step the
engine does what a bare `lax.scan` of `env.step` must do anyway (one vmapped policy
call, one vmapped step; the keys of all steps are split before the loop), so its
overhead over a hand-written gymnax scan stays small; see BENCHMARKS.md ("Environment
stepping") for the measured ratio. When `env.step` is gymnax's own auto-reset step (or
`CreditEnv`'s), the engine runs its parts itself and draws every step's auto-reset before
the loop, from the keys `env.step` would have used.

Trajectory fields (see `credit_jax.types.Trajectory`): `final_obs` is gymnax's
`info["final_observation"]` (the observation that ended the step, before any reset);
`info` keeps the environment's own entries (e.g. KeyChain's "pivotal") and drops
gymnax's "final_observation", "terminated" and "truncated", which are fields already.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple, Tuple

import jax
import jax.numpy as jnp

from gymnax.environments import environment

from credit_jax.envs.base import CreditEnv, check_int
from credit_jax.types import (PolicyFn, PolicyState, PresampledPolicy, SequencePolicy,
                              Trajectory)

_GYMNAX_INFO_FIELDS = ("final_observation", "terminated", "truncated")


class StepStates(NamedTuple):
  """What the engine held before each step, kept on request (`keep_states=True`) for
  methods that restart from intermediate states (Monte-Carlo values, tree branches).

  `env_state[t]` is the state step t acted in (after any auto-reset), so
  `env.step(key, env_state[t], a, params)` with `obs[t]` continues the episode from
  there; `policy_state[t]` the sequence policy's `PolicyState` before acting at t (None
  for a stateless policy).
  """
  env_state: Any      # pytree of [T, B..., ...]
  policy_state: Any   # PolicyState of [T, B..., ...], or None


def uniform_random_policy(num_actions: int) -> PolicyFn:
  """A `PolicyFn` that ignores params and obs and picks one of `num_actions` uniformly.

  Returns actions `[] int32` with log-probability `-log(num_actions)` and no extras.
  One random 32-bit word per call, reduced modulo `num_actions`: exactly uniform when
  `num_actions` is a power of two, otherwise each action's probability is off by less
  than `num_actions / 2**32` relative. (`jax.random.randint` splits its key and draws
  twice; in a rollout of a cheap environment that difference shows.)
  """
  num_actions = check_int("num_actions", num_actions, minimum=1)
  log_prob = -math.log(num_actions)

  def policy(params: Any, obs: Any, key: jax.Array):
    del params, obs
    word = jax.random.bits(key, (), jnp.uint32)
    return (word % num_actions).astype(jnp.int32), jnp.float32(log_prob), ()

  return policy


def reset(env: Any, env_params: Any, key: jax.Array, num_envs: int
          ) -> Tuple[Any, Any]:
  """Resets `num_envs` environments with independent keys.

  Returns:
    obs: [num_envs, *obs_shape]; env_state: pytree with leaves [num_envs, ...].
  """
  num_envs = check_int("num_envs", num_envs, minimum=1)
  keys = jax.random.split(key, num_envs)
  return jax.vmap(env.reset, in_axes=(0, None))(keys, env_params)


def collect(env: Any, env_params: Any, policy_fn: PolicyFn, policy_params: Any,
            key: jax.Array, env_state: Any, obs: Any, num_steps: int,
            policy_state: PolicyState = None) -> Tuple[Trajectory, Tuple[Any, ...]]:
  """Runs `num_steps` steps of a batch of auto-resetting environments.

  Args:
    env, env_params: a gymnax environment and its params (shared by the batch).
    policy_fn: `(params, obs, key) -> (action [], log_prob [], extras)` for ONE obs, or
      a `SequencePolicy`.
    policy_params: passed unchanged to every call of `policy_fn`.
    key: PRNG key for this chunk.
    env_state: pytree with leaves [B, ...]; obs: [B, *obs_shape] (from `reset` or a
      previous `collect`).
    num_steps: T, a static Python int >= 1.
    policy_state: required for (and only for) a `SequencePolicy`: the `PolicyState`
      (leaves [B, ...]) at the window's start, from `initial_policy_state` or a previous
      `collect`.
  Returns:
    traj: Trajectory with fields [T, B, ...]; `valid` all True.
    (env_state, obs): the batch after the last step, to continue from; with a
      `SequencePolicy`, `(env_state, obs, policy_state)`.
  """
  num_steps = check_int("num_steps", num_steps, minimum=1)
  batch = _batch_size(env_state, obs)
  if isinstance(policy_fn, SequencePolicy):
    if policy_state is None:
      raise ValueError("a SequencePolicy needs the policy_state at the window's start "
                       "(rollout.initial_policy_state(policy, B) for fresh episodes)")
    _check_policy_state(policy_state, batch)
  elif policy_state is not None:
    raise ValueError("policy_state is only for a SequencePolicy; this policy has none")
  return _scan(env, env_params, policy_fn, policy_params, key, env_state, obs,
               num_steps, batch, policy_state)


def initial_policy_state(policy: SequencePolicy, batch: int) -> PolicyState:
  """The `PolicyState` of `batch` environments at an episode start: the policy's initial
  carry broadcast to leaves [batch, ...], prev_action [batch] = -1 and prev_reward
  [batch] = 0."""
  batch = check_int("batch", batch, minimum=1)
  carry = jax.tree.map(lambda x: jnp.broadcast_to(x, (batch,) + jnp.shape(x)),
                       policy.initial_carry())
  return PolicyState(carry=carry, prev_action=jnp.full((batch,), -1, jnp.int32),
                     prev_reward=jnp.zeros((batch,), jnp.float32))


def sequence_inputs(traj: Trajectory, policy_state: PolicyState
                    ) -> Tuple[jax.Array, jax.Array, jax.Array]:
  """The per-step inputs a sequence policy saw in a `collect` window, for replaying it.

  Args:
    traj: Trajectory [T, B...] from `collect` (or `collect_episodes`/`collect_groups`).
    policy_state: the `PolicyState` at the window's start (leaves [B..., ...]).
  Returns:
    prev_actions: [T, B...] int32, the action before step t (-1 at an episode start).
    prev_rewards: [T, B...] float32, the reward before step t (0 at an episode start).
    starts: [T, B...] bool, an episode starts at step t inside the window (the carry is
      reset before it); False at t = 0, where `policy_state` already is the reset state.
  """
  dones = traj.dones
  if jnp.shape(policy_state.prev_action) != dones.shape[1:] or \
      jnp.shape(policy_state.prev_reward) != dones.shape[1:]:
    raise ValueError(f"policy_state.prev_action and prev_reward must be [B...] = "
                     f"{dones.shape[1:]}, got {jnp.shape(policy_state.prev_action)} and "
                     f"{jnp.shape(policy_state.prev_reward)}")
  starts = jnp.concatenate([jnp.zeros_like(dones[:1]), dones[:-1]], axis=0)
  prev_actions = jnp.concatenate(
      [policy_state.prev_action[None].astype(jnp.int32),
       traj.actions[:-1].astype(jnp.int32)], axis=0)
  prev_rewards = jnp.concatenate(
      [policy_state.prev_reward[None].astype(jnp.float32), traj.rewards[:-1]], axis=0)
  return (jnp.where(starts, -1, prev_actions), jnp.where(starts, 0.0, prev_rewards),
          starts)


def collect_episodes(env: Any, env_params: Any, policy_fn: PolicyFn,
                     policy_params: Any, key: jax.Array, num_envs: int, horizon: int,
                     keep_states: bool = False):
  """One episode per environment from a fresh reset, up to `horizon` steps.

  Returns:
    Trajectory with fields [horizon, num_envs, ...]; `valid[t, b]` is True up to and
    including the first step where env b's episode terminated or was truncated.
    With `keep_states`, `(traj, StepStates)` with leaves [horizon, num_envs, ...].
  """
  out = collect_groups(env, env_params, policy_fn, policy_params, key, num_envs, 1,
                       horizon, keep_states)                    # groups of one episode
  return jax.tree.map(lambda x: x[:, :, 0], out)


def collect_groups(env: Any, env_params: Any, policy_fn: PolicyFn, policy_params: Any,
                   key: jax.Array, num_tasks: int, group_size: int, horizon: int,
                   keep_states: bool = False):
  """`group_size` episodes per task, all starting from the task's one start state.

  Each task is reset once; its state is copied to the `group_size` members, which then
  act and step with independent keys. Validity as in `collect_episodes`.

  Returns:
    Trajectory with fields [horizon, num_tasks, group_size, ...]; with `keep_states`,
    `(traj, StepStates)` with leaves [horizon, num_tasks, group_size, ...].
  """
  horizon = check_int("horizon", horizon, minimum=1)
  num_tasks = check_int("num_tasks", num_tasks, minimum=1)
  group_size = check_int("group_size", group_size, minimum=1)
  key_reset, key_run = jax.random.split(key)
  obs, env_state = reset(env, env_params, key_reset, num_tasks)
  # Member-major inside each task, so a reshape to [num_tasks, group_size] regroups.
  obs, env_state = jax.tree.map(lambda x: jnp.repeat(x, group_size, axis=0),
                                (obs, env_state))
  batch = num_tasks * group_size
  out = _scan(env, env_params, policy_fn, policy_params, key_run, env_state, obs,
              horizon, batch, _fresh_policy_state(policy_fn, batch),
              keep_states=bool(keep_states))
  traj = out[0]._replace(valid=first_episode_mask(out[0].terminated, out[0].truncated))
  regroup = lambda x: x.reshape((horizon, num_tasks, group_size) + x.shape[2:])
  traj = jax.tree.map(regroup, traj)
  return (traj, jax.tree.map(regroup, out[2])) if keep_states else traj


def first_episode_mask(terminated: jax.Array, truncated: jax.Array) -> jax.Array:
  """[T, ...] bool: True up to and including the first boundary along axis 0.

  Args:
    terminated, truncated: [T, ...] bool.
  """
  if terminated.shape != truncated.shape or terminated.ndim < 1:
    raise ValueError(f"terminated and truncated must share a shape [T, ...], got "
                     f"{terminated.shape} and {truncated.shape}")
  done = jnp.logical_or(terminated, truncated).astype(jnp.int32)
  return (jnp.cumsum(done, axis=0) - done) == 0


def max_truncations(env: Any, env_params: Any, num_steps: int):
  """The most time-limit truncations one environment can have in `num_steps` consecutive
  auto-reset steps, or None when that cannot be known before running.

  Known when `env.is_truncated` is gymnax's or `CreditEnv`'s (`state.time >=
  params.max_steps_in_episode`, the episode clock counting steps since the last reset)
  and `env_params.max_steps_in_episode` is a concrete int `L >= 1`: consecutive
  truncations are at least `L` steps apart, so there are at most `ceil(num_steps / L)`.
  None for any other `is_truncated` (a wrapper that overrides it, a different time limit)
  or a traced `L` (a sweep over time limits). PPO uses the bound to run its value network
  on those few `final_obs` rows instead of all `num_steps * B` of them.
  """
  owner = next((c for c in type(env).__mro__ if "is_truncated" in c.__dict__), None)
  if owner not in (environment.Environment, CreditEnv):
    return None
  limit = getattr(env_params, "max_steps_in_episode", None)
  try:
    limit = int(limit)
  except (TypeError, jax.errors.ConcretizationTypeError):
    return None
  if limit < 1:
    return None
  return min(int(num_steps), math.ceil(int(num_steps) / limit))


def _auto_reset_keys(env):
  """How `env.step` divides its key, `key -> (transition key, reset key)`, when `env.step`
  is gymnax's auto-reset step (or `CreditEnv`'s); None for any other `step`."""
  owner = next((c for c in type(env).__mro__ if "step" in c.__dict__), None)
  if owner is environment.Environment or (
      owner is CreditEnv and not env.deterministic_transitions):
    return lambda key: tuple(jax.random.split(key))
  if owner is CreditEnv:
    return lambda key: (key, key)
  return None


def _fresh_policy_state(policy_fn, batch):
  if isinstance(policy_fn, SequencePolicy):
    return initial_policy_state(policy_fn, batch)
  return None


def _vmapped_policy(policy_fn, keys):
  """`(policy_xs [T, B, ...], act)` from the policy keys `keys [T, B, 2]`: what the policy
  takes at every step (a `SequencePolicy`'s or `PresampledPolicy`'s noise, drawn from the
  keys before the loop: PPO CartPole, 16 vmapped seeds, one core: 128-step rollout CPU
  time 4.13 -> 3.82 ms, median of 20 interleaved runs) and `act(params, obs [B, ...],
  policy_state, x) -> (new carry or None, action, log_prob, extras)` vmapped over B."""
  if isinstance(policy_fn, SequencePolicy):
    act = jax.vmap(policy_fn.act, in_axes=(None, 0, 0, 0, 0, 0))
    return jax.vmap(jax.vmap(policy_fn.draw))(keys), lambda params, obs, ps, x: act(
        params, ps.carry, obs, ps.prev_action, ps.prev_reward, x)
  if isinstance(policy_fn, PresampledPolicy):
    act = jax.vmap(policy_fn.act, in_axes=(None, 0, 0))
    return jax.vmap(jax.vmap(policy_fn.draw))(keys), lambda params, obs, ps, x: (
        None,) + tuple(act(params, obs, x))
  act = jax.vmap(policy_fn, in_axes=(None, 0, 0))
  return keys, lambda params, obs, ps, x: (None,) + tuple(act(params, obs, x))


def _scan(env, env_params, policy_fn, policy_params, key, env_state, obs, num_steps,
          batch, policy_state=None, keep_states=False):
  """The engine's one loop: vmapped policy, vmapped env.step, scanned over time.

  With `keep_states` it also returns the `StepStates` before every step, leaves
  `[T, B, ...]`, as a third output."""
  step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
  # Every step's policy and env keys [T, 2, B] in one split before the loop: on CPU a
  # split inside the loop is a small loop of its own, run once per step.
  keys = jax.random.split(key, (num_steps, 2, batch))
  policy_xs, act = _vmapped_policy(policy_fn, keys[:, 0])
  divide = _auto_reset_keys(env)
  if divide is None:
    env_xs = keys[:, 1]
  else:
    # gymnax's auto-reset `step` draws a fresh reset on every step and keeps it where an
    # episode ended. The same resets, from the same keys, are drawn here for all steps
    # at once, so the loop only selects and none of the reset's (or the key split's)
    # bit-generator loops run per step: the same draws (float results can differ in the
    # last bit where XLA fuses the transition differently), PPO CartPole rollout CPU
    # time ~0.85x at 1 and 16 vmapped seeds.
    step_keys, reset_keys = jax.vmap(jax.vmap(divide))(keys[:, 1])
    resets = jax.vmap(jax.vmap(env.reset_env, in_axes=(0, None)), in_axes=(0, None))(
        reset_keys, env_params)                                 # (obs, state) [T, B, ...]
    env_xs = (step_keys, resets)
    transition = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))
    truncation = jax.vmap(env.is_truncated, in_axes=(0, None))

    def step(xs, state, action, params):
      step_keys, (obs_re, state_re) = xs
      obs_st, state_st, reward, terminated, info = transition(step_keys, state, action,
                                                              params)
      truncated = truncation(state_st, params)
      done = jnp.logical_or(terminated, truncated)

      def select(re, st):
        return jnp.where(done.reshape(done.shape + (1,) * (st.ndim - 1)), re, st)
      state, next_obs = jax.tree.map(select, (state_re, obs_re), (state_st, obs_st))
      info = {**info, "final_observation": obs_st}
      return next_obs, state, reward, terminated, truncated, info

  # A `SequencePolicy`'s `PolicyState` rides in the scan carry and is reset to the
  # initial state after every step that ended an episode.
  sequential = policy_state is not None
  initial = initial_policy_state(policy_fn, batch) if sequential else None

  def body(carry, xs):
    env_state, obs = carry[:2]
    policy_x, env_xs = xs
    new_carry, action, log_prob, extras = act(policy_params, obs,
                                              carry[2] if sequential else None, policy_x)
    _check_policy_output(action, log_prob, batch)
    next_obs, env_state, reward, terminated, truncated, info = step(
        env_xs, env_state, action, env_params)
    reward = reward.astype(jnp.float32)
    new = (env_state, next_obs)
    if sequential:
      done = jnp.logical_or(terminated, truncated)
      new += (jax.tree.map(
          lambda init, x: jnp.where(done.reshape((batch,) + (1,) * (x.ndim - 1)), init, x),
          initial, PolicyState(new_carry, action.astype(jnp.int32), reward)),)
    final_obs = info["final_observation"]
    info = {k: v for k, v in info.items() if k not in _GYMNAX_INFO_FIELDS}
    out = (obs, action, reward, terminated, truncated, log_prob.astype(jnp.float32),
           final_obs, extras, info)
    return new, out + ((carry[0],) + carry[2:] if keep_states else ())

  carry, out = jax.lax.scan(body, (env_state, obs) + ((policy_state,) if sequential else ()),
                            (policy_xs, env_xs))
  traj = _trajectory(out[:9], num_steps, batch)
  if keep_states:
    return traj, carry, StepStates(env_state=out[9],
                                   policy_state=out[10] if sequential else None)
  return traj, carry


def _trajectory(out, num_steps, batch):
  obs_t, action, reward, terminated, truncated, log_prob, final_obs, extras, info = out
  return Trajectory(obs=obs_t, actions=action, rewards=reward, terminated=terminated,
                    truncated=truncated, log_probs=log_prob, final_obs=final_obs,
                    valid=jnp.ones((num_steps, batch), bool), extras=extras, info=info)


def _check_policy_state(policy_state, batch):
  if not isinstance(policy_state, PolicyState):
    raise ValueError(f"policy_state must be a PolicyState, got {type(policy_state)}")
  bad = [jnp.shape(x) for x in jax.tree.leaves(policy_state)
         if jnp.ndim(x) < 1 or jnp.shape(x)[0] != batch]
  if bad or jnp.shape(policy_state.prev_action) != (batch,):
    raise ValueError(f"policy_state leaves must be [B, ...] with B = {batch} envs and "
                     f"prev_action/prev_reward [B]; got leaves of shapes {bad or 'ok'}, "
                     f"prev_action {jnp.shape(policy_state.prev_action)}")


def _check_policy_output(action, log_prob, batch):
  if jnp.shape(action) != (batch,) or jnp.shape(log_prob) != (batch,):
    raise ValueError(
        "policy_fn must return a scalar action and a scalar log_prob per observation; "
        f"vmapped over {batch} envs they have shapes {jnp.shape(action)} and "
        f"{jnp.shape(log_prob)}, expected ({batch},)")


def _batch_size(env_state: Any, obs: Any) -> int:
  leaves = jax.tree.leaves((env_state, obs))
  if not leaves or any(jnp.ndim(x) < 1 for x in leaves):
    raise ValueError("env_state and obs must be batched: every leaf needs a leading "
                     "[B] axis (use rollout.reset)")
  sizes = {jnp.shape(x)[0] for x in leaves}
  if len(sizes) != 1:
    raise ValueError(f"env_state and obs leaves disagree on the batch size B: leading "
                     f"dims {sorted(sizes)}")
  return sizes.pop()
