"""Hindsight credit: HCA's return-conditioned and COCOA's reward-conditioned estimators.

Both weigh an action by how much more likely it becomes in hindsight, once an outcome
that followed it is known, than it was under the policy. A hindsight model
`h(a | o, u)` (`credit_jax.nets.credit_models.HindsightModel`) is learned beside the
policy `pi(a | o)`; with the exact `h` both estimators are unbiased.

**HCA, return-conditioned** (Harutyunyan et al., NeurIPS 2019, arXiv 1912.02503): the
outcome is the return-to-go `Z_t = sum_{k >= t} gamma^(k-t) r_k`, and the sampled
action's advantage is

    A_t = (1 - pi(a_t | o_t) / h(a_t | o_t, Z_t)) Z_t.

`pi / h = P(Z | o) / P(Z | o, a)`: an action that made its return likelier gets its return
with a smaller subtraction; one that made no difference gets 0.

**COCOA, reward-conditioned** (Meulemans et al., NeurIPS 2023, arXiv 2306.16803): the
outcome of step k is the class `u_k` of its reward (`reward_classes`: the nearest of M
declared reward values; a zero reward is no outcome). The contribution coefficient

    w(o, a, u) = h(a | o, u) / pi(a | o) - 1,
    h(a | o, u) = P(a_t = a | o_t = o, u later)   (later outcomes weighted by gamma^(k-t)),

and the estimator sums over **all** actions, not only the sampled one:

    grad = sum_t [ grad log pi(a_t | o_t) r_t + sum_a grad pi(a | o_t) C_t(a) ],
    C_t(a) = sum_{k > t} gamma^(k-t) w(o_t, a, u_k) r_k = sum_m w(o_t, a, m) F_t(m),

where `F_t(m)` is the discounted reward of class m still to come (`future_by_class`).
A reward the action had no influence on (an apple for a key step, anything for a
distractor step) gets `w = 0`: no credit and no noise. The surrogate whose gradient
this is: `all_action_loss` (REINFORCE) and `clipped_all_action_terms` (PPO's, through
`algos/losses.py`).

Training the hindsight model (online, on the policy's own episodes): HCA by the cross
entropy of `h(. | o_t, Z_t)` against `a_t` on every step (`hca_loss`); COCOA by the cross
entropy of `h(. | o_t, m)` against `a_t` weighted by `N_t(m) = sum_{k > t} gamma^(k-t)
[u_k = m]`, the discounted count of later outcomes of class m (`cocoa_loss`): its
minimiser is exactly the discount-weighted hindsight distribution above.

Layout: time-major `[T, B]`, episodes delimited by `dones` (several may follow one
another in a column); nothing crosses an episode's end.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import jax
from jax import Array
import jax.numpy as jnp
import numpy as np

from credit_jax import returns

__all__ = ["CocoaCredit", "all_action_loss", "all_action_terms", "clipped_all_action_terms",
           "cocoa_credit", "cocoa_loss", "future_by_class", "hca_advantages", "hca_loss",
           "check_shape", "check_time_batch", "reward_classes", "step_credit_mass"]

# Hindsight probabilities are floored here before dividing by them: a learned h that
# puts (almost) no mass on the action taken would otherwise blow up HCA's ratio.
H_FLOOR = 1e-3


def check_shape(name: str, x: Any, shape) -> None:
  """Raises ValueError naming `name` unless `x` has shape `shape`."""
  if tuple(np.shape(x)) != tuple(shape):
    raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(np.shape(x))}")


def check_time_batch(rewards: Any, dones: Any, valid: Any = None) -> tuple:
  """`rewards`' shape `(T, B)`; raises ValueError unless `rewards` is [T, B] and `dones`
  (and `valid`, if given) have its shape. RUDDER's functions check with it too."""
  if np.ndim(rewards) != 2:
    raise ValueError(f"rewards must be [T, B] (rank 2), got shape {np.shape(rewards)}")
  shape = tuple(np.shape(rewards))
  check_shape("dones", dones, shape)
  if valid is not None:
    check_shape("valid", valid, shape)
  return shape


def _mask(shape, valid):
  return jnp.ones(shape, bool) if valid is None else jnp.asarray(valid, bool)


def reward_classes(rewards: Array, values: Sequence[float]) -> Array:
  """[T, B] int32: the index of the declared reward value nearest each reward, -1 where
  the reward is 0 (no outcome).

  Args:
    rewards: [T, B] float.
    values: the M >= 1 nonzero reward values the environment pays (static), e.g. a
      key-to-door's two apple values and its treasure.
  """
  vals = np.asarray(values, np.float32)
  if vals.ndim != 1 or vals.size < 1 or np.any(vals == 0):
    raise ValueError(f"values must be M >= 1 nonzero reward values, got {values}")
  dist = jnp.abs(rewards[..., None] - jnp.asarray(vals))
  return jnp.where(rewards != 0, jnp.argmin(dist, axis=-1), -1).astype(jnp.int32)


