"""The exact side of the variance-scaling study: KeyChain's closed-form objective under the
tabular policy of `credit_jax/diagnostics.py`, its log-probabilities, its exact gradient, where the variance of an
estimate lies, the time-indexed value baseline and the log-log slope of the figures.

With `cue_delay = 0` the tabular policy keeps one logit row per context, `logits: [A + 1,
A]` (row 0: distractor steps, row 1 + c: a pivotal step whose right action is c). Cues are
uniform and independent (exactly so for A a power of two), so each pivotal step is answered
right with probability `q = (1/A) sum_c softmax(logits[1 + c])[c]`, independently, and

    J_terminal = P(every pivotal step right) = q^k        (reward 1 at the end iff all right)
    J_partial  = E[sum_j right_j / k] = q                 (1/k per right key)

in closed form; the exact gradient is `jax.grad` of that closed form
(`keychain_true_gradient`). Distractor logits do not move J: their true gradient is 0, and
whatever an estimator puts there is pure noise (`keychain_pivotal_mask`).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import jax
import jax.numpy as jnp
import numpy as np

# The library's shape checks, shared rather than copied (same package).
from credit_jax.diagnostics import _check_grads, _check_like, _check_logits, _check_rank
from credit_jax.diagnostics import keychain_context

Array = jax.Array

REWARDS = ("terminal", "partial")


def tabular_log_prob(logits: Array, obs: Array, action: Array) -> Array:
  """log pi(action | obs) of the tabular policy; logits: [A + 1, A], obs: [A + 2],
  action: [] int. Returns [] float."""
  num_actions = _check_logits(logits)
  row = logits[keychain_context(obs, num_actions)]
  return jax.nn.log_softmax(row)[jnp.asarray(action, jnp.int32)]


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

