"""GRPO: group-relative advantages from K rollouts per task, no value function.

One update samples `num_tasks` start states and runs `group_size` (K) episodes from each
(the group rollout: same start state, independent action keys), scores each episode by its
return, and turns the K returns of a task into advantages with `baselines.group_advantages`
("grpo": (R - mean) / (std + eps); "rloo": leave-one-out mean baseline; "drgrpo": R - mean,
no std division). Every step of an episode gets its episode's advantage. The policy then
takes `update_epochs` passes over `num_minibatches` minibatches of tasks on the clipped
surrogate, minus an entropy bonus, plus (optionally) `kl_coef` times a KL penalty to the
frozen initial policy.

A group whose K returns are all equal carries no signal (its advantages are exactly 0);
the fraction of such degenerate groups is logged every update as `degenerate_frac`, the
quantity that explains why GRPO stalls on hard sparse tasks.

Loss aggregation (`config.loss_aggregation`) decides how per-step terms are averaged:
  "token_mean":    over all valid steps of the minibatch;
  "sequence_mean": per episode over its steps, then over episodes (GRPO as published);
  "constant":      summed and divided by (episodes x horizon), Dr. GRPO's length-unbiased
                   normaliser.

Metrics: `loss` and the surrogate's pieces averaged over the minibatch steps, `return`
(mean episode return), `degenerate_frac`, and where the env has success
(`episodes.has_success`) `success`: the fraction of the sampled episodes that solved their
task.

Curriculum (`config.curriculum`, absent by default; `curriculum.add_config(c)` adds it,
see `credit_jax/addons/curriculum.py`): a fixed, success-gated or prioritised (PLR) choice of the
episode length per update, a traced env param, so one compile serves every stage; adds
`curriculum_stage`, `curriculum_value` and `env_steps` (steps actually taken) to the
metrics. Success is `info["success"]` where the env reports it (KeyToDoor-v0), else a
positive return.

One program for every network: `config.network.kind` (mlp | tabular | linear | gru |
transformer; "mlp" when the field is absent) picks an `Actor`, the network as a part that
gives the initial parameters, the rollout policy and the logits of a group rollout or a
minibatch. A memoryless one reads each step's observation; a sequence network ("gru" /
"transformer", fields as PPO's, `credit_jax/algos/ppo_agent.py`; its value head unused)
carries its memory through the group rollout, every member's episode starting from the
initial carry, and the loss replays each whole episode from that carry (with the
parameters that acted, the rollout's log-probs up to float rounding); the frozen
reference of the KL penalty is replayed the same way. The step-credit hooks (VinePPO,
GiGPO, tree groups), which restart states under a memoryless policy, refuse a sequence
network (`features.check`).

RUDDER (`credit_jax/addons/rudder.py`) scores every step, not only the episode: each
step's advantage is the group advantage, among the K members at that step, of its
redistributed return-to-go (`hooks.Signal.step_scores`), which at step 0 is the episode's
score, so there it is GRPO's own.

The update's pieces are functions here that the recipes built on GRPO's fields
(`grpo_relabel.py`, `search_then_train.py`, `hierarchy.py`) call too: `step_advantages`
(the hooks' shaping and the group advantages), `policy_data`, `optimise` (the minibatch
epochs over whole groups), `episode_metrics` and `finish` (metrics, then the hooks'
`observe`).

Hyperparameters in `hparams` (traced): lr, clip_eps, ent_coef, kl_coef, max_grad_norm.

Optional process-reward shaping: a config with an enabled `prm` block (`credit_jax/addons/prm.py`,
`configs/prm.py`) scores episodes by `prm.outcome_weight * return + prm.weight * agg PRM`
(two more traced hparams; form "step" adds `prm.weight * (p_t - p_{t-1})` to each step's
advantage instead), keeps the PRM in `aux["prm_params"]` and logs its metrics.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections

from credit_jax import baselines, episodes, nets, rollout
from credit_jax.addons import (contributions, curriculum, features as features_lib,
                               hooks as hooks_lib)
from credit_jax.algos import losses, optim, train as train_lib
from credit_jax.nets import sequence as sn
from credit_jax.types import PolicyState

HPARAMS = ("lr", "clip_eps", "ent_coef", "kl_coef", "max_grad_norm")
ADVANTAGES = ("grpo", "rloo", "drgrpo")
AGGREGATIONS = ("token_mean", "sequence_mean", "constant")
# Hooks (credit_jax/addons/hooks.py, registry features.py) this recipe takes: a horizon
# curriculum, PRM shaping, and step-level credit from restored states.
HOOKS = ("curriculum", "prm", "vine", "gigpo", "tree", "rudder", "hca", "cocoa")
RECIPE = hooks_lib.Recipe("grpo", HOOKS, rollout=hooks_lib.GROUPS, open=True)


def default_config() -> ml_collections.ConfigDict:
  """GRPO on KeyChain-v0 (T=50, k=3, A=4: random success 1.6%); reaches >= 90% success."""
  c = train_lib.keychain_env(train_lib.base_config(), horizon=50, num_pivotal=3)
  c.algo = "grpo"                 # this recipe

  c.num_updates = 60              # updates (one group rollout each)
  c.num_tasks = 16                # tasks (start states) per update
  c.group_size = 8                # K rollouts per task from the same start state (>= 2)
  c.update_epochs = 2             # passes over each group rollout
  c.num_minibatches = 2           # minibatches of whole groups; must divide num_tasks
  c.advantage = "grpo"            # group advantage: grpo | rloo | drgrpo
  c.loss_aggregation = "token_mean"  # token_mean | sequence_mean | constant (Dr. GRPO)

  c.lr = 3e-3                     # learning rate (a traced hparam)
  c.clip_eps = 0.2                # ratio clip of the surrogate (a traced hparam)
  c.ent_coef = 0.0                # entropy bonus weight (a traced hparam)
  c.use_reference_kl = False      # penalise KL to the frozen initial policy
  c.kl_coef = 0.0                 # its weight, used when use_reference_kl (a traced hparam)
  c.checkpoint_every = 20         # updates between checkpoints (k * chunk_updates)
  train_lib.add_network_kind(c)      # network.kind (mlp | gru | transformer) and its fields
  return c


def validate_fields(config) -> None:
  """Raises `ConfigError` naming the first GRPO-specific field that cannot run."""
  req = train_lib.require
  req(int(config.group_size) >= 2, "group_size",
      f"a group needs at least 2 rollouts to compare, got {config.group_size}")
  train_lib.require_range(config, ("num_tasks", "horizon", "num_updates", "update_epochs",
                                   "num_minibatches"), 1)
  req(config.num_tasks % config.num_minibatches == 0, "num_minibatches",
      f"num_tasks={config.num_tasks} is not divisible by num_minibatches="
      f"{config.num_minibatches} (minibatches split whole groups)")
  train_lib.require_one_of(config.advantage, "advantage", ADVANTAGES)
  train_lib.require_one_of(config.loss_aggregation, "loss_aggregation", AGGREGATIONS)
  train_lib.require_range(config, "clip_eps", 0.0, strict=True)
  train_lib.require_range(config, ("ent_coef", "kl_coef"), 0.0)
  # Recipes built on these fields (grpo_relabel, search_then_train) run MLPs only.
  train_lib.validate_network(config, config.get("algo", "grpo") == "grpo")


validate_config = train_lib.validator("grpo", validate_fields, RECIPE, whole_episodes=True)


def aggregate(x, valid, kind: str):
  """Averages per-step terms `x: [T, N, K]` over valid steps as `kind` says; returns []."""
  valid = valid.astype(x.dtype)
  if kind == "token_mean":
    return jnp.sum(x * valid) / jnp.maximum(jnp.sum(valid), 1.0)
  if kind == "sequence_mean":
    per_seq = jnp.sum(x * valid, axis=0) / jnp.maximum(jnp.sum(valid, axis=0), 1.0)
    return jnp.mean(per_seq)
  return jnp.sum(x * valid) / x.size


def settings(config, env=None):
  """The static settings GRPO's training program reads from `config`, in the order
  `(num_tasks, group, horizon, n_minibatches, n_epochs, n_updates, optimizer,
  with_success, use_kl, advantage kind, loss aggregation)`; `env`: what `envs.make`
  gave for `config` (None: made here)."""
  return (int(config.num_tasks), int(config.group_size), int(config.horizon),
          int(config.num_minibatches), int(config.update_epochs), int(config.num_updates),
          train_lib.make_optimizer(config), episodes.has_success(config, env),
          bool(config.use_reference_kl), str(config.advantage), str(config.loss_aggregation))


def surrogate_loss(logits, ref_logits, mb, hp, agg: str):
  """GRPO's loss on a minibatch from the policy's logits `[T, n, K, A]` at its steps (and
  the frozen reference policy's, or None without the KL term); `(loss [], aux)`.

  `mb` holds `actions`, `log_probs` (at collection), `advantages` and `valid`, `[T, n, K]`
  (`advantages` may be COCOA's `CocoaCredit`, with `old_logits [T, n, K, A]` beside it).
  """
  log_probs = nets.categorical_log_prob(logits, mb["actions"])   # [T, n, K]
  pg, clipped, approx_kl = losses.clipped_policy_terms(logits, mb, hp["clip_eps"])
  entropy = nets.categorical_entropy(logits)
  valid = mb["valid"]
  loss = aggregate(pg, valid, agg) - hp["ent_coef"] * aggregate(entropy, valid, agg)
  kl = jnp.zeros(())
  if ref_logits is not None:
    ref_log_probs = nets.categorical_log_prob(ref_logits, mb["actions"])
    kl = aggregate(losses.kl_to_reference(log_probs, ref_log_probs), valid, agg)
    loss = loss + hp["kl_coef"] * kl
  return loss, {"policy_loss": aggregate(pg, valid, agg), "kl_ref": kl,
                "entropy": episodes.masked_mean(entropy, valid),
                "clip_frac": episodes.masked_mean(clipped, valid),
                "approx_kl": episodes.masked_mean(approx_kl, valid)}


# --- the network as a part ---------------------------------------------------------------

class Actor(NamedTuple):
  """GRPO's policy network, one part for every network kind (module doc).

  network: the flax module. sequential: whether it carries memory (a sequence network).
  init: `key -> params`. policy: the rollout policy (`PolicyFn` or `SequencePolicy`).
  inputs: `traj -> {name: [T, N, K]}`, what a minibatch holds beside the observations
    to replay the episodes of a group rollout `traj` (`{}` for a memoryless network).
  logits: `(params, data) -> [T, N, K, A]`, the policy at the steps of `data`: `obs`
    `[T, N, K, ...]` and the `inputs` entries.
  """
  network: Any
  sequential: bool
  init: Callable
  policy: Any
  inputs: Callable
  logits: Callable

  def rollout_logits(self, params, traj):
    """`[T, N, K, A]` of a group rollout `traj` (every episode replayed)."""
    return self.logits(params, {"obs": traj.obs, **self.inputs(traj)})


def _make_actor(config, env, env_params) -> Actor:
  """The `Actor` `config.network` describes on `env` (wrappers included)."""
  flat = train_lib.flat_network(config)
  network, obs_shape = train_lib.make_network(config, env, env_params, value_head=not flat)
  if flat:
    return Actor(network, False, lambda k: train_lib.init_params(network, k, obs_shape),
                 nets.make_policy_fn(network), lambda traj: {},
                 lambda params, data: network.apply(params, data["obs"])[0])

  def inputs(traj):   # every member's episode starts from the initial carry
    num_tasks, group = traj.actions.shape[1:]
    start = PolicyState(carry=None, prev_action=jnp.full((num_tasks, group), -1, jnp.int32),
                        prev_reward=jnp.zeros((num_tasks, group), jnp.float32))
    return dict(zip(("prev_actions", "prev_rewards", "starts"),
                    rollout.sequence_inputs(traj, start)))

  return Actor(network, True, lambda k: sn.init_params(network, k, obs_shape),
               sn.make_sequence_policy(network, value=False), inputs,
               lambda params, data: sn.unroll_episodes(   # [T, N, K, A]
                   network, params, data["obs"], data["prev_actions"],
                   data["prev_rewards"], data["starts"])[0])


# --- the update's pieces (also the recipes' built on GRPO's fields) ------------------------

def step_advantages(hooks: hooks_lib.Hooks, aux, traj, kind: str, hp, k_perm, update,
                    params):
  """GRPO's per-step advantages after the hooks' `shape_rewards` (PRM shaping).

  Args:
    hooks: the run's `Hooks`; traj: the groups' trajectory, leaves `[T, N, K]`.
    k_perm: the update's key (the shaping slot draws from `fold_in(k_perm, 2)`).
  Returns:
    `(step_adv [T, N, K], degenerate [N], returns [N, K], signal, aux, metrics)`: the
    group advantage of each episode's (shaped) score at every step, plus the signal's
    per-step bonus where a hook adds one (PRM form "step"). Where a hook scores every
    step (`signal.step_scores [T, N, K]`, RUDDER's returns-to-go), the group advantage of
    those scores at each step instead, 0 at invalid steps; `degenerate` stays the
    episode scores' (such a group may still carry signal at later steps).
  """
  valid = traj.valid
  if valid.ndim != 3 or traj.rewards.shape != valid.shape:
    raise ValueError(f"traj.rewards and traj.valid must both be [T, N, K], got "
                     f"{traj.rewards.shape} and {valid.shape}")
  returns = jnp.sum(jnp.where(valid, traj.rewards, 0.0), axis=0)     # [N, K]
  signal, aux, metrics = hooks.shape_rewards(
      aux, hooks_lib.Signal(traj.rewards, scores=returns), traj, hp, k_perm, update, params)
  adv, degenerate = baselines.group_advantages(signal.scores, kind=kind)  # [N, K], [N]
  if signal.step_scores is None:
    step_adv = jnp.broadcast_to(adv[None], valid.shape)                   # [T, N, K]
  elif signal.scores is not returns:   # step_scores[0] would no longer be the score
    raise ValueError("a hook set per-step scores (Signal.step_scores) and another "
                     "rewrote the episode scores: GRPO cannot credit both; turn one off")
  elif signal.step_scores.shape != valid.shape:
    raise ValueError(f"Signal.step_scores must be [T, N, K] = {valid.shape} like "
                     f"traj.valid, got {signal.step_scores.shape}")
  else:
    step_adv = jnp.where(valid, baselines.group_advantages(signal.step_scores,
                                                           kind=kind)[0], 0.0)
  if signal.bonus is not None:
    step_adv = step_adv + signal.bonus
  return step_adv, degenerate, returns, signal, aux, metrics


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


def weighted_optimise(network, state, data, hp, k_perm, config, optimizer, originals):
  """`optimise` for the recipes that add weighted examples to GRPO's groups
  (`grpo_relabel`, `search_then_train`: no reference KL, a token mean): the clipped
  surrogate minus an entropy bonus of `losses.weighted_clipped_policy_loss` under the MLP
  `network`. `data` holds `obs`, `actions`, `log_probs`, `advantages` and `weights`, axis 1
  the tasks; `originals(weights)`: the weights of the sampled examples, whose sum
  normalises the loss. Returns (params, opt_state, metrics, lr)."""
  def loss_fn(params, mb, _, hp):
    logits, _ = network.apply(params, mb["obs"])
    w = mb["weights"]
    return losses.weighted_clipped_policy_loss(
        nets.categorical_log_prob(logits, mb["actions"]), mb["log_probs"],
        mb["advantages"], nets.categorical_entropy(logits), w, jnp.sum(originals(w)),
        hp["clip_eps"], hp["ent_coef"])
  return optimise(loss_fn, state, {}, data, hp, k_perm, anneal_lr=bool(config.anneal_lr),
                  num_updates=int(config.num_updates), num_epochs=int(config.update_epochs),
                  num_minibatches=int(config.num_minibatches), optimizer=optimizer)


def episode_metrics(valid, returns, lr):
  """`lr`, mean episode `return` and mean `episode_length` of a group rollout, all `[]`:
  `valid [T, N, K]`, `returns [N, K]`, `lr []`."""
  return {"lr": lr, "return": returns.mean(),
          "episode_length": jnp.sum(valid, axis=0).astype(jnp.float32).mean()}


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


# --- the program ----------------------------------------------------------------------------

def make_train(config, features=()) -> train_lib.Train:
  """`Train` for GRPO on `config.env_name` (or on a `Checked` config from
  `validate_config`); see `train_lib.Train` for how to call it. `features`: feature
  objects (`hooks.Feature`) beside the registry's."""
  checked = train_lib.checked(config, features, validate_config)
  config, passed = checked.config, checked.features
  (num_tasks, group, horizon, n_mb, n_epochs, n_updates, optimizer, with_success, use_kl,
   kind, agg) = settings(config, checked.made[0])
  env, env_params = features_lib.wrap_env(config, checked.env, checked.env_params, passed)
  actor = _make_actor(config, env, env_params)
  hooks = features_lib.bind(config, RECIPE, env, env_params, actor.policy,
                            num_tasks * group, None if actor.sequential else actor.network,
                            actor.rollout_logits, passed=passed)

  def init_fn(key, hp):
    if actor.sequential:   # the keys in the order the sequence program drew them
      k_params, k_run, k_hooks = jax.random.split(key, 3)
    else:
      k_params, *k_hooks, k_run = jax.random.split(key, 2 + hooks.init_keys)
      k_hooks = k_hooks[0] if k_hooks else None
    params = actor.init(k_params)
    # The reference policy is the initial one, frozen; it rides in the state so a
    # resumed run penalises the same reference.
    aux = {"ref_params": params} if use_kl else {}
    return train_lib.TrainState(
        params=params, opt_state=optimizer.init(params, hp["max_grad_norm"]), key=k_run,
        update=jnp.zeros((), jnp.int32), aux={**aux, **hooks.init(k_hooks)})

  def loss_fn(params, mb, ref_params, hp):
    logits = actor.logits(params, mb)                                  # [T, n, K, A]
    ref_logits = actor.logits(ref_params, mb) if use_kl else None
    return surrogate_loss(logits, ref_logits, mb, hp, agg)

  def update_fn(state, hp):
    key, k_roll, k_perm = jax.random.split(state.key, 3)
    roll_params, notes = hooks.env_params(state.aux, env_params, state.update, k_perm)
    traj, aux, roll_metrics = hooks.collect(state.aux, rollout.collect_groups,
                                            hooks_lib.CollectInput(
        env, roll_params, actor.policy, state.params, k_roll, num_tasks, group, horizon))
    step_adv, degenerate, returns, signal, aux, hook_metrics = step_advantages(
        hooks, aux, traj, kind, hp, k_perm, state.update, state.params)
    credit, aux, est_metrics = hooks.advantages(aux, hooks_lib.EstimatorInput(
        traj, signal, None, step_adv, state.params, hp, k_perm))
    inputs = actor.inputs(traj)
    data = policy_data(traj, credit, lambda: actor.logits(
        state.params, {"obs": traj.obs, **inputs}), **inputs)
    params, opt_state, metrics, lr = optimise(   # every episode stays whole
        loss_fn, state, aux, data, hp, k_perm, anneal_lr=bool(config.anneal_lr),
        num_updates=n_updates, num_epochs=n_epochs, num_minibatches=n_mb,
        optimizer=optimizer)
    aux, metrics = finish(
        hooks, aux, notes, metrics, hooks_lib.merge_metrics(hook_metrics, est_metrics),
        traj, returns, step_adv if isinstance(credit, contributions.CocoaCredit)
        else credit, degenerate, lr, with_success, roll_metrics.get("env_steps"))
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                                update=state.update + 1, aux=aux), metrics

  train = train_lib.Train(
      config=config, init_fn=init_fn, update_fn=update_fn,
      default_hparams={**{k: config[k] for k in HPARAMS},
                       **features_lib.hparams(config, passed)},
      num_updates=n_updates,
      env_steps_per_update=(num_tasks * group
                            * train_lib.episode_steps(config, env, env_params)),
      headline=(("success",) if with_success else ("return",)) + ("degenerate_frac",))
  if actor.sequential:
    return train
  return train_lib.attach_evaluation(train, env, env_params, actor.network)
