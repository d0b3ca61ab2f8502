"""Process reward models (PRMs): step labels, training, calibration, and reward shaping.

A PRM here is a small MLP over (observation, step action) -> P(step is good). Its labels
come from one of (`config.prm.labels`):
  "truth":   the environment's per-step ground truth (`info["step_correct"]`);
  "mc_hard": Monte-Carlo (Math-Shepherd style): `mc_rollouts` completions are run from
             the state after the step (environment-state restore: the state is a pytree,
             copied); the label is 1 iff any of them succeeds;
  "mc_soft": the fraction of them that succeed;
  "outcome": outcome labels only (an implicit PRM, PRIME style): every step of a
             trajectory gets its trajectory's outcome.
Its training data is written by a demonstrator (`demo_policy`) that is right with
probability `demo_correct`, pads with probability `demo_pad` and uses the surface
feature (RunningSum's style bit) mostly on right steps, so a PRM can learn a shortcut.

Shaping (`make_shaper`, used by GRPO and PPO when `config.prm.enabled`). With `form`
"sum" or "min" an episode's score is
    outcome_weight * outcome + weight * agg_t PRM(o_t, a_t)
"sum" (sum over the episode's steps: pays for padding) or "min" (softmin over steps with
temperature `tau`, PURE arXiv 2504.15275: credit is the worst step). With `form` "step"
(per-step difference, potential-based: Phi after step t is p_t = PRM(o_t, a_t), Phi at an
episode's start is 1, a fresh RunningSum claim being right) the episode score is the
outcome alone and every step t gets its own extra credit `weight * (p_t - p_{t-1})`:
a step that breaks a right claim loses ~1, padding and right steps earn ~0, so padding
is never paid. GRPO adds it to the step's group advantage; PPO (`make_step_shaper`)
adds `weight * p_t` ("sum") or `weight * (p_t - p_{t-1})` ("step") to the step's reward.
`weight` and `outcome_weight` are traced hparams (`prm.weight`, `prm.outcome_weight`).
The PRM's parameters ride in the train state (`aux["prm_params"]`) and may be retrained
every `retrain_every` updates on the current policy's steps with `retrain_labels`
("mc_hard" / "mc_soft": Monte-Carlo completions by the current policy from
`retrain_mc_states` of its post-step states, restored from `info["post_state"]`).
Reranking (best-of-N by PRM score) and the compounding of per-step judgements are the
PRM study's (credit_jax/experiments/prm/study.py).

Three modules, one namespace: `prm_labels.py` (demonstrator, frozen-episode rollouts,
Monte-Carlo labels), `credit_jax/nets/prm.py` (the network, its training loop,
calibration) and this one (config, shaping hooks), which re-exports the other two, so
`credit_jax.addons.prm.<name>` reaches all of it.
"""
from __future__ import annotations

from typing import Callable, Dict, NamedTuple, Optional

import jax
import jax.numpy as jnp
import ml_collections

from credit_jax.addons import hooks
from credit_jax.config import require, require_one_of, require_range
# The labels and the model live in their own modules; their names are part of `prm`.
from credit_jax.addons.prm_labels import (analytic_uniform_success, demo_data, demo_policy,
                                          mc_labels, policy_mc_labels, run_episodes,
                                          uniform_policy)
from credit_jax.nets.prm import PRM, bce, evaluate, init_prm, train_prm

LABELS = ("truth", "mc_hard", "mc_soft", "outcome")
_RETRAIN_LABELS = ("truth", "outcome", "mc_hard", "mc_soft")
_FORMS = ("sum", "min", "step")
_PPO_FORMS = ("sum", "step")   # PPO's episodes cross rollouts: no episode-level softmin


