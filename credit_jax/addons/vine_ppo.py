"""VinePPO in one place: Monte-Carlo state values from restored states (the estimator,
without a critic), and the hook whose advantages replace PPO's GAE (`VineFeature`).

The estimator. VinePPO (Kazemnejad et al., ICML 2025, arXiv 2410.01679) drops the value
network: the value of the state at step t of a collected trajectory is the mean return
of K fresh rollouts ("vines") started from that very state with the current policy. Here
a state is a pytree, so restarting from it is a gather of the `StepStates` that
`rollout.collect_episodes(..., keep_states=True)` keeps; a sequence policy restarts from
the `PolicyState` it had there, so its memory of the episode is the trajectory's own.

    V_hat(s_t) = (1/K) sum_k G^(k)_t,     G^(k)_t the discounted return of vine k from s_t
    A_t        = r_t + gamma V_hat(s_{t+1}) - V_hat(s_t)                 (every = 1)

With `every = m > 1` vines start only at the points t_j = 0, m, 2m, ...; every step of
the segment [t_j, t_{j+1}) gets the segment's advantage
`sum_{u in segment} gamma^(u - t_j) r_u + gamma^m V_hat(s_{t_{j+1}}) - V_hat(s_{t_j})`
(segment-level Monte-Carlo credit, as SPO, arXiv 2505.23564), which is VinePPO's at m = 1.

Vines end where the episode ends (terminated or truncated by the restored time limit) or
at the trajectory's window `H = T`: a vine from t runs at most `H - t` steps, the same cut
the trajectory itself had, so V_hat estimates the value of the episode as the window
sees it and an episode still running at H is worth its return so far (no critic to
bootstrap it). A terminated or truncated step's successor is worth 0.

One compiled loop runs every vine. The vine from point j has at most `r_j = H - t_j`
steps; lanes run the vines of points j and P - 1 - j one after the other (a lane switches
to its second start state where the first vine ends, as an auto-reset would), so every
lane has `r_j + r_{P-1-j} = 2H - (P - 1) m` steps of work and the loop has that many
steps: no lane idles on an environment whose episodes run to the window. The switch is a
select between the stepped state and a precomputed start, cheaper than the auto-reset a
plain rollout draws each step (`benchmarks/bench_step_credit.py --only=vine` measures the
rate against it).

Counting: `env_steps` counts the steps of vines from valid points (a step inside the
trajectory's first episode); vines from invalid points run in the compiled loop (static
shapes) but are neither counted nor used.

The hook: `config.vine` (`add_config`): `enabled`, `num_vines` (K rollouts per vine
point), `every` (m: vine points every m steps). Each update, from the state at every
m-th step of the rollout (`StepStateWrapper`'s `info["step_state"]`, and a sequence
policy's carry from `extras["carry"]`), K vines run to the episode's end under the
policy that collected the rollout, and `vine_advantages` of their mean
returns are the update's advantages (discount: the recipe's `gamma`; 1 in a recipe
without one, GRPO). No value network is needed: PPO's value head still trains on
`advantages + values` unless `vf_coef = 0`, and plain PPO + GAE is the comparison with
one. The vines' steps are metric `env_steps` (added to the recipe's) and
`vine_env_steps`, so budgets count them.

Vines end at the rollout window, as the trajectory does, so windows must hold whole
episodes: episodic rollouts (GRPO-style groups, episodes) always do; a continuing window
(PPO) does when the episodes have a fixed length that divides `num_steps` (KeyChain's
horizon), which `validate` checks. A history window (`history_window > 0`) is refused:
its state lives outside the wrapped environment the vines restart.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax import returns as returns_lib
from credit_jax import rollout
from credit_jax.addons import hooks, step_states
from credit_jax.config import require, require_range
from credit_jax.envs.base import check_int
from credit_jax.types import PolicyState, SequencePolicy, Trajectory

__all__ = ["add_config", "collect_vines", "vine_advantages", "vine_points",
           "VineFeature", "VineValues"]


class VineValues(NamedTuple):
  """Monte-Carlo values at the vine points `t_j = j * every`, `j < P`."""
  values: jax.Array     # [P, B...] float32  V_hat(s_{t_j}): mean return of the K vines
  returns: jax.Array    # [P, B..., K] float32  each vine's discounted return
  lengths: jax.Array    # [P, B..., K] int32  steps each vine took
  env_steps: jax.Array  # [] int32  steps of the vines from valid points (the budget's)


def vine_points(horizon: int, every: int = 1) -> np.ndarray:
  """[P] int: the steps `0, every, 2 every, ... < horizon` where vines start."""
  horizon = check_int("horizon", horizon, minimum=1)
  every = check_int("every", every, minimum=1)
  return np.arange(0, horizon, every)


def _flat(x, lead):
  return x.reshape((math.prod(x.shape[:lead]),) + x.shape[lead:]) if lead else x


def _transition(env):
  """`(key, state, action, params) -> (obs, state, reward, terminated, truncated)`
  without the auto-reset where `env.step` is gymnax's own (vines never reset)."""
  divide = rollout._auto_reset_keys(env)
  if divide is None:
    def step(key, state, action, params):
      obs, state, reward, terminated, truncated, _ = env.step(key, state, action, params)
      return obs, state, reward, terminated, truncated
    return step

  def step(key, state, action, params):
    obs, state, reward, terminated, _ = env.step_env(divide(key)[0], state, action,
                                                     params)
    return obs, state, reward, terminated, env.is_truncated(state, params)
  return step


