"""Per-step policy-gradient loss terms shared by the recipes.

Each function works elementwise on arrays of one shape `[...]` (any batch layout) and
returns per-element terms; the recipes choose how to aggregate (mean over a minibatch,
masked token mean, per-sequence mean...). Keeping aggregation out of here is what lets
PPO, GRPO and REINFORCE share them.
"""
from __future__ import annotations

from typing import Tuple

import jax
from jax import Array
import jax.numpy as jnp

from credit_jax import episodes, nets
from credit_jax.addons import contributions


def _same_shape(**arrays: Array) -> None:
  shapes = {k: jnp.shape(v) for k, v in arrays.items()}
  if len(set(shapes.values())) != 1:
    raise ValueError(f"arguments must share one shape [...], got {shapes}")


def clipped_surrogate(log_probs: Array, old_log_probs: Array, advantages: Array,
                      clip_eps: Array) -> Tuple[Array, Array, Array]:
  """PPO's clipped surrogate objective, as a loss to minimise.

  Args:
    log_probs: [...] log pi_theta(a|s) under the parameters being optimised.
    old_log_probs: [...] log pi(a|s) under the behaviour policy that sampled the data.
    advantages: [...] advantages (treated as constants).
    clip_eps: [] ratio clip range.

  Returns:
    `(loss [...], clipped [...] float 0/1, approx_kl [...])`: the per-step loss, whether
    the clip was active, and the `(ratio - 1) - log ratio` estimate of KL(old || new).
  """
  _same_shape(log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages)
  advantages = jax.lax.stop_gradient(advantages)
  log_ratio = log_probs - old_log_probs
  ratio = jnp.exp(log_ratio)
  unclipped = ratio * advantages
  clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
  loss = -jnp.minimum(unclipped, clipped)
  clip_active = (jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32)
  approx_kl = jax.lax.stop_gradient((ratio - 1.0) - log_ratio)
  return loss, clip_active, approx_kl


def value_loss(values: Array, targets: Array, old_values: Array = None,
               clip_eps: Array = None) -> Array:
  """Half squared error `[...]`, optionally PPO-clipped around `old_values`.

  With `clip_eps`, the prediction may move at most `clip_eps` from `old_values` before
  the loss stops rewarding the move (the larger of the clipped and unclipped errors).
  """
  _same_shape(values=values, targets=targets)
  targets = jax.lax.stop_gradient(targets)
  err = jnp.square(values - targets)
  if clip_eps is None:
    return 0.5 * err
  if old_values is None:
    raise ValueError("value_loss: clip_eps needs old_values")
  _same_shape(values=values, old_values=old_values)
  clipped = old_values + jnp.clip(values - old_values, -clip_eps, clip_eps)
  return 0.5 * jnp.maximum(err, jnp.square(clipped - targets))


def reinforce(log_probs: Array, advantages: Array) -> Array:
  """Score-function loss `-log pi(a|s) * A` per step `[...]` (A treated as a constant)."""
  _same_shape(log_probs=log_probs, advantages=advantages)
  return -log_probs * jax.lax.stop_gradient(advantages)


def policy_terms(logits: Array, actions: Array, credit) -> Array:
  """REINFORCE's per-step policy loss `[...]` from a step's `credit`: an advantage array
  `[...]` (`reinforce`), or COCOA's per-action `contributions.CocoaCredit`
  (`contributions.all_action_terms`). `logits: [..., A]`, `actions: [...]` int."""
  if isinstance(credit, contributions.CocoaCredit):
    return contributions.all_action_terms(logits, actions, credit.immediate,
                                          credit.contributions)
  return reinforce(nets.categorical_log_prob(logits, actions), credit)


def clipped_policy_terms(logits: Array, mb, clip_eps: Array):
  """PPO's (and GRPO's) clipped per-step policy loss `[...]` on a minibatch `mb` holding
  `actions`, `log_probs` (at collection) and `advantages`: an array `[...]`
  (`clipped_surrogate`) or a `contributions.CocoaCredit`, then also `old_logits [..., A]`
  (`contributions.clipped_all_action_terms`). Returns `(loss, clipped, approx_kl)`, each
  `[...]` (the last two of the action taken)."""
  log_probs = nets.categorical_log_prob(logits, mb["actions"])
  credit = mb["advantages"]
  if not isinstance(credit, contributions.CocoaCredit):
    return clipped_surrogate(log_probs, mb["log_probs"], credit, clip_eps)
  _, clipped, approx_kl = clipped_surrogate(log_probs, mb["log_probs"],
                                            credit.immediate, clip_eps)
  return contributions.clipped_all_action_terms(
      logits, mb["old_logits"], mb["actions"], credit.immediate, credit.contributions,
      clip_eps), clipped, approx_kl


