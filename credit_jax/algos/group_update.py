"""GRPO's update pieces shared by its MLP program (`grpo.py`) and its sequence-network
program (`grpo_sequence.py`): the hooks' slots before the update (this update's env
params; shaped scores and group advantages), the minibatch epochs over whole groups, and
the per-update metrics with the hooks' `observe`. Both programs import them from here, so
neither imports the other.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from credit_jax import baselines
from credit_jax.addons import contributions, curriculum, hooks as hooks_lib
from credit_jax.algos import optim

__all__ = ["advantage_array", "episode_metrics", "finish", "optimise", "policy_data",
           "step_advantages"]


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


def policy_data(traj, credit, old_logits_fn, **extra):
  """The minibatch data of a group rollout `traj [T, N, K]`: its `obs`, `actions`,
  `log_probs`, `valid`, the `credit` as `advantages` (an array `[T, N, K]`, or COCOA's
  `CocoaCredit`, whose loss also reads `old_logits`: `old_logits_fn() -> [T, N, K, A]`,
  held constant), and `extra` entries."""
  data = {"obs": traj.obs, "actions": traj.actions, "log_probs": traj.log_probs,
          "advantages": credit, "valid": traj.valid, **extra}
  if isinstance(credit, contributions.CocoaCredit):
    data["advantages"] = credit._replace(coefficients=None)   # the loss reads the rest
    data["old_logits"] = jax.lax.stop_gradient(old_logits_fn())
  return data


def advantage_array(credit, fallback):
  """`credit` where it is an advantage array, else (COCOA's per-action credit) the
  recipe's own advantages `fallback`: what `Outcome.advantages` reports."""
  return fallback if isinstance(credit, contributions.CocoaCredit) else credit


def episode_metrics(valid, returns, lr):
  """`lr`, mean episode `return` and mean `episode_length` of a group rollout, all `[]`:
  `valid [T, N, K]`, `returns [N, K]`, `lr []`."""
  return {"lr": lr, "return": returns.mean(),
          "episode_length": jnp.sum(valid, axis=0).astype(jnp.float32).mean()}


def step_advantages(hooks: hooks_lib.Hooks, aux, traj, kind: str, hp, k_perm, update,
                    params):
  """GRPO's per-step advantages after the hooks' `shape_rewards` (PRM shaping).

  Args:
    hooks: the run's `Hooks`; traj: the groups' trajectory, leaves `[T, N, K]`.
    k_perm: the update's key (the shaping slot draws from `fold_in(k_perm, 2)`).
  Returns:
    `(step_adv [T, N, K], degenerate [N], returns [N, K], signal, aux, metrics)`: the
    group advantage of each episode's (shaped) score at every step, plus the signal's
    per-step bonus where a hook adds one (PRM form "step").
  """
  valid = traj.valid
  if valid.ndim != 3 or traj.rewards.shape != valid.shape:
    raise ValueError(f"traj.rewards and traj.valid must both be [T, N, K], got "
                     f"{traj.rewards.shape} and {valid.shape}")
  returns = jnp.sum(jnp.where(valid, traj.rewards, 0.0), axis=0)     # [N, K]
  signal, aux, metrics = hooks.shape_rewards(
      aux, hooks_lib.Signal(traj.rewards, scores=returns), traj, hp, k_perm, update, params)
  adv, degenerate = baselines.group_advantages(signal.scores, kind=kind)  # [N, K], [N]
  step_adv = jnp.broadcast_to(adv[None], valid.shape)                     # [T, N, K]
  if signal.bonus is not None:
    step_adv = step_adv + signal.bonus
  return step_adv, degenerate, returns, signal, aux, metrics


def finish(hooks: hooks_lib.Hooks, aux, notes, metrics, hook_metrics, traj, returns,
           step_adv, degenerate, lr, with_success: bool, rollout_steps=None):
  """GRPO's per-update metrics, then the hooks' `observe` (a curriculum's step).

  `traj` leaves `[T, N, K]`, `returns [N, K]`, `step_adv [T, N, K]`, `degenerate [N]`;
  `hook_metrics`: what the hooks' earlier slots reported; `rollout_steps`: the steps a
  replaced rollout took (None: the valid steps). Returns `(aux, metrics)`.
  """
  valid = traj.valid
  if with_success:
    metrics["success"] = jnp.mean(
        curriculum.episode_success(traj, returns).astype(jnp.float32))
  metrics.update(episode_metrics(valid, returns, lr),
                 degenerate_frac=jnp.mean(degenerate.astype(jnp.float32)))
  if hooks.counts_steps:   # steps taken: the rollout's (a tree's own count) and the hooks'
    steps = rollout_steps if rollout_steps is not None else jnp.sum(valid).astype(
        jnp.float32)
    hook_metrics = {**hook_metrics, "env_steps": steps + hook_metrics.get("env_steps", 0.0)}
  metrics.update(hook_metrics)
  return hooks.observe(aux, notes, hooks_lib.Outcome(metrics.get("success"), step_adv,
                                                     traj), metrics)