def collect_vines(env: Any, env_params: Any, policy_fn: Any, policy_params: Any,
                  key: jax.Array, traj: Trajectory, states: rollout.StepStates, *,
                  num_vines: int, every: int = 1, gamma: Any = 1.0) -> VineValues:
  """Runs `num_vines` (K) rollouts to the episode's end from every vine point.

  Args:
    env, env_params: the environment `traj` was collected in (gymnax API).
    policy_fn: a `PolicyFn` or `SequencePolicy` (the current policy).
    policy_params: its parameters.
    key: PRNG key of the vines (independent of the trajectory's).
    traj: Trajectory [T, B...] from `rollout.collect_episodes`/`collect_groups`; its
      `obs[t]` is the observation at the restored state, `valid` says which points
      count.
    states: `StepStates` [T, B...] kept with the trajectory (`keep_states=True`);
      `policy_state` required for (and only for) a `SequencePolicy`.
    num_vines: K >= 1 rollouts per point.
    every: m >= 1, vines start at steps 0, m, 2m, ... (`vine_points`).
    gamma: [] discount of the vines' returns (may be traced).
  Returns:
    `VineValues` with values [P, B...], returns and lengths [P, B..., K], env_steps [].
  """
  num_vines = check_int("num_vines", num_vines, minimum=1)
  horizon = int(traj.rewards.shape[0])
  points = vine_points(horizon, every)
  sequence = isinstance(policy_fn, SequencePolicy)
  if sequence != (states.policy_state is not None):
    raise ValueError("states.policy_state must be the PolicyStates kept with a "
                     "SequencePolicy's trajectory, and None for a stateless policy")
  batch_dims = traj.rewards.shape[1:]
  for name, tree in (("states.env_state", states.env_state), ("traj.obs", traj.obs),
                     ("states.policy_state", states.policy_state)):
    bad = [x.shape for x in jax.tree.leaves(tree)
           if x.shape[:1 + len(batch_dims)] != traj.rewards.shape]
    if bad:
      raise ValueError(f"{name} leaves must be [T, B...] = {traj.rewards.shape} + ..., "
                       f"got {bad}")
  lead = 1 + len(batch_dims)
  flat = lambda tree: jax.tree.map(lambda x: _flat(x.reshape(
      (horizon, -1) + x.shape[lead:]), 0), tree)
  env_state, obs, pstate = flat(states.env_state), flat(traj.obs), flat(states.policy_state)
  valid = traj.valid.reshape(horizon, -1)
  batch = valid.shape[1]

  # Lanes [Q, B, K]: pair q runs point q, then point P - 1 - q (if that is another).
  num_points = len(points)
  num_pairs, num_second = (num_points + 1) // 2, num_points // 2
  first = np.arange(num_pairs)
  second = num_points - 1 - first
  has_second = first < num_second
  remaining = horizon - points
  length = int(np.max(remaining[first] + np.where(has_second, remaining[second], 0)))
  shape = (num_pairs, batch, num_vines)
  n = math.prod(shape)
  t_first = np.broadcast_to(points[first][:, None, None], shape).reshape(-1)
  t_second = np.broadcast_to(points[second][:, None, None], shape).reshape(-1)
  b_idx = np.broadcast_to(np.arange(batch)[None, :, None], shape).reshape(-1)
  gather = lambda tree, t: jax.tree.map(lambda x: x[t, b_idx], tree)
  start_a = gather((env_state, obs, pstate), t_first)
  start_b = gather((env_state, obs, pstate), t_second)
  valid_a, valid_b = valid[t_first, b_idx], valid[t_second, b_idx]
  bound_a = jnp.asarray(np.broadcast_to(remaining[first][:, None, None], shape).reshape(-1),
                        jnp.int32)
  bound_b = jnp.asarray(np.broadcast_to(remaining[second][:, None, None], shape)
                        .reshape(-1), jnp.int32)
  two = jnp.asarray(np.broadcast_to(has_second[:, None, None], shape).reshape(-1))

  keys = jax.random.split(key, (length, 2, n))
  step = jax.vmap(_transition(env), in_axes=(0, 0, 0, None))
  policy_xs, act = rollout._vmapped_policy(policy_fn, keys[:, 0])
  gamma = jnp.asarray(gamma, jnp.float32)

  def select(mask, new, old):
    return jax.tree.map(
        lambda a, b: jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b),
        new, old)

  def body(carry, xs):
    (state, ob, ps, seg, steps, ret, disc, active, out, counted) = carry
    policy_x, env_key = xs
    new_carry, action, _, _ = act(policy_params, ob, ps, policy_x)
    ob_st, state_st, reward, terminated, truncated = step(env_key, state, action,
                                                          env_params)
    reward = reward.astype(jnp.float32)
    on_b = seg == 1
    counted = counted + jnp.sum(active & jnp.where(on_b, valid_b, valid_a))
    steps = steps + 1
    end = active & (terminated | truncated | (steps >= jnp.where(on_b, bound_b, bound_a)))
    ret = ret + jnp.where(active, disc * reward, 0.0)
    disc = disc * gamma
    ret_a, len_a, ret_b, len_b = out
    done_a, done_b = end & ~on_b, end & on_b
    out = (jnp.where(done_a, ret, ret_a), jnp.where(done_a, steps, len_a),
           jnp.where(done_b, ret, ret_b), jnp.where(done_b, steps, len_b))
    switch = done_a & two
    active = active & ~(end & ~switch)
    if sequence:
      ps = PolicyState(new_carry, action.astype(jnp.int32), reward)
    state, ob, ps = select(switch, start_b, (state_st, ob_st, ps))
    seg = jnp.where(switch, 1, seg)
    steps = jnp.where(switch, 0, steps)
    ret = jnp.where(switch, 0.0, ret)
    disc = jnp.where(switch, 1.0, disc)
    return (state, ob, ps, seg, steps, ret, disc, active, out, counted), None

  zeros_f, zeros_i = jnp.zeros((n,), jnp.float32), jnp.zeros((n,), jnp.int32)
  init = (*start_a, zeros_i, zeros_i, zeros_f, jnp.ones((n,), jnp.float32),
          jnp.ones((n,), bool), (zeros_f, zeros_i, zeros_f, zeros_i),
          jnp.zeros((), jnp.int32))
  final, _ = jax.lax.scan(body, init, (policy_xs, keys[:, 1]))
  ret_a, len_a, ret_b, len_b = (x.reshape(shape) for x in final[8])
  # Point j < Q is a first vine of pair j, point j >= Q the second of pair P - 1 - j.
  order = lambda a, b: jnp.concatenate([a, b[:num_second][::-1]], axis=0)
  vine_returns = order(ret_a, ret_b).reshape((num_points,) + batch_dims + (num_vines,))
  lengths = order(len_a, len_b).reshape(vine_returns.shape)
  return VineValues(values=jnp.mean(vine_returns, axis=-1), returns=vine_returns,
                    lengths=lengths, env_steps=final[9])