def future_by_class(rewards: Array, classes: Array, num_classes: int, gamma: Any,
                    dones: Array, valid: Array = None):
  """What is still to come after each step, per outcome class.

  Args:
    rewards: [T, B] float; classes: [T, B] int32 (`reward_classes`, -1: none);
    num_classes: M (static); gamma: [] float; dones: [T, B] bool (episode's last step);
    valid: optional [T, B] bool.
  Returns:
    (F [T, B, M]: sum_{k > t} gamma^(k-t) r_k [u_k = m], N [T, B, M]: the same without
    r_k, the discounted count), both within the step's episode.
  """
  shape = check_time_batch(rewards, dones, valid)
  check_shape("classes", classes, shape)
  mask = _mask(shape, valid)
  dones = jnp.asarray(dones, bool) & mask
  hot = jax.nn.one_hot(jnp.where(mask, classes, -1), int(num_classes),
                       dtype=jnp.float32)                             # [T, B, M]
  r = jnp.where(mask, rewards, 0.0)[..., None]
  x = jnp.concatenate([hot * r, hot], axis=-1)                        # [T, B, 2M]
  term = jnp.broadcast_to(dones[..., None], x.shape)
  ahead = returns.discounted_returns(x, jnp.asarray(gamma, jnp.float32),
                                     terminated=term) - x             # k > t only
  ahead = jnp.where(mask[..., None], ahead, 0.0)
  return ahead[..., :int(num_classes)], ahead[..., int(num_classes):]


# ---------------------------------------------------------------------------------------
# HCA (return-conditioned).


def hca_advantages(pi_taken: Array, h_taken: Array, z: Array, valid: Array = None
                   ) -> Array:
  """[T, B] `(1 - pi(a_t|o_t) / h(a_t|o_t,Z_t)) Z_t`, 0 at invalid steps.

  Args:
    pi_taken: [T, B] the policy's probability of the action taken;
    h_taken: [T, B] the hindsight model's (floored at `H_FLOOR`);
    z: [T, B] the return-to-go Z_t; valid: optional [T, B] bool.
  """
  check_shape("h_taken", h_taken, np.shape(pi_taken))
  check_shape("z", z, np.shape(pi_taken))
  adv = (1.0 - pi_taken / jnp.maximum(h_taken, H_FLOOR)) * z
  return jnp.where(_mask(np.shape(pi_taken), valid), adv, 0.0)


def hca_loss(h_logits: Array, actions: Array, valid: Array = None) -> Array:
  """[] mean cross entropy of `h(. | o_t, Z_t)` (`h_logits [T, B, A]`) against the action
  taken (`actions [T, B]`) over the valid steps."""
  check_shape("actions", actions, np.shape(h_logits)[:2])
  ce = -jnp.take_along_axis(jax.nn.log_softmax(h_logits), actions[..., None].astype(
      jnp.int32), axis=-1)[..., 0]
  m = _mask(np.shape(actions), valid).astype(jnp.float32)
  return jnp.sum(ce * m) / jnp.maximum(jnp.sum(m), 1.0)


# ---------------------------------------------------------------------------------------
# COCOA (reward-conditioned).


class CocoaCredit(NamedTuple):
  """COCOA's credit of one batch: its gradient is `sum_t [grad log pi(a_t|o_t)
  immediate_t + sum_a grad pi(a|o_t) contributions_t(a)]` (`all_action_loss`)."""
  immediate: Array       # [T, B]     r_t, for the action taken
  contributions: Array   # [T, B, A]  C_t(a), for every action
  coefficients: Array    # [T, B, M, A] w(o_t, a, m)


def cocoa_credit(pi: Array, h: Array, rewards: Array, classes: Array, gamma: Any,
                 dones: Array, valid: Array = None) -> CocoaCredit:
  """COCOA's credit (module doc) from the policy and hindsight probabilities.

  Args:
    pi: [T, B, A] pi(. | o_t); h: [T, B, M, A] h(. | o_t, m) for each class m;
    rewards: [T, B]; classes: [T, B] int32 (`reward_classes`); gamma: [] float;
    dones: [T, B] bool; valid: optional [T, B] bool.
  """
  shape = check_time_batch(rewards, dones, valid)
  if np.ndim(pi) != 3 or tuple(np.shape(pi)[:2]) != shape:
    raise ValueError(f"pi must be [T, B, A] with [T, B] = {shape}, got {np.shape(pi)}")
  num_classes = np.shape(h)[2] if np.ndim(h) == 4 else -1
  check_shape("h", h, shape + (num_classes, np.shape(pi)[2]))
  future, _ = future_by_class(rewards, classes, num_classes, gamma, dones, valid)
  w = h / jnp.maximum(pi[:, :, None, :], jnp.finfo(jnp.float32).tiny) - 1.0
  contributions = jnp.einsum("tbma,tbm->tba", w, future)
  mask = _mask(shape, valid)
  return CocoaCredit(immediate=jnp.where(mask, rewards, 0.0),
                     contributions=jnp.where(mask[..., None], contributions, 0.0),
                     coefficients=w)


