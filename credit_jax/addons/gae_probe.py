"""How far the GAE policy gradient under a given critic is from KeyChain's exact gradient.

The estimator is PPO's on-policy gradient: at the current parameters, with no ratio
clipping and no advantage normalisation, one episode's estimate is

    g = sum_t A_t grad log pi(a_t | o_t),   A_t = GAE(gamma, lambda) under the critic,

(terminated at the episode's last step: no bootstrap), averaged over a batch of N fresh
episodes. The truth is the gradient of KeyChain's success probability

    J(theta) = E_env[ prod_i pi_theta(c_i | o_i) ]   (over the k pivotal steps)

for an actor that acts on the current observation alone (an MLP, `cue_delay = 0`, no
history window): distractor actions have no effect and the policy at a pivotal step
does not depend on them, so no action is sampled in J. The expectation over the reset's
draws is enumerated exactly: positions are independent across the k segments and cues
independent across steps (`KeyChain.draw_probabilities`), so J is the product over
segments of `q_i = sum_t P_i(t) sum_c P(c) pi(c | o(t, c))`, a forward pass over the
(T - cue_delay) x A pivotal observations; `grad J` is its autodiff.

`gradient_stats` reports, per the batch of N single-episode estimates (`diagnostics.
gradient_stats` underneath):
  bias:           ||E[g] - grad J|| / ||grad J||, from the debiased `bias_sq` (the batch
                  mean's own noise subtracted); 0 for an unbiased estimator up to noise.
  cosine:         cos(mean of g, grad J): pulled towards 0 by the batch mean's noise.
  cosine_debiased: (mean of g . u) / sqrt(||mean||^2 - trace / N), u = grad J / ||grad J||:
                  cos(E[g], grad J) without that pull (a ratio of unbiased estimates,
                  clipped to [-1, 1]; 0 when the noise swamps the mean).
  noise:          sqrt(trace / N) / ||grad J||, the batch mean's standard error relative
                  to the true gradient: bias and cosines mean little unless it is << 1
                  (N must grow with it; the trace grows with T on KeyChain).
  variance:       trace of the per-episode covariance of g.
  variance_along: per-episode variance of g . u, u = grad J / ||grad J||: the noise in
                  the one direction that matters (the trace also counts the distractor
                  parameters, whose true gradient is 0).
  true_norm, mean_norm, objective (J), success (the batch's sampled success rate).
With gamma = 1 and the exact state value the estimator is unbiased for every lambda;
with gamma < 1 it targets a discounted objective and is biased against grad J even then.

Everything is pure and jittable: `make_measure(...)` returns
`measure(actor_params, critic_params, key, gamma, gae_lambda) -> {name: []}`, which a
training loop calls at checkpoints. For PPO, `ppo_agent.make_ppo_measure(config)`
builds `measure(params, key, gamma, gae_lambda)` on PPO's own parameters, and the config
field `gae_gradient_every = N > 0` makes PPO's `run` report it every N updates as metrics
`gae_grad_<name>` (`MeasuredTrain`).
"""
from __future__ import annotations

from typing import Any, Callable, Dict

import jax
from jax import Array
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from credit_jax import diagnostics, envs, nets, rollout
from credit_jax.config import require
from credit_jax.envs.keychain import KeyChain, KeyChainState
from credit_jax.types import PresampledPolicy

# `logits_fn(actor_params, obs [..., A + 2]) -> logits [..., A]`: the actor on KeyChain's
# own observations (any leading dims).
LogitsFn = Callable[[Any, Array], Array]
# `value_fn(critic_params, traj) -> values [T, N]`: the critic on a batch of N whole
# episodes from `rollout.collect_episodes` (observations as the measured env gives them).
ValueFn = Callable[[Any, Any], Array]

STAT_NAMES = ("bias", "cosine", "cosine_debiased", "noise", "variance", "variance_along",
              "true_norm", "mean_norm", "objective", "success")


def keychain_of(env) -> KeyChain:
  """The KeyChain inside `env` (following wrappers' `inner`); ValueError if none."""
  inner = env
  while not isinstance(inner, KeyChain):
    if not hasattr(inner, "inner"):
      raise ValueError(f"the exact gradient needs KeyChain-v0, got {type(env).__name__}")
    inner = inner.inner
  return inner


