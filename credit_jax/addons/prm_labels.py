"""PRM training data: a RunningSum demonstrator, frozen-episode rollouts, Monte-Carlo labels.

Part of the PRM package of modules (`credit_jax/addons/prm.py` re-exports every name here):
  `demo_policy` writes the PRM's training data: right with probability `correct`, padding
  with probability `pad`, and the surface feature (RunningSum's style bit) mostly on right
  steps, so a PRM can learn a shortcut;
  `run_episodes` steps a batch of env states without reset (finished episodes frozen);
  `mc_labels` labels post-step states Math-Shepherd style: N completions from a restored
  copy of the state (hard: any succeeds; soft: the fraction);
  `demo_data` gathers demonstrator steps with truth / MC / outcome labels;
  `policy_mc_labels` does the same for steps of a recipe's trajectory under the current
  policy (retraining); `analytic_uniform_success` is the uniform policy's exact success
  probability from a state (the tests' reference for `mc_labels`).
"""
from __future__ import annotations

from math import comb

import jax
import jax.numpy as jnp


def demo_policy(env, correct: float, pad: float, style_good: float, style_bad: float):
  """A RunningSum demonstrator `(key, state) -> [] int32 action` (reads the true state)."""
  m = env.modulus

  def policy(key, state):
    k_pad, k_ok, k_val, k_style = jax.random.split(key, 4)
    right = env.correct_value(state)
    value = jnp.where(jax.random.uniform(k_ok) < correct, right,
                      jax.random.randint(k_val, (), 0, m))
    is_pad = jax.random.uniform(k_pad) < pad
    u = jnp.where(is_pad, m, value)
    good = jnp.where(is_pad, state.claimed == state.true_sum, value == right)
    style = jax.random.uniform(k_style) < jnp.where(good, style_good, style_bad)
    return (style.astype(jnp.int32) * (m + 1) + u).astype(jnp.int32)
  return policy


def uniform_policy(num_actions: int):
  """`(key, state) -> [] int32` uniform over actions (for the analytic MC check)."""
  return lambda key, state: jax.random.randint(key, (), 0, num_actions)


def run_episodes(env, env_params, policy, key, states, num_steps: int):
  """Steps every state of `states` (leading axis B) `num_steps` times without reset.

  A finished episode (terminated, or at the time limit) stays frozen. Returns a dict of
  `[num_steps, B]` arrays (obs acted on, actions, valid, rewards, info entries), the
  post-step states (leading axes `[num_steps, B]`) and `success: [B]` (reward > 0 seen).
  """
  def one(state, k):
    done = jnp.logical_or(env.is_terminated(state, env_params),
                          state.time >= env_params.max_steps_in_episode)
    k_act, k_env = jax.random.split(k)
    action = policy(k_act, state)
    obs = env.get_obs(state)
    _, nxt, reward, _, info = env.step_env(k_env, state, action, env_params)
    nxt = jax.tree.map(lambda a, b: jnp.where(done, a, b), state, nxt)
    valid = jnp.logical_not(done)
    out = {"obs": obs, "actions": action, "valid": valid,
           "rewards": jnp.where(valid, reward, 0.0), **info}
    return nxt, (out, nxt)

  def batched(state, k):
    keys = jax.random.split(k, jax.tree.leaves(state)[0].shape[0])
    return jax.vmap(one)(state, keys)

  _, (out, post) = jax.lax.scan(batched, states, jax.random.split(key, num_steps))
  out["success"] = jnp.any(out["rewards"] > 0, axis=0)
  return out, post


def mc_labels(env, env_params, policy, states, key, num_rollouts: int, num_steps: int,
              step_rewards=None):
  """Monte-Carlo step labels from post-step `states` (leading axis B).

  Runs `num_rollouts` completions of `policy` from each state (a copy of it: the env
  state is restored) for `num_steps` steps. A state whose episode already ended (the
  step terminated it) is labelled by that step's reward, `step_rewards: [B]` (zeros when
  None). Returns `(hard [B], soft [B])`: any completion succeeded; the fraction that did.
  """
  b = jax.tree.leaves(states)[0].shape[0]
  rep = jax.tree.map(lambda x: jnp.repeat(x, num_rollouts, axis=0), states)
  out, _ = run_episodes(env, env_params, policy, key, rep, num_steps)
  wins = out["success"].reshape(b, num_rollouts).astype(jnp.float32)
  ended = jax.vmap(lambda s: env.is_terminated(s, env_params))(states)
  final = (jnp.zeros((b,)) if step_rewards is None else
           (jnp.asarray(step_rewards) > 0).astype(jnp.float32))
  hard = jnp.where(ended, final, jnp.max(wins, axis=1))
  return hard, jnp.where(ended, final, jnp.mean(wins, axis=1))