def vine_advantages(rewards: jax.Array, values: jax.Array, *, every: int = 1,
                    gamma: Any = 1.0, terminated: jax.Array, truncated: jax.Array,
                    valid: jax.Array) -> jax.Array:
  """Per-step advantages from vine values (module docstring for the formula).

  Args:
    rewards, terminated, truncated, valid: [T, B...] from the trajectory.
    values: [P, B...] `VineValues.values` at the points `vine_points(T, every)`.
    every: m, the spacing `values` was collected with.
    gamma: [] discount (may be traced).
  Returns:
    [T, B...] float32: each step's segment advantage; 0 at invalid steps and at steps
    after an episode boundary inside their segment (with `every = 1`, or segments that
    start every episode, there are none).
  """
  horizon = int(rewards.shape[0])
  points = vine_points(horizon, every)
  for name, x in (("terminated", terminated), ("truncated", truncated), ("valid", valid)):
    if x.shape != rewards.shape:
      raise ValueError(f"{name} must be [T, B...] = {rewards.shape}, got {x.shape}")
  if values.shape != (len(points),) + rewards.shape[1:]:
    raise ValueError(f"values must be [P, B...] = {(len(points),) + rewards.shape[1:]} "
                     f"(P = ceil(T / every) points), got {values.shape}")
  done = (terminated | truncated) & valid
  rewards = jnp.where(valid, rewards.astype(jnp.float32), 0.0)
  discounts = jnp.broadcast_to(jnp.asarray(gamma, jnp.float32), rewards.shape)
  # G_t with no credit across a boundary; a segment's own return is
  # G_{t_j} - gamma^d * alive_j * G_{t_{j+1}}, alive_j: no boundary inside it.
  to_go = returns_lib.discounted_returns(rewards, discounts, terminated=done)
  ends = np.append(points[1:], horizon)
  span = jnp.asarray(ends - points, jnp.float32).reshape((-1,) + (1,) * (rewards.ndim - 1))
  to_go_next = jnp.concatenate([to_go, jnp.zeros_like(to_go[:1])])[ends]
  values_next = jnp.concatenate([values, jnp.zeros_like(values[:1])])[
      np.arange(1, len(points) + 1)]
  ended = jnp.cumsum(done.astype(jnp.int32), axis=0)
  ended_before = jnp.concatenate([jnp.zeros_like(ended[:1]), ended])
  alive = (ended_before[ends] - ended_before[points]) == 0
  far = jnp.where(alive, jnp.asarray(gamma, jnp.float32) ** span, 0.0)
  seg_adv = to_go[points] - far * to_go_next + far * values_next - values
  step_adv = jnp.repeat(seg_adv, every, axis=0, total_repeat_length=horizon)
  # A step after a boundary inside its segment belongs to an episode with no vine point
  # at that step's segment start: it gets no credit (0) rather than another's.
  starts = jnp.repeat(ended_before[points], every, axis=0, total_repeat_length=horizon)
  return jnp.where(valid & (ended_before[:-1] == starts), step_adv, 0.0)