def default_config() -> ml_collections.ConfigDict:
  """The `config.prm` block: PRM labels, training, and how it shapes rewards."""
  c = ml_collections.ConfigDict()
  c.enabled = True                # build a PRM and log its metrics (shaping needs weight > 0)
  c.weight = 0.0                  # w: shaping weight of the PRM term (traced hparam prm.weight)
  c.outcome_weight = 1.0          # weight of the outcome reward (traced; 0: PRM-only)
  c.form = "sum"                  # sum | min (softmin, PURE) | step (per-step p_t - p_{t-1})
  c.tau = 0.1                     # softmin temperature of the min form
  c.labels = "truth"              # initial labels: truth | mc_hard | mc_soft | outcome
  c.mc_rollouts = 8               # N completions per step for the mc_* labels
  c.hidden_sizes = (32,)          # PRM MLP hidden layers
  c.demo_episodes = 256           # demonstrator episodes the initial PRM trains on
  c.demo_correct = 0.7            # P(demonstrator's progress step is right)
  c.demo_pad = 0.1                # P(demonstrator pads a step)
  c.demo_style_good = 0.9         # P(surface feature | right step) in the demo data
  c.demo_style_bad = 0.1          # P(surface feature | wrong step) in the demo data
  c.train_steps = 300             # Adam steps of the initial PRM training
  c.batch_size = 256              # PRM minibatch (steps)
  c.lr = 3e-3                     # PRM learning rate
  c.retrain_every = 0             # retrain on the current policy's steps every N updates (0: never)
  c.retrain_labels = "truth"      # labels for retraining: truth | outcome | mc_hard | mc_soft
  c.retrain_steps = 100           # Adam steps per retraining
  c.retrain_mc_states = 128       # mc_* retraining: policy steps labelled by mc_rollouts each
  return c


def validate_config(prm_config) -> None:
  """Checks the `config.prm` block; raises `ConfigError` naming the first bad field."""
  p = prm_config
  require_one_of(p.form, "prm.form", _FORMS)
  require_one_of(p.labels, "prm.labels", LABELS)
  require_one_of(p.retrain_labels, "prm.retrain_labels", _RETRAIN_LABELS)
  require_range(p, "tau", 0.0, strict=True, prefix="prm.")
  require_range(p, ("mc_rollouts", "demo_episodes", "train_steps", "batch_size",
                    "retrain_steps", "retrain_mc_states"), 1, prefix="prm.")
  require(int(p.retrain_every) >= 0, "prm.retrain_every", "must be >= 0")
  for f in ("demo_correct", "demo_pad", "demo_style_good", "demo_style_bad"):
    require(0.0 <= p[f] <= 1.0, f"prm.{f}", f"must be in [0, 1], got {p[f]}")


# ------------------------------------------------------------------------- shaping
def aggregate(prm_probs, valid, form: str, tau: float = 0.1):
  """Aggregates per-step PRM scores `[T, B...]` over valid steps -> `[B...]`.

  "sum": sum_t p_t. "min": softmin_t p_t = sum_t p_t softmax(-p / tau)_t (-> min as
  tau -> 0). An episode with no valid step scores 0.
  """
  if prm_probs.shape != valid.shape:
    raise ValueError(f"prm_probs {prm_probs.shape} and valid {valid.shape} differ")
  if form == "sum":
    return jnp.sum(jnp.where(valid, prm_probs, 0.0), axis=0)
  if form == "min":
    z = jnp.where(valid, -prm_probs / tau, -jnp.inf)
    zmax = jnp.max(z, axis=0, keepdims=True)
    e = jnp.where(valid, jnp.exp(z - jnp.where(jnp.isfinite(zmax), zmax, 0.0)), 0.0)
    den = jnp.sum(e, axis=0)
    return jnp.where(den > 0, jnp.sum(e * prm_probs, 0) / jnp.maximum(den, 1e-30), 0.0)
  raise ValueError(f"form must be one of {_FORMS}, got {form!r}")


def shaped_scores(outcome, prm_probs, valid, weight, outcome_weight, form: str,
                  tau: float = 0.1):
  """Episode scores `[B...]`: outcome_weight * outcome [B...] + weight * aggregate."""
  return outcome_weight * outcome + weight * aggregate(prm_probs, valid, form, tau)


