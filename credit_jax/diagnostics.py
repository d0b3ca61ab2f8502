"""Diagnostics of credit assignment: gradient variance, bias, SNR, credit accuracy.

A credit scheme turns a trajectory's rewards into one weight per step, `psi_t`, and the
policy-gradient estimate of one trajectory is `g = sum_t psi_t grad log pi(a_t | o_t)`.
Everything here measures such estimates against a ground truth, and is pure and jittable:

  * `credit_weights`: `psi` for the schemes of the lecture (terminal reward on every
    step, returns-to-go, GAE(lambda) with any value), built on `credit_jax.returns`.
  * `per_trajectory_gradients`: one gradient per trajectory (a `vmap` of `grad` over the
    batch), for any `log_prob_fn`; `gradient_stats` turns `[N, D]` of them into the
    variance (trace of the covariance), bias, mean squared error, SNR and cosine against
    a true gradient; `gradient_variance_parts` splits the variance into the part along
    the true gradient and the part in the parameters that matter
    (`keychain_pivotal_mask`).
  * `credit_accuracy`: the share of absolute credit that lands on the steps that really
    mattered (KeyChain's `info["pivotal"]`).
  * `degenerate_fraction` / `analytic_degenerate_fraction`: how many GRPO groups carry
    no signal, measured and as `p^K + (1 - p)^K`.

The true gradient on KeyChain is exact for a *tabular softmax policy over contexts*:
with `cue_delay = 0` the observation says whether the step is pivotal and, if so, its
cue `c`; the policy keeps one logit row per context (row 0: distractor steps, row 1 + c:
a pivotal step whose right action is c), `logits: [A + 1, A]`. Cues are uniform and
independent (exactly so for A a power of two), so each pivotal step is answered right
with probability `q = (1/A) sum_c softmax(logits[1 + c])[c]`, independently, and

    J_terminal = P(every pivotal step right) = q^k        (reward 1 at the end iff all right)
    J_partial  = E[sum_j right_j / k] = q                 (1/k per right key, see below)

in closed form; the exact gradient is `jax.grad` of that closed form
(`keychain_true_gradient`). Distractor logits do not move J: their true gradient is 0,
and whatever an estimator puts there is pure noise. The uniform policy is `logits = 0`;
`biased_logits(A, q)` gives the policy that answers right with probability q, so a
difficulty sweep can reach success rates above the random policy's `(1/A)^k`.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from credit_jax import baselines, returns

Array = jax.Array

SCHEMES = ("terminal", "rtg", "gae")
REWARDS = ("terminal", "partial")


def _shape(x: Any) -> tuple:
  return tuple(np.shape(x))


def _check_rank(name: str, x: Any, rank: int, what: str) -> None:
  if np.ndim(x) != rank:
    raise ValueError(f"{name} must be {what} (rank {rank}), got shape {_shape(x)}")


def _check_like(name: str, x: Any, ref_name: str, ref_shape: tuple) -> None:
  if _shape(x) != ref_shape:
    raise ValueError(f"{name} must have the shape of {ref_name} {ref_shape}, got "
                     f"{_shape(x)}")


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


def tabular_log_prob(logits: Array, obs: Array, action: Array) -> Array:
  """log pi(action | obs) of the tabular policy; logits: [A + 1, A], obs: [A + 2],
  action: [] int. Returns [] float."""
  num_actions = _check_logits(logits)
  row = logits[keychain_context(obs, num_actions)]
  return jax.nn.log_softmax(row)[jnp.asarray(action, jnp.int32)]


def tabular_policy(params: Array, obs: Array, key: Array):
  """A `PolicyFn` for the rollout engine: params are the [A + 1, A] logits table.

  Returns (action [] int32, log_prob [] float32, extras ()).
  """
  num_actions = _check_logits(params)
  row = params[keychain_context(obs, num_actions)]
  action = jax.random.categorical(key, row).astype(jnp.int32)
  return action, jax.nn.log_softmax(row)[action].astype(jnp.float32), ()


def biased_logits(num_actions: int, q: Any) -> Array:
  """[A + 1, A] logits that answer a pivotal step right with probability q.

  Row 1 + c puts `beta = log(q (A - 1) / (1 - q))` on action c and 0 elsewhere, so
  `softmax(row)[c] = q`; the distractor row is uniform. `q = 1/A` is the uniform
  policy; `q` may be traced (a sweep over it is a vmap).

  Args:
    num_actions: A >= 2 (static).
    q: [] float in (0, 1).
  """
  if num_actions < 2:
    raise ValueError(f"num_actions must be >= 2, got {num_actions}")
  if not isinstance(q, jax.core.Tracer) and not 0.0 < float(q) < 1.0:
    raise ValueError(f"q must lie in (0, 1), got {float(q)}")
  q = jnp.asarray(q, jnp.float32)
  beta = jnp.log(q * (num_actions - 1) / (1.0 - q))
  eye = jnp.eye(num_actions, dtype=jnp.float32)
  return jnp.concatenate([jnp.zeros((1, num_actions), jnp.float32), beta * eye])


def keychain_objective(logits: Array, num_pivotal: int, reward: str = "terminal"
                       ) -> Array:
  """Exact expected return J of the tabular policy on KeyChain (module docstring).

  Args:
    logits: [A + 1, A] float.
    num_pivotal: k, the number of pivotal steps.
    reward: "terminal" (1 at the end iff all k right: `q^k`) or "partial"
      (1/k at each pivotal step answered right: `q`).
  Returns:
    [] float. Exact for uniform cues (A a power of two) and `cue_delay = 0`.
  """
  num_actions = _check_logits(logits)
  if reward not in REWARDS:
    raise ValueError(f"reward must be one of {REWARDS}, got {reward!r}")
  probs = jax.nn.softmax(logits[1:], axis=-1)             # [A cues, A actions]
  q = jnp.mean(jnp.diagonal(probs))
  if reward == "partial":
    return q
  return q ** num_pivotal


def keychain_true_gradient(logits: Array, num_pivotal: int, reward: str = "terminal"
                           ) -> Array:
  """[A + 1, A] exact gradient of `keychain_objective` with respect to the logits."""
  return jax.grad(keychain_objective)(logits, num_pivotal, reward)


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
    scheme: one of `SCHEMES`.
    rewards: [T, N] float, one episode per column (as `rollout.collect_episodes` gives).
    discount, lambda_: [] float (may be traced).
    values: optional [T + 1, N] float, V(o_t) for t in [0, T].
    terminated: optional [T, N] bool (no bootstrap past a terminal step).
    valid: optional [T, N] bool; steps after the episode get weight 0.
  Returns:
    [T, N] float weights.
  """
  if scheme not in SCHEMES:
    raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
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