def demo_data(env, env_params, pc, key, num_episodes: int):
  """Demonstrator steps with all four kinds of labels, flattened to `[S]` arrays."""
  policy = demo_policy(env, pc.demo_correct, pc.demo_pad, pc.demo_style_good,
                       pc.demo_style_bad)
  k_reset, k_run, k_mc = jax.random.split(key, 3)
  _, states = jax.vmap(env.reset_env, in_axes=(0, None))(
      jax.random.split(k_reset, num_episodes), env_params)
  horizon = int(env_params.max_steps_in_episode)
  out, post = run_episodes(env, env_params, policy, k_run, states, horizon)
  flat = lambda x: x.reshape((-1,) + x.shape[2:])
  data = {k: flat(out[k]) for k in ("obs", "actions", "valid", "step_correct",
                                    "padding", "surface")}
  data["outcome"] = flat(jnp.broadcast_to(out["success"][None], out["valid"].shape)
                         ).astype(jnp.float32)
  if pc.labels in ("mc_hard", "mc_soft"):
    hard, soft = mc_labels(env, env_params, policy, jax.tree.map(flat, post), k_mc,
                           int(pc.mc_rollouts), horizon, flat(out["rewards"]))
    data["mc_hard"], data["mc_soft"] = hard, soft
  data["truth"] = data["step_correct"].astype(jnp.float32)
  return data


def policy_mc_labels(env, env_params, network, policy_params, traj, valid, key,
                     num_states: int, num_rollouts: int):
  """Monte-Carlo labels of `num_states` steps drawn from the valid steps of `traj`.

  The steps' post-step env states (`traj.info["post_state"]`, leading axes those of
  `valid: [T, B...]`) are restored and `num_rollouts` completions of the policy
  `network.apply(policy_params, obs)[0]` (logits) run from each to the time limit.
  Returns `(data, hard [S], soft [S])`, `data` holding the drawn steps' `obs [S, D]`,
  `actions [S]` and `valid [S]` for `train_prm`.
  """
  if "post_state" not in traj.info:
    raise ValueError("traj.info lacks 'post_state' (RunningSum-v0 provides it)")
  flat = lambda x: x.reshape((valid.size,) + x.shape[valid.ndim:])
  k_idx, k_mc = jax.random.split(key)
  idx = jax.random.categorical(k_idx, jnp.where(flat(valid), 0.0, -jnp.inf),
                               shape=(int(num_states),))
  states = jax.tree.map(lambda x: flat(x)[idx], traj.info["post_state"])

  def policy(k, state):
    logits = network.apply(policy_params, env.get_obs(state))[0]
    return jax.random.categorical(k, logits).astype(jnp.int32)
  hard, soft = mc_labels(env, env_params, policy, states, k_mc, int(num_rollouts),
                         int(env_params.max_steps_in_episode), flat(traj.rewards)[idx])
  data = {"obs": flat(traj.obs)[idx], "actions": flat(traj.actions)[idx],
          "valid": jnp.ones(idx.shape, bool)}
  return data, hard, soft


def analytic_uniform_success(remaining_terms: int, remaining_steps: int, modulus: int,
                             claimed_right: bool) -> float:
  """P(success) of the uniform policy on RunningSum from a state (for tests).

  Each step is progress w.p. p = M / (M + 1); success needs the `n`-th progress step
  within `r` steps and the last stated value right (1 / M); with n = 0, `claimed_right`.
  """
  n, r, m = remaining_terms, remaining_steps, modulus
  if n == 0:
    return float(claimed_right)
  p = m / (m + 1)
  reach = sum(comb(j - 1, n - 1) * p ** n * (1 - p) ** (j - n) for j in range(n, r + 1))
  return float(reach / m)