def cocoa_loss(h_logits: Array, actions: Array, counts: Array) -> Array:
  """[] COCOA's hindsight loss: the cross entropy of `h(. | o_t, m)` (`h_logits
  [T, B, M, A]`) against `actions [T, B]`, weighted by `counts [T, B, M]` (the discounted
  count `N_t(m)` of `future_by_class`, 0 at invalid steps), over the total weight."""
  shape = tuple(np.shape(actions))
  check_shape("counts", counts, np.shape(h_logits)[:3])
  if tuple(np.shape(h_logits)[:2]) != shape:
    raise ValueError(f"h_logits must be [T, B, M, A] with [T, B] = {shape}, got "
                     f"{np.shape(h_logits)}")
  logp = jax.nn.log_softmax(h_logits)
  idx = jnp.broadcast_to(actions[:, :, None, None].astype(jnp.int32),
                         np.shape(h_logits)[:3] + (1,))
  ce = -jnp.take_along_axis(logp, idx, axis=-1)[..., 0]
  return jnp.sum(ce * counts) / jnp.maximum(jnp.sum(counts), 1e-8)


# ---------------------------------------------------------------------------------------
# Policy losses of the all-action estimator.


def all_action_terms(logits: Array, actions: Array, immediate: Array,
                     contributions: Array) -> Array:
  """[T, B...] REINFORCE's per-step surrogate for COCOA: minus `log pi(a_t|o_t)
  immediate_t + sum_a pi(a|o_t) C_t(a)` (credit held constant); a recipe averages it over
  its valid steps as it averages its own per-step loss.

  Args:
    logits: [T, B..., A]; actions: [T, B...] int; immediate: [T, B...];
    contributions: [T, B..., A].
  """
  check_shape("contributions", contributions, np.shape(logits))
  check_shape("immediate", immediate, np.shape(logits)[:-1])
  logp = jax.nn.log_softmax(logits)
  taken = jnp.take_along_axis(logp, actions[..., None].astype(jnp.int32), -1)[..., 0]
  return -(taken * jax.lax.stop_gradient(immediate) + jnp.sum(
      jnp.exp(logp) * jax.lax.stop_gradient(contributions), axis=-1))


def all_action_loss(logits: Array, actions: Array, immediate: Array,
                    contributions: Array, valid: Array = None) -> Array:
  """[] `all_action_terms` averaged over the valid steps: its gradient is the module
  doc's estimator divided by the number of valid steps.

  Args:
    logits: [T, B, A]; actions: [T, B] int; immediate: [T, B]; contributions: [T, B, A];
    valid: optional [T, B] bool.
  """
  terms = all_action_terms(logits, actions, immediate, contributions)
  m = _mask(np.shape(immediate), valid).astype(terms.dtype)
  return jnp.sum(terms * m) / jnp.maximum(jnp.sum(m), 1.0)


def clipped_all_action_terms(logits: Array, old_logits: Array, actions: Array,
                             immediate: Array, contributions: Array,
                             clip_eps: Any) -> Array:
  """[T, B...] PPO's clipped per-step surrogate for COCOA: minus the sampled action's term
  as PPO clips it (ratio `pi/pi_old` of the action taken, advantage `immediate`) plus, for
  every action, `pi_old(a) min(rho_a C(a), clip(rho_a, 1 - eps, 1 + eps) C(a))`,
  `rho_a = pi(a)/pi_old(a)`; at `pi = pi_old` its gradient is `all_action_terms`'.

  Args:
    logits, old_logits: [T, B..., A] (the policy now, and the one that collected the
    batch); actions: [T, B...] int; immediate: [T, B...]; contributions: [T, B..., A];
    clip_eps: [] float.
  """
  check_shape("old_logits", old_logits, np.shape(logits))
  check_shape("contributions", contributions, np.shape(logits))
  logp = jax.nn.log_softmax(logits)
  old = jax.lax.stop_gradient(jax.nn.log_softmax(old_logits))
  rho = jnp.exp(logp - old)                                            # [T, B, A]
  clip = lambda r, adv: jnp.minimum(r * adv, jnp.clip(r, 1 - clip_eps, 1 + clip_eps) * adv)
  c = jax.lax.stop_gradient(contributions)
  every = jnp.sum(jnp.exp(old) * clip(rho, c), axis=-1)
  rho_taken = jnp.take_along_axis(rho, actions[..., None].astype(jnp.int32), -1)[..., 0]
  return -(clip(rho_taken, jax.lax.stop_gradient(immediate)) + every)


def step_credit_mass(pi: Array, immediate: Array, contributions: Array) -> Array:
  """[T, B] how much credit the all-action estimator gives step t: `|immediate_t| +
  sum_a pi(a) |C_t(a) - sum_b pi(b) C_t(b)|` (the centred contributions are what moves
  the policy: a common shift of all C_t(a) has no gradient). For credit accuracy."""
  check_shape("contributions", contributions, np.shape(pi))
  centred = contributions - jnp.sum(pi * contributions, axis=-1, keepdims=True)
  return jnp.abs(immediate) + jnp.sum(pi * jnp.abs(centred), axis=-1)
