"""How far the learned credit estimators' policy gradients are from KeyChain's exact one,
and how much of their credit lands on the pivotal steps.

For a memoryless actor on KeyChain (`cue_delay = 0`), `gae_probe` gives the exact
gradient of the success probability, `grad J`. Each estimator here turns N fresh
episodes of the actor into N single-episode gradient estimates:

  "reinforce": `sum_t G_t grad log pi(a_t|o_t)`, G_t the discounted returns-to-go;
  "rudder":    the same on the redistributed rewards `r'` of a return predictor
               (`rudder.Rudder`; with gamma = 1 that is REINFORCE with the prefix's
               prediction as baseline, unbiased for any predictor);
  "rudder_r":  `sum_t r'_t grad log pi(a_t|o_t)`: RUDDER's immediate credit alone (what
               a perfect redistribution makes sufficient; biased otherwise), step 0's
               `r'` less its batch mean (the expected return, a constant baseline);
  "hca":       `sum_t (1 - pi/h) Z_t grad log pi(a_t|o_t)` with a hindsight model, learned
               (`hindsight_credit.Hindsight`) or exact (`keychain_hindsight`);
  "cocoa":     `sum_t [r_t grad log pi(a_t|o_t) + sum_a C_t(a) grad pi(a|o_t)]`, likewise.

`estimator_stats` reports `gae_probe.gradient_stats` of them (relative bias, cosines,
noise, variance, variance along the true gradient) plus `snr` (`||grad J||^2 / MSE`, as
COCOA's paper reports it, from `diagnostics.gradient_stats`) and `credit_on_pivotal`
(`diagnostics.credit_accuracy` of each step's credit mass: |weight| for the sampled-
action estimators, `contributions.step_credit_mass` for COCOA's).
"""
from __future__ import annotations

from typing import Any, Callable, Dict

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from credit_jax import diagnostics, nets, returns, rollout
from credit_jax.addons import contributions as cb
from credit_jax.addons import gae_probe
from credit_jax.addons import rudder as rudder_lib
from credit_jax.experiments.learned_credit.exact_hindsight import keychain_hindsight
from credit_jax.types import PresampledPolicy

Array = jax.Array

__all__ = ["METHODS", "all_action_gradients", "collect", "credit_of", "estimator_stats",
           "exact_credit", "make_policy"]

METHODS = ("reinforce", "rudder", "rudder_r", "hca", "cocoa")


def make_policy(logits_fn: Callable, num_actions: int) -> PresampledPolicy:
  """A rollout policy acting by `logits_fn(params, obs) -> logits [A]`."""

  def act(params, obs, noise):
    logits = logits_fn(params, obs)
    action = nets.categorical_sample_with_noise(logits, noise)
    return action, nets.categorical_log_prob(logits, action), {}

  return PresampledPolicy(draw=lambda k: nets.categorical_noise(k, num_actions), act=act)


def collect(env, env_params, logits_fn, actor_params, key, num_episodes: int):
  """N fresh whole episodes of the actor on KeyChain: a `Trajectory [T, N]`."""
  keychain = gae_probe.keychain_of(env)
  gae_probe.check_exact(keychain, env_params)
  policy = make_policy(logits_fn, keychain.num_actions)
  return rollout.collect_episodes(env, env_params, policy, actor_params, key,
                                  int(num_episodes), keychain.horizon)


def all_action_gradients(logits_fn, actor_params, traj, immediate: Array,
                         contributions: Array) -> Array:
  """[N, D] single-episode gradients of `sum_t [log pi(a_t|o_t) immediate_t + sum_a
  pi(a|o_t) contributions_t(a)]` (credit constant), raveled like the actor's params.

  Args:
    traj: Trajectory [T, N]; immediate: [T, N]; contributions: [T, N, A].
  """
  immediate = jax.lax.stop_gradient(jnp.where(traj.valid, immediate, 0.0))
  contributions = jax.lax.stop_gradient(
      jnp.where(traj.valid[..., None], contributions, 0.0))

  def one(obs, actions, imm, contrib):
    def surrogate(p):
      logp = jax.nn.log_softmax(logits_fn(p, obs), axis=-1)          # [T, A]
      taken = jnp.take_along_axis(logp, actions[:, None].astype(jnp.int32), -1)[:, 0]
      return jnp.sum(taken * imm) + jnp.sum(jnp.exp(logp) * contrib)
    return ravel_pytree(jax.grad(surrogate)(actor_params))[0]

  return jax.vmap(one, in_axes=(1, 1, 1, 1))(traj.obs, traj.actions, immediate,
                                            contributions)