def fit_time_value(targets: Array, valid: Optional[Array] = None) -> Array:
  """Least-squares value on one-hot time features, from a separate batch.

  Regressing the returns `targets[t, i]` on the one-hot of t gives, per step, the mean
  target of the valid episodes: `V(t)`. On KeyChain under a policy that ignores the
  history this is the best value of the observation (cues and the pivotal flag do not
  predict what is still to come); what would predict it, whether the earlier keys were
  right, is not observed.

  Args:
    targets: [T, M] float, e.g. returns-to-go of M fitting episodes.
    valid: optional [T, M] bool.
  Returns:
    [T + 1] float: V(t) for t < T and 0 at T (the episode has ended).
  """
  _check_rank("targets", targets, 2, "[T, M]")
  mask = jnp.ones(targets.shape, targets.dtype) if valid is None else valid.astype(
      targets.dtype)
  v = jnp.sum(targets * mask, axis=1) / jnp.maximum(jnp.sum(mask, axis=1), 1.0)
  return jnp.concatenate([v, jnp.zeros((1,), v.dtype)])


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


def keychain_pivotal_mask(num_actions: int) -> Array:
  """[A + 1, A] bool: the logits of the tabular policy that pivotal steps use (rows
  1 + c, one per cue); row 0 (distractor steps) is False. Only these move J.

  Args:
    num_actions: A >= 2 (static).
  """
  if int(num_actions) < 2:
    raise ValueError(f"num_actions must be >= 2, got {num_actions}")
  rows = jnp.arange(int(num_actions) + 1)[:, None] >= 1
  return jnp.broadcast_to(rows, (int(num_actions) + 1, int(num_actions)))