def check_exact(env: KeyChain, env_params=None) -> None:
  """ValueError unless J is exact for a memoryless actor on `env` (cue_delay = 0, a time
  limit no shorter than the horizon)."""
  if env.cue_delay != 0:
    raise ValueError(f"the exact gradient needs cue_delay = 0 (the cue at its own step), "
                     f"got {env.cue_delay}")
  if env_params is not None and int(env_params.max_steps_in_episode) < env.horizon:
    raise ValueError(f"the exact gradient needs max_steps_in_episode >= horizon = "
                     f"{env.horizon}, got {env_params.max_steps_in_episode}")


def _pivotal_tables(env: KeyChain):
  """obs [P, A, A + 2] of a pivotal step at each of the P candidate steps with each cue,
  and the weights [k, P] x [A] of those steps and cues."""
  check_exact(env)
  position_probs, cue_probs = env.draw_probabilities()
  steps = np.nonzero(position_probs.sum(axis=0) > 0)[0]
  num_actions, k = env.num_actions, env.num_pivotal

  def one(t, c):   # KeyChain's own observation at a pivotal step t whose cue is c
    state = KeyChainState(
        positions=jnp.full((k,), -1, jnp.int32).at[0].set(t),
        cues=jnp.zeros((k,), jnp.int32).at[0].set(c), all_correct=jnp.array(True),
        time=jnp.asarray(t, jnp.int32))
    return env.get_obs(state)

  obs = jax.vmap(lambda t: jax.vmap(lambda c: one(t, c))(jnp.arange(num_actions)))(
      jnp.asarray(steps, jnp.int32))
  return (obs, jnp.asarray(position_probs[:, steps], jnp.float32),
          jnp.asarray(cue_probs, jnp.float32))


def keychain_success_probability(env: KeyChain, logits_fn: LogitsFn, actor_params
                                 ) -> Array:
  """[] J(theta), the exact success probability of a memoryless actor (module doc)."""
  obs, position_w, cue_w = _pivotal_tables(keychain_of(env))
  probs = jax.nn.softmax(logits_fn(actor_params, obs), axis=-1)     # [P, A cue, A act]
  right = jnp.diagonal(probs, axis1=-2, axis2=-1)                      # [P, A]
  q = position_w @ (right @ cue_w)                                     # [k]
  return jnp.prod(q)


def gradient_stats(grads: Array, true_grad: Array) -> Dict[str, Array]:
  """The module docstring's statistics of N estimates `grads [N, D]` against `true_grad
  [D]` (`bias` relative to ||true_grad||; `objective` and `success` are not here)."""
  base = diagnostics.gradient_stats(grads, true_grad)
  true_norm = jnp.sqrt(base["true_norm_sq"])
  safe = jnp.maximum(true_norm, jnp.finfo(true_norm.dtype).tiny)
  along = grads @ (true_grad / safe)                                   # [N]
  mean = jnp.mean(grads, axis=0)
  # ||E g||^2 estimated without the batch mean's noise, as bias_sq is.
  signal_sq = jnp.sum(mean ** 2) - base["variance"] / grads.shape[0]
  cos_debiased = jnp.mean(along) / jnp.sqrt(jnp.maximum(signal_sq, jnp.finfo(
      signal_sq.dtype).tiny))
  return {"bias": base["bias"] / safe, "cosine": base["cosine"],
          "cosine_debiased": jnp.clip(jnp.where(signal_sq > 0, cos_debiased, 0.0), -1, 1),
          "noise": jnp.sqrt(base["variance"] / grads.shape[0]) / safe,
          "variance": base["variance"], "variance_along": jnp.var(along, ddof=1),
          "true_norm": true_norm, "mean_norm": jnp.linalg.norm(mean)}