def exact_credit(env, logits_fn, actor_params, traj, kind: str, gamma: Any = 1.0):
  """HCA's advantages [T, N] or COCOA's `CocoaCredit` with KeyChain's exact hindsight
  distributions (`keychain_hindsight`) in place of a learned model."""
  success_h, failure_h = keychain_hindsight(env, logits_fn, actor_params, traj.obs)
  pi = jax.nn.softmax(logits_fn(actor_params, traj.obs), axis=-1)
  rewards = jnp.where(traj.valid, traj.rewards, 0.0)
  dones = traj.dones & traj.valid
  if kind == "cocoa":
    return cb.cocoa_credit(pi, success_h[:, :, None, :], rewards,
                           cb.reward_classes(rewards, (1.0,)), gamma, dones, traj.valid)
  if kind != "hca":
    raise ValueError(f"kind must be 'hca' or 'cocoa', got {kind!r}")
  z = returns.discounted_returns(rewards, jnp.asarray(gamma, jnp.float32),
                                 terminated=dones)
  h = jnp.where((z > 0)[..., None], success_h, failure_h)
  take = lambda p: jnp.take_along_axis(p, traj.actions[..., None].astype(jnp.int32),
                                       -1)[..., 0]
  return cb.hca_advantages(take(pi), take(h), z, traj.valid)


def credit_of(method: str, traj, logits_fn, actor_params, *, gamma: Any = 1.0,
              rudder=None, rudder_params=None, hindsight=None, hindsight_params=None,
              env=None):
  """The credit an estimator gives N episodes: `[T, N]` weights of the sampled actions,
  or a `CocoaCredit` (COCOA). A hindsight method with `hindsight=None` uses the exact
  distributions of `env` (KeyChain)."""
  rewards = jnp.where(traj.valid, traj.rewards, 0.0)
  dones = traj.dones & traj.valid
  g = jnp.asarray(gamma, jnp.float32)
  if method == "reinforce":
    return returns.discounted_returns(rewards, g, terminated=dones)
  if method in ("rudder", "rudder_r"):
    cols = rudder_lib.columns_of(traj, rudder.num_actions, bool(rudder.cfg.with_reward))
    shaped = rudder_lib.redistribute(rudder.predict(rudder_params, cols.tokens), cols.rewards,
                             cols.dones, cols.valid)
    if method == "rudder_r":
      return jnp.where(traj.valid, shaped.at[0].add(-jnp.mean(shaped[0])), 0.0)
    return returns.discounted_returns(shaped, g, terminated=dones)
  if method in ("hca", "cocoa"):
    if hindsight is None:
      return exact_credit(env, logits_fn, actor_params, traj, method, gamma)
    logits = logits_fn(actor_params, traj.obs)
    return hindsight.credit(hindsight_params, logits, traj, gamma)[0]
  raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def estimator_stats(env, logits_fn, actor_params, traj, credit) -> Dict[str, Array]:
  """The module doc's statistics of the N single-episode estimates of `credit` (`[T, N]`
  weights or a `CocoaCredit`) against KeyChain's exact gradient at `actor_params`."""
  keychain = gae_probe.keychain_of(env)
  if isinstance(credit, cb.CocoaCredit):
    grads = all_action_gradients(logits_fn, actor_params, traj, credit.immediate,
                                 credit.contributions)
    pi = jax.nn.softmax(logits_fn(actor_params, traj.obs), axis=-1)
    mass = cb.step_credit_mass(pi, credit.immediate, credit.contributions)
  else:
    log_prob = lambda p, o, a: nets.categorical_log_prob(logits_fn(p, o), a)
    grads = diagnostics.flatten_gradients(diagnostics.per_trajectory_gradients(
        log_prob, actor_params, traj.obs, traj.actions, credit, traj.valid))
    mass = jnp.abs(credit)
  objective, true_grad = jax.value_and_grad(
      lambda p: gae_probe.keychain_success_probability(keychain, logits_fn, p))(
          actor_params)
  true_grad = ravel_pytree(true_grad)[0]
  stats = gae_probe.gradient_stats(grads, true_grad)
  stats["snr"] = diagnostics.gradient_stats(grads, true_grad)["snr"]
  stats["credit_on_pivotal"] = diagnostics.credit_accuracy(mass, traj.info["pivotal"],
                                                           traj.valid)
  stats["objective"] = objective
  return stats