def gradient_variance_parts(grads: Array, true_grad: Array, mask: Array
                            ) -> Dict[str, Array]:
  """Where the variance of N single-trajectory estimates lies, beside its trace.

  The trace (`gradient_stats`' variance) counts noise in every parameter alike. Two
  parts of it say more about learning speed: the variance along the exact gradient
  (the noise in the one direction an ascent step is paid for) and the variance in the
  parameters that move the objective (`mask`, e.g. `keychain_pivotal_mask`).

  Args:
    grads: [N, D] float, N >= 2 estimates (`flatten_gradients`).
    true_grad: [D] float, the exact gradient (the direction u = true / |true|).
    mask: [D] bool, the parameters of interest (raveled like a row of grads).
  Returns:
    dict of [] floats (sample variances, ddof = 1):
      variance_along:   Var(g . u); NaN when the true gradient is 0.
      variance_masked:  trace of the covariance over the `mask` coordinates.
      variance_unmasked: the trace over the others (variance_masked + this = the trace).
      snr_along:        |true|^2 / variance_along: trajectories needed for the step
                        along u to have relative error 1 is 1 / snr_along.
  """
  _check_grads(grads, true_grad)
  _check_like("mask", mask, "true_grad", grads.shape[1:])
  norm = jnp.sqrt(jnp.sum(true_grad ** 2))
  unit = true_grad / jnp.where(norm > 0, norm, 1.0)
  along = jnp.var(grads @ unit, ddof=1)
  along = jnp.where(norm > 0, along, jnp.nan)
  per_coord = jnp.var(grads, axis=0, ddof=1)
  m = jnp.asarray(mask).astype(per_coord.dtype)
  return {"variance_along": along,
          "variance_masked": jnp.sum(per_coord * m),
          "variance_unmasked": jnp.sum(per_coord * (1.0 - m)),
          "snr_along": norm ** 2 / jnp.maximum(along, jnp.finfo(per_coord.dtype).tiny)}


# ---------------------------------------------------------------------------------------
# Credit accuracy and degenerate groups.


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


def degenerate_fraction(rewards: Array) -> Array:
  """Fraction of groups whose K rewards are all equal (GRPO advantage exactly 0).

  Args:
    rewards: [..., K] float, the group on the last axis (as `cj.group_advantages`).
  Returns:
    [] float.
  """
  _, degenerate = baselines.group_advantages(rewards, kind="grpo")
  return jnp.mean(degenerate.astype(jnp.float32))


def analytic_degenerate_fraction(success_rate: Any, group_size: int) -> Array:
  """`p^K + (1 - p)^K`: the chance that K independent 0/1 rewards are all equal.

  Args:
    success_rate: [...] float p in [0, 1] (per-sample success probability).
    group_size: K >= 1.
  Returns:
    [...] float.
  """
  if int(group_size) < 1:
    raise ValueError(f"group_size must be >= 1, got {group_size}")
  p = jnp.asarray(success_rate, jnp.float32)
  return p ** group_size + (1.0 - p) ** group_size


def loglog_slope(x: Any, y: Any) -> float:
  """Least-squares slope of log y against log x: the exponent b of y ~ x^b.

  Args:
    x, y: [P] positive floats, P >= 2 points (e.g. horizons and variances).
  Returns:
    A Python float (host-side analysis of measured figures, not for use under jit).
  """
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.ndim != 1 or x.shape != y.shape or x.shape[0] < 2:
    raise ValueError(f"x and y must be [P] with P >= 2 points, got {x.shape} and {y.shape}")
  if np.any(x <= 0) or np.any(y <= 0):
    raise ValueError("x and y must be positive for a log-log fit")
  return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def informative_success_range(group_size: int, max_degenerate: float = 0.5
                              ) -> tuple:
  """(p_low, p_high): success rates whose analytic degenerate fraction is <= a bound.

  `p^K + (1 - p)^K` falls from 1 at p = 0 to its minimum 2^(1-K) at p = 1/2 and is
  symmetric about it, so the range is an interval around 1/2, found by bisection.

  Args:
    group_size: K >= 2.
    max_degenerate: the bound, in [2^(1-K), 1).
  Returns:
    Python floats (host-side analysis, not for use under jit).
  """
  if int(group_size) < 2:
    raise ValueError(f"group_size must be >= 2, got {group_size}")
  floor = 2.0 ** (1 - group_size)
  if not floor <= max_degenerate < 1.0:
    raise ValueError(f"max_degenerate must lie in [{floor:g}, 1) for K = {group_size}, "
                     f"got {max_degenerate}")
  low, high = 0.0, 0.5
  for _ in range(60):
    mid = 0.5 * (low + high)
    if mid ** group_size + (1.0 - mid) ** group_size > max_degenerate:
      low = mid
    else:
      high = mid
  return high, 1.0 - high