def step_deltas(prm_probs, valid, starts=None, first_prev=None):
  """Per-step differences `d_t = p_t - p_{t-1}` of PRM scores `[T, B...]` (0 where invalid).

  `p_{t-1}` is 1 at an episode's first step: t = 0 when `starts` is None (one episode per
  column, GRPO), else where `starts: [T, B...]` is True, except that the first row takes
  `first_prev: [B...]` when given (PPO: the last score of the previous rollout).
  """
  if prm_probs.shape != valid.shape:
    raise ValueError(f"prm_probs {prm_probs.shape} and valid {valid.shape} differ")
  ones = jnp.ones_like(prm_probs[:1])
  prev = jnp.concatenate([ones if first_prev is None else first_prev[None],
                          prm_probs[:-1]], axis=0)
  if starts is not None:
    if starts.shape != prm_probs.shape:
      raise ValueError(f"starts {starts.shape} must be {prm_probs.shape}")
    first = jnp.zeros_like(starts).at[0].set(first_prev is None)
    prev = jnp.where(jnp.logical_or(starts, first), 1.0, prev)
  return jnp.where(valid, prm_probs - prev, 0.0)


class Shaper(NamedTuple):
  init: Callable        # key -> {"prm_params": ...}
  # (aux, traj, returns, hp, key, update, policy_params) -> (scores, aux, metrics, bonus)
  shape: Callable
  hparams: Dict[str, float]
  probs: Callable       # (params, obs [..., D], actions [...]) -> P(good) [...]


def _metrics(probs, traj, valid):
  info = traj.info
  w = valid.astype(jnp.float32)
  tot = jnp.maximum(jnp.sum(w), 1.0)
  mean = lambda x: jnp.sum(x.astype(jnp.float32) * w) / tot
  correct = info["step_correct"]
  surface = jnp.logical_and(info["surface"], valid)
  return {"prm_score": mean(probs), "step_accuracy": mean(correct),
          "prm_gap": mean(probs) - mean(correct), "padding_frac": mean(info["padding"]),
          "surface_frac": mean(info["surface"]),
          "surface_wrong_frac": jnp.sum(surface & ~correct) / jnp.maximum(
              jnp.sum(surface), 1.0),
          "prm_accuracy": mean((probs > 0.5) == correct)}


def _retrainer(pc, net, env, env_params, network):
  """`(params, traj, returns, valid, key, update, policy_params) -> (params, metrics)`."""
  every, kind = int(pc.retrain_every), str(pc.retrain_labels)
  if every == 0:
    return None
  if kind.startswith("mc_") and network is None:
    raise ValueError("prm.retrain_labels='mc_*' needs the recipe's policy network")

  def retrain(params, traj, returns, valid, key, update, policy_params):
    k_data, k_fit = jax.random.split(key)
    if kind.startswith("mc_"):
      data, hard, soft = policy_mc_labels(env, env_params, network, policy_params, traj,
                                          valid, k_data, int(pc.retrain_mc_states),
                                          int(pc.mc_rollouts))
      labels = hard if kind == "mc_hard" else soft
    else:
      flat = lambda x: x.reshape((valid.size,) + x.shape[valid.ndim:])
      y = (traj.info["step_correct"] if kind == "truth" else
           jnp.broadcast_to(returns > 0, valid.shape))
      data = {"obs": flat(traj.obs), "actions": flat(traj.actions), "valid": flat(valid)}
      labels = flat(y).astype(jnp.float32)
    now = jnp.logical_and(update > 0, update % every == 0)
    params = jax.lax.cond(
        now, lambda p: train_prm(net, p, data, labels, k_fit, int(pc.retrain_steps),
                                 int(pc.batch_size), float(pc.lr))[0],
        lambda p: p, params)
    return params, {"prm_retrained": now.astype(jnp.float32)}
  return retrain


