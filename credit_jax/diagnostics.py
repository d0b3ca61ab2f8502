"""Diagnostics of credit assignment: gradient variance, bias, SNR, credit accuracy.

A credit scheme turns a trajectory's rewards into one weight per step, `psi_t`, and the
policy-gradient estimate of one trajectory is `g = sum_t psi_t grad log pi(a_t | o_t)`.
Everything here measures such estimates against a ground truth, and is pure and jittable:

  * `credit_weights`: `psi` for the schemes of the lecture (terminal reward on every
    step, returns-to-go, GAE(lambda) with any value), built on `credit_jax.returns`.
  * `per_trajectory_gradients`: one gradient per trajectory (a `vmap` of `grad` over the
    batch), for any `log_prob_fn`; `gradient_stats` turns `[N, D]` of them into the
    variance (trace of the covariance), bias, mean squared error, SNR and cosine against
    a true gradient.
  * `credit_accuracy`: the share of absolute credit that lands on the steps that really
    mattered (KeyChain's `info["pivotal"]`).
  * `tabular_policy`: a softmax policy over KeyChain's contexts with `cue_delay = 0` (the
    observation says whether the step is pivotal and, if so, its cue `c`): one logit row
    per context (row 0: distractor steps, row 1 + c: a pivotal step whose right action is
    c), `logits: [A + 1, A]`. The uniform policy is `logits = 0`. Its log-probabilities,
    exact objective and gradient are the variance-scaling study's
    (credit_jax/experiments/variance_scaling/exact.py); GRPO's degenerate groups and the
    logits that answer right with probability q are the GRPO degradation study's
    (credit_jax/experiments/grpo_degradation/degenerate_groups.py).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import jax
from jax import Array
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from credit_jax import returns
from credit_jax.returns import _check_like, _shape   # the input checks returns.py uses

_SCHEMES = ("terminal", "rtg", "gae")


def _check_rank(name: str, x: Any, rank: int, what: str) -> None:
  if np.ndim(x) != rank:
    raise ValueError(f"{name} must be {what} (rank {rank}), got shape {_shape(x)}")


# ---------------------------------------------------------------------------------------
# The tabular softmax policy on KeyChain and its exact objective.


def keychain_context(obs: Array, num_actions: int) -> Array:
  """Context index of KeyChain observations: 0 at a distractor, 1 + c at a pivotal
  step whose cue (right action) is c. Needs `cue_delay = 0` (the cue at its own step).

  Args:
    obs: [..., A + 2] float KeyChain observations (layout in `envs/keychain.py`).
    num_actions: A.
  Returns:
    [...] int32 in [0, A].
  """
  if np.shape(obs)[-1:] != (num_actions + 2,):
    raise ValueError(f"obs must be [..., A + 2] = [..., {num_actions + 2}] KeyChain "
                     f"observations for num_actions={num_actions}, got {_shape(obs)}")
  pivotal = obs[..., num_actions] > 0.5
  cue = jnp.argmax(obs[..., :num_actions], axis=-1).astype(jnp.int32)
  return jnp.where(pivotal, 1 + cue, 0)


def _check_logits(logits: Any) -> int:
  if np.ndim(logits) != 2 or _shape(logits)[0] != _shape(logits)[1] + 1:
    raise ValueError(f"logits must be a [A + 1, A] table (one row per context), got "
                     f"shape {_shape(logits)}")
  return _shape(logits)[1]


def tabular_policy(params: Array, obs: Array, key: Array):
  """A `PolicyFn` for the rollout engine: params are the [A + 1, A] logits table.

  Returns (action [] int32, log_prob [] float32, extras ()).
  """
  num_actions = _check_logits(params)
  row = params[keychain_context(obs, num_actions)]
  action = jax.random.categorical(key, row).astype(jnp.int32)
  return action, jax.nn.log_softmax(row)[action].astype(jnp.float32), ()


# ---------------------------------------------------------------------------------------
# Credit schemes.


def credit_weights(scheme: str, rewards: Array, *, discount: Any = 1.0,
                   lambda_: Any = 1.0, values: Optional[Array] = None,
                   terminated: Optional[Array] = None,
                   valid: Optional[Array] = None) -> Array:
  """Per-step credit `psi_t` of a scheme, for batches holding one episode per column.

  Schemes:
    "terminal": the episode's undiscounted return on every step (REINFORCE with the
      total reward; `discount` and `lambda_` are ignored).
    "rtg":      discounted returns-to-go `G_t = sum_{l >= t} discount^{l-t} r_l`.
    "gae":      GAE(lambda_) with `values` (zeros when None): with lambda_ = 1 it is
      `G_t - V_t`, with zero values it is returns-to-go discounted by discount * lambda_.

  Args:
    scheme: one of `_SCHEMES`.
    rewards: [T, N] float, one episode per column (as `rollout.collect_episodes` gives).
    discount, lambda_: [] float (may be traced).
    values: optional [T + 1, N] float, V(o_t) for t in [0, T].
    terminated: optional [T, N] bool (no bootstrap past a terminal step).
    valid: optional [T, N] bool; steps after the episode get weight 0.
  Returns:
    [T, N] float weights.
  """
  if scheme not in _SCHEMES:
    raise ValueError(f"scheme must be one of {_SCHEMES}, got {scheme!r}")
  _check_rank("rewards", rewards, 2, "[T, N]")
  if valid is None:
    mask = jnp.ones(rewards.shape, rewards.dtype)
  else:
    _check_like("valid", valid, "rewards", rewards.shape)
    mask = valid.astype(rewards.dtype)
  rewards = rewards * mask
  if scheme == "terminal":
    psi = jnp.broadcast_to(jnp.sum(rewards, axis=0, keepdims=True), rewards.shape)
  elif scheme == "rtg":
    psi = returns.discounted_returns(rewards, discount, terminated=terminated)
  else:
    if values is None:
      values = jnp.zeros((rewards.shape[0] + 1,) + rewards.shape[1:], rewards.dtype)
    psi = returns.gae(rewards, discount, values, lambda_, terminated=terminated)
  return psi * mask


# ---------------------------------------------------------------------------------------
# Gradients and their statistics.


def per_trajectory_gradients(log_prob_fn: Callable[[Any, Any, Array], Array],
                             params: Any, obs: Any, actions: Array, weights: Array,
                             valid: Optional[Array] = None) -> Any:
  """One policy-gradient estimate per trajectory: `g_i = sum_t psi_ti grad log pi`.

  Args:
    log_prob_fn: `(params, obs, action) -> []` log pi(action | obs) for ONE step.
    params: policy parameters (any pytree).
    obs: pytree of [T, N, ...] observations.
    actions: [T, N] actions.
    weights: [T, N] float credit psi (treated as constants: no gradient flows through).
    valid: optional [T, N] bool; invalid steps contribute nothing.
  Returns:
    pytree like `params` with a leading [N] axis on every leaf.
  """
  _check_rank("actions", actions, 2, "[T, N]")
  _check_like("weights", weights, "actions", actions.shape)
  for leaf in jax.tree.leaves(obs):
    if _shape(leaf)[:2] != actions.shape:
      raise ValueError(f"obs leaves must be [T, N, ...] with [T, N] = {actions.shape}, "
                       f"got {_shape(leaf)}")
  weights = jax.lax.stop_gradient(weights)
  if valid is not None:
    _check_like("valid", valid, "actions", actions.shape)
    weights = weights * valid.astype(weights.dtype)

  def one(obs_i, actions_i, weights_i):
    def surrogate(p):
      log_probs = jax.vmap(log_prob_fn, in_axes=(None, 0, 0))(p, obs_i, actions_i)
      return jnp.sum(weights_i * log_probs)
    return jax.grad(surrogate)(params)

  return jax.vmap(one, in_axes=(1, 1, 1))(obs, actions, weights)


def flatten_gradients(grads: Any) -> Array:
  """[N, D]: a pytree with leading [N] axes, each trajectory's leaves raveled."""
  return jax.vmap(lambda g: ravel_pytree(g)[0])(grads)