def make_episode_gradients(env, env_params, logits_fn: LogitsFn, value_fn: ValueFn,
                           num_episodes: int):
  """`episode_gradients(actor_params, critic_params, key, gamma, gae_lambda) -> (grads
  [N, D], true_grad [D], objective [], success [])`: the N single-episode GAE estimates
  (raveled like `ravel_pytree(actor_params)`), grad J, J and the sampled success rate.

  Args:
    env, env_params: KeyChain-v0, or a wrapper of it whose observations start with
      KeyChain's `[A + 2]` (e.g. `ppo_agent.OracleFeatureWrapper`), with cue_delay 0.
    logits_fn: the actor on KeyChain's own observations (see `LogitsFn`).
    value_fn: the critic on N whole episodes (see `ValueFn`).
    num_episodes: N >= 2 fresh episodes per call (static).
  """
  keychain = keychain_of(env)
  check_exact(keychain, env_params)
  if int(num_episodes) < 2:
    raise ValueError(f"num_episodes must be >= 2, got {num_episodes}")
  num_episodes, horizon = int(num_episodes), keychain.horizon
  width = keychain.num_actions + 2
  base_obs = lambda obs: obs[..., :width]

  def act(params, obs, noise):
    logits = logits_fn(params, base_obs(obs))
    action = nets.categorical_sample_with_noise(logits, noise)
    return action, nets.categorical_log_prob(logits, action), {}

  policy = PresampledPolicy(
      draw=lambda k: nets.categorical_noise(k, keychain.num_actions), act=act)

  def log_prob(params, obs, action):
    return nets.categorical_log_prob(logits_fn(params, base_obs(obs)), action)

  def episode_gradients(actor_params, critic_params, key, gamma, gae_lambda):
    traj = rollout.collect_episodes(env, env_params, policy, actor_params, key,
                                    num_episodes, horizon)
    values = value_fn(critic_params, traj)                               # [T, N]
    if jnp.shape(values) != (horizon, num_episodes):
      raise ValueError(f"value_fn must return [T, N] = {(horizon, num_episodes)}, got "
                       f"{jnp.shape(values)}")
    values = jnp.concatenate([values, jnp.zeros((1, num_episodes), values.dtype)])
    weights = diagnostics.credit_weights(
        "gae", traj.rewards, discount=gamma, lambda_=gae_lambda, values=values,
        terminated=traj.terminated, valid=traj.valid)
    grads = diagnostics.flatten_gradients(diagnostics.per_trajectory_gradients(
        log_prob, actor_params, traj.obs, traj.actions, weights, traj.valid))
    objective, true_grad = jax.value_and_grad(
        lambda p: keychain_success_probability(keychain, logits_fn, p))(actor_params)
    success = jnp.mean(jnp.sum(traj.rewards * traj.valid, axis=0))
    return grads, ravel_pytree(true_grad)[0], objective, success

  return episode_gradients


def make_measure(env, env_params, logits_fn: LogitsFn, value_fn: ValueFn,
                 num_episodes: int):
  """`measure(actor_params, critic_params, key, gamma, gae_lambda) -> {STAT_NAMES: []}`.

  Arguments as `make_episode_gradients`; the measure is pure and jittable, and gamma and
  gae_lambda may be traced.
  """
  episode_gradients = make_episode_gradients(env, env_params, logits_fn, value_fn,
                                             num_episodes)

  def measure(actor_params, critic_params, key, gamma, gae_lambda):
    grads, true_grad, objective, success = episode_gradients(
        actor_params, critic_params, key, gamma, gae_lambda)
    return {**gradient_stats(grads, true_grad), "objective": objective,
            "success": success}

  return measure


# ---------------------------------------------------------------------------------------
# At checkpoints of a training run.


def validate_config(config, made=None) -> None:
  """The fields `gae_gradient_every` and `gae_gradient_episodes` of a recipe config (PPO's,
  `ppo_agent.add_fields`); raises `ConfigError` naming the field. `made`: what
  `envs.make` gave for `config`, `(env, env_params)` (None: made here)."""
  req = require
  every = int(config.get("gae_gradient_every", 0) or 0)
  req(every >= 0, "gae_gradient_every", f"must be >= 0 (0: off), got {every}")
  if not every:
    return
  req(int(config.get("gae_gradient_episodes", 256)) >= 2, "gae_gradient_episodes",
      f"must be >= 2, got {config.get('gae_gradient_episodes')}")
  req(int(config.chunk_updates) % every == 0, "gae_gradient_every",
      f"must divide chunk_updates={config.chunk_updates} (measured at updates "
      f"u % {every} == 0 of each compiled chunk)")
  req(str(config.network.get("kind", "mlp")) == "mlp", "gae_gradient_every",
      "the exact gradient needs an MLP actor (network.kind='mlp'), got "
      f"{config.network.get('kind')!r}")
  req(int(config.get("history_window", 0) or 0) == 0, "gae_gradient_every",
      "the exact gradient needs history_window=0 (an actor on the current observation)")
  req(int(config.get("retry_attempts", 0) or 0) == 0, "gae_gradient_every",
      "the exact gradient needs retry_attempts=0")
  if made is None:
    try:
      made = envs.make(config.env_name, **dict(config.get("env_kwargs", {}) or {}))
    except ValueError:
      return   # the recipe's validation reports the environment itself
  try:
    check_exact(keychain_of(made[0]), made[1])
  except ValueError as e:
    req(False, "gae_gradient_every", str(e))


METRIC_PREFIX = "gae_grad_"