def _build(config, env, env_params, network):
  """(pc, PRM net, init, retrain or None) for `make_shaper` / `make_step_shaper`."""
  pc = config.prm
  if int(config.get("history_window", 0) or 0) > 0:
    raise ValueError("config.prm: the PRM reads single observations; set history_window=0")
  if not hasattr(env, "correct_value"):
    raise ValueError(f"config.prm needs a step-verifiable env (RunningSum-v0), got "
                     f"{config.env_name}")
  net = PRM(num_actions=env.num_actions, hidden_sizes=tuple(pc.hidden_sizes))

  def init(key):
    k_init, k_data, k_train = jax.random.split(key, 3)
    params = init_prm(net, k_init, env.obs_shape[0])
    data = demo_data(env, env_params, pc, k_data, int(pc.demo_episodes))
    params, _ = train_prm(net, params, data, data[pc.labels], k_train,
                          int(pc.train_steps), int(pc.batch_size), float(pc.lr))
    return {"prm_params": params}
  return pc, net, init, _retrainer(pc, net, env, env_params, network)


def _hparams(pc):
  return {"prm.weight": float(pc.weight), "prm.outcome_weight": float(pc.outcome_weight)}


def make_shaper(config, env, env_params, network=None) -> Optional[Shaper]:
  """GRPO's PRM shaping hook, or None when `config` has no enabled `prm`.

  `shape(aux, traj [T, N, K], returns [N, K], hp, key, update, policy_params)` returns
  `(scores [N, K], aux, metrics, step_bonus [T, N, K])`: the episode scores the group
  advantages are computed from, and a per-step credit added to them (zeros except for
  form "step"). `network` (the policy) is needed by Monte-Carlo retraining only.
  """
  if config.get("prm") is None or not config.prm.enabled:
    return None
  pc, net, init, retrain = _build(config, env, env_params, network)
  form, tau = str(pc.form), float(pc.tau)
  probs_fn = lambda params, obs, actions: jax.nn.sigmoid(net.apply(params, obs, actions))

  def shape(aux, traj, returns, hp, key, update, policy_params=None):
    params, valid = aux["prm_params"], traj.valid
    probs = probs_fn(params, traj.obs, traj.actions)                     # [T, N, K]
    if form == "step":
      scores = hp["prm.outcome_weight"] * returns
      bonus = hp["prm.weight"] * step_deltas(probs, valid)
    else:
      scores = shaped_scores(returns, probs, valid, hp["prm.weight"],
                             hp["prm.outcome_weight"], form, tau)
      bonus = jnp.zeros_like(probs)
    metrics = {**_metrics(probs, traj, valid), "shaped_score": jnp.mean(scores)}
    if retrain is not None:
      params, m = retrain(params, traj, returns, valid, key, update, policy_params)
      metrics.update(m)
    return scores, {**aux, "prm_params": params}, metrics, bonus

  return Shaper(init=init, shape=shape, hparams=_hparams(pc), probs=probs_fn)


def make_step_shaper(config, env, env_params, network=None) -> Optional[Shaper]:
  """PPO's PRM shaping hook (per-step rewards), or None without an enabled `prm`.

  `shape(aux, traj [T, B], None, hp, key, update, policy_params)` returns
  `(rewards [T, B], aux, metrics, None)`: `outcome_weight * r_t + weight * p_t` ("sum") or
  `outcome_weight * r_t + weight * (p_t - p_{t-1})` ("step", p_{t-1} = 1 at an episode's
  first step; the rollout's last score rides in `aux["prm_prev"]` to the next one). The
  PRM's state in `aux`: `prm_params`, `prm_prev [B]`, `prm_start [B]` (the next step
  starts an episode). Retraining (truth / mc labels) as in GRPO; "outcome" labels need
  whole episodes and are refused.
  """
  if config.get("prm") is None or not config.prm.enabled:
    return None
  pc, net, init_params, retrain = _build(config, env, env_params, network)
  form = str(pc.form)
  if form not in _PPO_FORMS:
    raise ValueError(f"prm.form: PPO shapes per step, form must be one of {_PPO_FORMS}, "
                     f"got {form!r}")
  if retrain is not None and pc.retrain_labels == "outcome":
    raise ValueError("prm.retrain_labels='outcome' needs whole episodes (GRPO); use truth "
                     "or mc_* with PPO")
  probs_fn = lambda params, obs, actions: jax.nn.sigmoid(net.apply(params, obs, actions))
  batch = int(config.num_envs)

  def init(key):
    return {**init_params(key), "prm_prev": jnp.ones((batch,), jnp.float32),
            "prm_start": jnp.ones((batch,), bool)}

  def shape(aux, traj, returns, hp, key, update, policy_params=None):
    del returns
    params, valid = aux["prm_params"], traj.valid
    probs = probs_fn(params, traj.obs, traj.actions)                     # [T, B]
    if form == "step":
      dones = jnp.logical_or(traj.terminated, traj.truncated)
      starts = jnp.concatenate([aux["prm_start"][None], dones[:-1]], axis=0)
      prev = jnp.where(aux["prm_start"], 1.0, aux["prm_prev"])
      term = step_deltas(probs, valid, starts=starts.at[0].set(False), first_prev=prev)
    else:
      term = jnp.where(valid, probs, 0.0)
    rewards = hp["prm.outcome_weight"] * traj.rewards + hp["prm.weight"] * term
    metrics = {**_metrics(probs, traj, valid), "shaped_reward": jnp.mean(rewards)}
    if retrain is not None:
      params, m = retrain(params, traj, jnp.zeros(valid.shape[1:]), valid, key, update,
                          policy_params)
      metrics.update(m)
    dones = jnp.logical_or(traj.terminated[-1], traj.truncated[-1])
    aux = {**aux, "prm_params": params, "prm_prev": probs[-1], "prm_start": dones}
    return rewards, aux, metrics, None

  return Shaper(init=init, shape=shape, hparams=_hparams(pc), probs=probs_fn)