def _check_grads(grads, true_grad) -> None:
  """`grads` [N, D] with N >= 2 and `true_grad` [D], or a ValueError naming the shapes."""
  _check_rank("grads", grads, 2, "[N, D]")
  if grads.shape[0] < 2:
    raise ValueError(f"grads needs N >= 2 estimates for a variance, got {grads.shape}")
  if _shape(true_grad) != grads.shape[1:]:
    raise ValueError(f"true_grad must be [D] = {grads.shape[1:]} like a row of grads, got "
                     f"{_shape(true_grad)}")


def gradient_stats(grads: Array, true_grad: Array) -> Dict[str, Array]:
  """Statistics of N single-trajectory estimates against the true gradient.

  Args:
    grads: [N, D] float, N >= 2 independent estimates (`flatten_gradients`).
    true_grad: [D] float, the exact gradient (e.g. `keychain_true_gradient`, raveled)
      or a large-sample mean from an independent batch.
  Returns:
    dict of [] floats, all about ONE trajectory's estimate g:
      variance:  trace of the sample covariance of g (ddof = 1).
      mse:       mean over samples of ||g_i - true||^2 (= variance + ||bias||^2).
      bias_sq:   ||mean - true||^2 - variance / N, an unbiased estimate of ||E g - true||^2
                 (may fall slightly below 0 by noise when the bias is 0).
      bias:      sqrt(max(bias_sq, 0)).
      snr:       ||true||^2 / mse: signal over everything that is not signal (variance
                 and bias), as in COCOA (Meulemans et al., 2023); for an unbiased
                 estimator it is ||true||^2 / variance.
      cosine:    cosine between the sample mean and true (0 when either is 0).
      true_norm_sq: ||true||^2.
  """
  _check_grads(grads, true_grad)
  num = grads.shape[0]
  mean = jnp.mean(grads, axis=0)
  variance = jnp.sum(jnp.var(grads, axis=0, ddof=1))
  mse = jnp.mean(jnp.sum((grads - true_grad) ** 2, axis=1))
  bias_sq = jnp.sum((mean - true_grad) ** 2) - variance / num
  true_sq = jnp.sum(true_grad ** 2)
  denom = jnp.sqrt(jnp.sum(mean ** 2) * true_sq)
  cosine = jnp.where(denom > 0, jnp.dot(mean, true_grad) / jnp.where(denom > 0, denom, 1.0),
                     0.0)
  return {"variance": variance, "mse": mse, "bias_sq": bias_sq,
          "bias": jnp.sqrt(jnp.maximum(bias_sq, 0.0)),
          "snr": true_sq / jnp.maximum(mse, jnp.finfo(mse.dtype).tiny),
          "cosine": cosine, "true_norm_sq": true_sq}


# ---------------------------------------------------------------------------------------
# Credit accuracy.


def credit_accuracy(weights: Array, pivotal: Array, valid: Optional[Array] = None
                    ) -> Array:
  """Share of absolute credit on the steps that mattered: sum |psi| [pivotal] / sum |psi|.

  Pooled over the whole batch, so episodes that got no credit at all (a failed episode
  under a zero baseline) count for nothing rather than as 0/0. Spreading credit evenly
  scores k/T; 1 means only pivotal steps were credited.

  Args:
    weights: [T, ...] float credit psi.
    pivotal: [T, ...] bool oracle mask (KeyChain's `info["pivotal"]`).
    valid: optional [T, ...] bool.
  Returns:
    [] float in [0, 1]; NaN when no step got any credit.
  """
  _check_like("pivotal", pivotal, "weights", _shape(weights))
  mass = jnp.abs(weights)
  if valid is not None:
    _check_like("valid", valid, "weights", _shape(weights))
    mass = mass * valid.astype(mass.dtype)
  total = jnp.sum(mass)
  on_pivotal = jnp.sum(mass * pivotal.astype(mass.dtype))
  return jnp.where(total > 0, on_pivotal / jnp.where(total > 0, total, 1.0), jnp.nan)

