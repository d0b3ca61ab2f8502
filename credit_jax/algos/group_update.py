"""GRPO's update pieces shared by its MLP program (`grpo.py`) and its sequence-network
program (`grpo_sequence.py`): the per-step group advantages (PRM shaping included) and the
per-update metrics with the curriculum's step, and the minibatch epochs over whole groups.
Both programs import them from here, so neither imports the other.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from credit_jax import baselines
from credit_jax.addons import curriculum
from credit_jax.algos import optim

__all__ = ["optimise", "step_advantages", "update_metrics"]


def optimise(loss_fn, state, aux, data, hp, k_perm, *, anneal_lr: bool, num_updates: int,
             num_epochs: int, num_minibatches: int, optimizer):
  """The update's gradient steps: `num_epochs` passes of `num_minibatches` minibatches
  that split the task axis (axis 1 of every `data` leaf, `[T, N, K, ...]`), so every
  group stays whole. `loss_fn(params, minibatch, ref_params, hp)`; `ref_params` is
  `aux["ref_params"]` where the reference-KL penalty keeps one (else None).

  Returns (params, opt_state, metrics, lr)."""
  lr = optim.learning_rate(hp["lr"], state.update, num_updates, anneal_lr)
  ref_params = aux.get("ref_params")
  params, opt_state, metrics = optim.minibatch_epochs(
      lambda p, mb: loss_fn(p, mb, ref_params, hp), state.params, state.opt_state,
      data, k_perm, num_epochs=num_epochs, num_minibatches=num_minibatches, axis=1, lr=lr,
      max_grad_norm=hp["max_grad_norm"], optimizer=optimizer)
  return params, opt_state, metrics, lr


def step_advantages(shaper, kind: str, aux, traj, returns, hp, k_perm, update,
                    policy_params=None):
  """GRPO's per-step advantages, PRM shaping included (shared by both GRPO programs).

  Args:
    shaper: `prm.make_shaper`'s shaper, or None (no shaping).
    traj: the groups' trajectory, leaves `[T, N, K]`; returns: `[N, K]` episode returns.
  Returns:
    `(step_adv [T, N, K], degenerate [N], aux, prm_metrics)`: the group advantage of each
    episode's score (outcome_w * outcome + w * aggregated PRM when shaped) at every step,
    plus the "step" form's per-step PRM credit; the PRM's key is `fold_in(k_perm, 2)`.
  """
  if returns.shape != traj.valid.shape[1:]:
    raise ValueError(f"returns must be [N, K] = {traj.valid.shape[1:]}, got {returns.shape}")
  scores, prm_metrics, bonus = returns, {}, None
  if shaper is not None:   # PRM shaping (prm.py): outcome_w * outcome + w * agg PRM
    scores, aux, prm_metrics, bonus = shaper.shape(
        aux, traj, returns, hp, jax.random.fold_in(k_perm, 2), update, policy_params)
  adv, degenerate = baselines.group_advantages(scores, kind=kind)             # [N, K], [N]
  step_adv = jnp.broadcast_to(adv[None], traj.valid.shape)             # [T, N, K]
  if bonus is not None:   # per-step PRM credit (form "step"; zeros otherwise)
    step_adv = step_adv + bonus
  return step_adv, degenerate, aux, prm_metrics


def update_metrics(metrics, aux, traj, returns, degenerate, lr, prm_metrics, cur, stage,
                   with_success: bool):
  """GRPO's per-update metrics and curriculum step (shared by both GRPO programs).

  `traj` leaves `[T, N, K]`, `returns [N, K]`, `degenerate [N]`; `cur` the curriculum (or
  None) and `stage` this update's stage. Returns `(aux, metrics)`.
  """
  valid = traj.valid
  if with_success:
    metrics["success"] = jnp.mean(
        curriculum.episode_success(traj, returns).astype(jnp.float32))
  if cur:  # curriculum hook: promotion / priorities, and the steps actually taken
    aux = {**aux, "curriculum": cur.observe(aux["curriculum"], stage, metrics["success"])}
    metrics.update(cur.metrics(aux["curriculum"], stage),
                   env_steps=jnp.sum(valid).astype(jnp.float32))
  metrics.update({
      "lr": lr, "return": returns.mean(),
      "degenerate_frac": jnp.mean(degenerate.astype(jnp.float32)),
      "episode_length": jnp.sum(valid, axis=0).astype(jnp.float32).mean(),
      **prm_metrics})
  return aux, metrics