def kl_to_reference(log_probs: Array, ref_log_probs: Array) -> Array:
  """Per-step KL(pi || pi_ref) estimate `[...]` from log-probs of the sampled actions.

  The "k3" estimator `exp(d) - d - 1` with `d = log pi_ref - log pi`: non-negative and
  unbiased for samples drawn from pi (the estimator GRPO uses).
  """
  _same_shape(log_probs=log_probs, ref_log_probs=ref_log_probs)
  d = jax.lax.stop_gradient(ref_log_probs) - log_probs
  return jnp.exp(d) - d - 1.0


def weighted_clipped_policy_loss(log_probs: Array, old_log_probs: Array, advantages: Array,
                                 entropy: Array, weights: Array, normalizer: Array,
                                 clip_eps: Array, ent_coef: Array):
  """Clipped surrogate minus an entropy bonus over weighted examples.

  The recipes that add extra examples to GRPO's batch (relabeled or searched episodes)
  weight every step and divide by the number of *sampled* steps (`normalizer`), so the
  extra examples add gradient on top of GRPO's instead of diluting it.

  Args:
    log_probs, old_log_probs, advantages, entropy, weights: [...] per step; weights are 0
      on steps that do not count (padding after an episode's end).
    normalizer: [] what the weighted sums are divided by (clamped to >= 1).
    clip_eps, ent_coef: [] the surrogate's ratio clip and the entropy weight.

  Returns:
    `(loss [], metrics)`: metrics hold the policy loss and entropy on the loss's scale,
    and the clip fraction and approximate KL as weighted means over all weighted steps.
  """
  _same_shape(log_probs=log_probs, entropy=entropy, weights=weights)
  pg, clipped, approx_kl = clipped_surrogate(log_probs, old_log_probs, advantages, clip_eps)
  n = jnp.maximum(normalizer, 1.0)

  def total(x):
    return jnp.sum(x * weights) / n

  def mean(x):
    return jnp.sum(x * weights) / jnp.maximum(jnp.sum(weights), 1e-8)
  loss = total(pg) - ent_coef * total(entropy)
  return loss, {"policy_loss": total(pg), "entropy": mean(entropy),
                "clip_frac": mean(clipped), "approx_kl": mean(approx_kl)}


def ppo_objective(logits: Array, values: Array, mb, hp, clip_value: bool):
  """PPO's loss from the network's outputs on a minibatch; `(loss [], aux {name: []})`.

  Args:
    logits: [..., A] policy logits at the minibatch's steps (any leading dims: `[N]` for
      the MLP's flat minibatches, `[E, T]` for a sequence network's windows).
    values: [...] value predictions at the same steps.
    mb: dict with `actions`, `log_probs` (at collection), `values` (at collection),
      `advantages` and `targets`, each shaped like `values`; optionally `valid` (the
      steps that count, PPO's whole-episode rollout: every mean is over them) and, with
      COCOA's `CocoaCredit` as `advantages`, `old_logits` (`clipped_policy_terms`).
    hp: the traced hparams (`clip_eps`, `vf_coef`, `ent_coef`).
    clip_value: clip the value update around `mb["values"]` (PPO's value clip).

  Advantages are normalised over the minibatch; the loss is the clipped surrogate plus
  `vf_coef` times the value loss minus `ent_coef` times the entropy.
  """
  if logits.shape[:-1] != values.shape:
    raise ValueError(f"logits [..., A] and values [...] disagree: {logits.shape}, "
                     f"{values.shape}")
  valid = mb.get("valid")
  if valid is None:
    mean = lambda x: x.mean()
  else:   # whole episodes padded after their end: only their steps count
    mean = lambda x: episodes.masked_mean(x, valid)
  adv = mb["advantages"]
  if not isinstance(adv, contributions.CocoaCredit):   # COCOA's credit is not normalised
    if valid is None:
      adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    else:
      centred = adv - mean(adv)
      adv = centred / (jnp.sqrt(mean(jnp.square(centred))) + 1e-8)
  pg, clipped, approx_kl = clipped_policy_terms(logits, {**mb, "advantages": adv},
                                                hp["clip_eps"])
  v_loss = value_loss(values, mb["targets"], mb["values"],
                      hp["clip_eps"] if clip_value else None)
  entropy = mean(nets.categorical_entropy(logits))
  loss = mean(pg) + hp["vf_coef"] * mean(v_loss) - hp["ent_coef"] * entropy
  return loss, {"policy_loss": mean(pg), "value_loss": mean(v_loss),
                "entropy": entropy, "approx_kl": mean(approx_kl),
                "clip_frac": mean(clipped)}