def add_config(c: ml_collections.ConfigDict, num_vines: int = 4, every: int = 1
               ) -> ml_collections.ConfigDict:
  """Adds an enabled `config.vine` block to `c`."""
  c.vine = ml_collections.ConfigDict()
  c.vine.enabled = True           # VinePPO's Monte-Carlo advantages replace GAE
  c.vine.num_vines = num_vines    # K vines per vine point
  c.vine.every = every            # vine points every m steps (1: every step, as published)
  return c


class VineFeature(hooks.Feature):
  name = "vine"
  field = "vine.enabled"
  estimator = True

  def validate(self, config, recipe: hooks.Recipe) -> None:
    require_range(config.vine, ("num_vines", "every"), 1, prefix="vine.")
    require(int(config.get("history_window", 0) or 0) == 0, "history_window",
            "vines restart the environment state, and a history window lives outside it")
    if recipe.rollout == hooks.CONTINUING:
      horizon = config.get("env_kwargs", {}).get("horizon")
      require(horizon is not None and int(config.num_steps) % int(horizon) == 0,
              "num_steps", f"vines end at the window: with a continuing rollout it must "
              f"hold whole episodes of a fixed horizon (env_kwargs.horizon = {horizon}), "
              f"got num_steps = {config.num_steps}")
      require(int(horizon) % int(config.vine.every) == 0, "vine.every",
              f"must divide the horizon {horizon} so every episode starts a segment")

  def wrap_env(self, config, env, env_params):
    del config
    return step_states.StepStateWrapper(env), env_params

  def bind(self, context: hooks.Context) -> hooks.Bound:
    env = context.env.inner if isinstance(context.env, step_states.StepStateWrapper) \
        else context.env
    policy = context.policy
    num_vines, every = int(context.config.vine.num_vines), int(context.config.vine.every)

    def advantages(carry, inputs: hooks.EstimatorInput):
      traj = inputs.traj
      gamma = inputs.hp.get("gamma", 1.0)    # GRPO has none: undiscounted, as its returns
      out = collect_vines(env, context.env_params, policy, inputs.params, inputs.key, traj,
                          step_states.step_states(policy, traj), num_vines=num_vines,
                          every=every, gamma=gamma)
      adv = vine_advantages(inputs.signal.rewards, out.values, every=every, gamma=gamma,
                            terminated=traj.terminated, truncated=traj.truncated,
                            valid=traj.valid)
      steps = out.env_steps.astype("float32")
      return adv, carry, {"env_steps": steps, "vine_env_steps": steps,
                          "vine_value_mean": out.values.mean(),
                          "vine_return_std": out.returns.std(axis=-1).mean()}
    return hooks.Bound(advantages=advantages)