class PrmFeature(hooks.Feature):
  """PRM shaping as a hook (`credit_jax/addons/hooks.py`), slot `shape_rewards`: GRPO's
  episode scores (`make_shaper`) or PPO's per-step rewards (`make_step_shaper`), the PRM
  in `TrainState.aux` (`prm_params`; PPO also `prm_prev`, `prm_start`), its weights
  traced hparams. Its `init` draws from the key the recipe gives the hooks."""
  name = "prm"
  field = "prm.enabled"
  traced = ("weight", "outcome_weight")

  def validate(self, config, recipe: hooks.Recipe) -> None:
    validate_config(config.prm)
    if recipe.rollout == hooks.CONTINUING:
      kind = str(config.get("network", {}).get("kind", "mlp"))
      require(kind == "mlp", "network.kind", f"PRM shaping needs 'mlp', got {kind!r}")
      require(config.prm.form in _PPO_FORMS, "prm.form",
              f"PPO shapes per step: one of {_PPO_FORMS}, got {config.prm.form!r}")

  def bind(self, context: hooks.Context) -> hooks.Bound:
    continuing = context.recipe.rollout == hooks.CONTINUING
    make = make_step_shaper if continuing else make_shaper
    shaper = make(context.config, context.env, context.env_params,
                  context.network)
    return _PrmBound(shaper, continuing)


class _PrmBound(hooks.Bound):
  init_key = True

  def __init__(self, shaper: Shaper, continuing: bool):
    self.shaper, self.continuing = shaper, continuing
    self.owns = ("prm_params", "prm_prev", "prm_start") if continuing else ("prm_params",)

  def init(self, key):
    return self.shaper.init(key)

  def shape_rewards(self, carry, signal, traj, hp, key, update, params):
    if self.continuing:   # per-step rewards [T, B] for GAE
      rewards, carry, metrics, _ = self.shaper.shape(
          carry, traj._replace(rewards=signal.rewards), None, hp, key, update, params)
      return signal._replace(rewards=rewards), carry, metrics
    scores, carry, metrics, bonus = self.shaper.shape(carry, traj, signal.scores, hp, key,
                                                      update, params)
    if signal.bonus is not None:
      bonus = signal.bonus + bonus
    return signal._replace(scores=scores, bonus=bonus), carry, metrics


__all__ = ["PRM", "PrmFeature", "Shaper", "aggregate", "analytic_uniform_success", "bce",
           "default_config", "demo_data", "demo_policy", "evaluate", "init_prm",
           "make_shaper", "make_step_shaper", "mc_labels", "policy_mc_labels",
           "run_episodes", "shaped_scores", "step_deltas", "train_prm", "uniform_policy",
           "validate_config"]
