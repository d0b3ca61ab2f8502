"""GRPO with hindsight relabeling: failed group rollouts re-used as successes at what
they achieved.

One update runs GRPO's group rollout (`num_tasks` start states x `group_size` episodes)
in a goal environment and computes the usual group advantages from the real returns.
With `relabel` on, every episode that FAILED its goal also yields `relabel_goals`
relabeled episodes (`credit_jax.relabel.relabel`, strategy `relabel_strategy`:
"final" = the goal achieved at its end, "episode" = one achieved anywhere in it). A
relabeled episode ends at its first success under the new goal, its reward comes from
the environment's verifier, and it is **re-evaluated under the new goal**: the goal part
of its observations is replaced and the behaviour policy's log-probabilities are
recomputed for it, so the clipped surrogate's ratio compares like with like.

Relabeled episodes are extra, weighted examples next to the originals (which are always
kept). Their advantage is their verified return (1) minus the task's real success rate
in this group, their weight `relabel_schedule(success_ema, relabel_weight,
relabel_threshold, relabel_ramp)` (the warm start: full weight while real success is
rare, off above the threshold). Modes (`config.relabel`):

  "plain": the relabeled episode counts as if it had been sampled for its new goal
           (biased: the actions were chosen for the original goal);
  "iw":    its weight is also multiplied by the clipped importance ratio
           `min(rho_clip, prod_t pi(a_t|s_t,g') / pi(a_t|s_t,g))` of the behaviour policy
           under the new and the original goal (`relabel.goal_importance_weights`),
           the hindsight policy gradient correction; the log-ratio, the mean weight and
           the fraction clipped are logged so the two modes can be compared;
  "none":  plain GRPO (the control arm).

The per-step loss is the clipped surrogate minus an entropy bonus, summed over valid
steps with the example weights and divided by the number of valid ORIGINAL steps, so
relabeled examples add to GRPO's gradient rather than dilute it. Hyperparameters in
`hparams` (traced): lr, clip_eps, ent_coef, max_grad_norm, relabel_weight,
relabel_threshold, relabel_ramp, rho_clip, importance_weighted (the modes are traced
values, see `mode_hparams`, so all three run in one compiled program).

`success` is the fraction of the sampled episodes that solved their original goal.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections

from credit_jax import baselines, envs, nets, relabel, rollout
from credit_jax.algos import dqn, grpo, train as train_lib

HPARAMS = ("lr", "clip_eps", "ent_coef", "max_grad_norm", "relabel_weight",
           "relabel_threshold", "relabel_ramp", "rho_clip", "importance_weighted")
MODES = ("none", "plain", "iw")


def mode_hparams(mode: str, relabel_weight: float = 1.0) -> dict:
  """The two hparams that select a mode: `{"relabel_weight", "importance_weighted"}`.

  The modes differ only in traced values, so one compiled program runs all three
  (vmap over modes and seeds): "none" is weight 0, "iw" sets importance_weighted 1.
  """
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
  return {"relabel_weight": 0.0 if mode == "none" else float(relabel_weight),
          "importance_weighted": 1.0 if mode == "iw" else 0.0}


def default_config() -> ml_collections.ConfigDict:
  """GRPO + relabeling ("plain", goals from each failure's final state) on GoalGrid-v0.

  A 9x9 open grid whose goal is any cell, 18 steps (random success 13%); why this task
  and what each mode measured there: configs/relabel.py.
  """
  c = dqn.add_relabel_fields(grpo.default_config())
  c.algo = "grpo_relabel"       # this recipe
  c.env_name = "GoalGrid-v0"      # a goal environment
  c.env_kwargs = ml_collections.ConfigDict()  # overrides passed to envs.make
  c.env_kwargs.size = 9           # grid side
  c.env_kwargs.targets = "all"    # every cell can be the goal
  c.env_kwargs.max_steps_in_episode = 18  # time limit
  c.horizon = 18                  # rollout steps per episode (the env's limit)
  c.num_updates = 150             # updates (one group rollout each)
  c.max_grad_norm = 1.0           # global gradient-norm clip (a traced hparam)
  c.relabel = "plain"             # none | plain | iw (importance-weighted)
  c.relabel_strategy = "final"    # final | episode: where relabeled goals come from
  c.relabel_goals = 1             # relabeled episodes per failed episode
  c.relabel_threshold = 0.8       # real success rate at which relabeling switches off
  c.relabel_ramp = 0.3            # it fades out over [threshold - ramp, threshold]
  c.rho_clip = 1.0                # largest importance weight, "iw" mode (a traced hparam)
  c.chunk_updates = 25            # updates per compiled call (one progress line each)
  return train_lib.checkpoint_at_end(c)


def validate_fields(config) -> None:
  """Raises `ConfigError` naming the first recipe-specific field that cannot run."""
  grpo.validate_fields(config)
  req = train_lib.require
  train_lib.require_one_of(config.relabel, "relabel", MODES)
  req(config.relabel_strategy in ("final", "episode"), "relabel_strategy",
      f"on-policy relabeling needs whole episodes: 'final' or 'episode', got "
      f"{config.relabel_strategy!r}")
  train_lib.require_range(config, "relabel_goals", 1)
  req(config.loss_aggregation == "token_mean", "loss_aggregation",
      f"the relabeling recipe uses a weighted token mean, got {config.loss_aggregation!r}")
  req(not config.use_reference_kl, "use_reference_kl",
      "no reference-KL term in the relabeling recipe")
  train_lib.require_range(config, "rho_clip", 0.0, strict=True)
  dqn.validate_relabel_fields(config)


validate_config = train_lib.validator("grpo_relabel", validate_fields, whole_episodes=True,
                                      checked=False)


def make_train(config, features=()) -> train_lib.Train:
  """`Train` for GRPO(+relabeling) on goal environment `config.env_name`."""
  validate_config(config, features)   # it takes no features: any turned on is refused
  env, env_params = train_lib.make_env(config)
  env = envs.DesiredGoalWrapper(env)
  network, obs_shape = train_lib.make_network(config, env, env_params, value_head=False)
  policy_fn = nets.make_policy_fn(network)
  num_tasks, group, horizon = int(config.num_tasks), int(config.group_size), int(config.horizon)
  n_updates, optimizer = int(config.num_updates), train_lib.make_optimizer(config)
  kind = str(config.advantage)
  strategy, num_goals = str(config.relabel_strategy), int(config.relabel_goals)
  ema_decay = float(config.success_ema)

  def init_fn(key, hp):
    return train_lib.init_train_state(network, key, obs_shape, hp, optimizer,
                                   lambda params: {"success_ema": jnp.zeros(())})

  def relabeled_examples(state, traj, returns, key, weight, hp):
    """Relabeled episodes [T, N, K, m] of the failed members: obs, actions, log-probs
    under the new goal, advantages and weights, plus their metrics."""
    out = relabel.relabel(env, traj, key, strategy=strategy, num_goals=num_goals)
    rel = jax.tree.map(lambda x: x[:, :, :, 1:], out.traj)              # [T, N, K, m]
    valid = jnp.logical_and(rel.valid, (returns <= 0)[None, :, :, None])
    # Re-evaluation: the behaviour policy (these params collected traj) under g'.
    log_probs_new = nets.categorical_log_prob(network.apply(state.params, rel.obs)[0],
                                              rel.actions)
    ret_new = jnp.sum(jnp.where(valid, rel.rewards, 0.0), axis=0)       # [N, K, m]
    # Baseline: the task's real success rate in this group.
    adv = ret_new - jnp.mean(returns, axis=1)[:, None, None]
    iw, log_rho = relabel.goal_importance_weights(
        log_probs_new, rel.log_probs, valid, rel.dones, hp["rho_clip"])
    example_w = weight * jnp.where(hp["importance_weighted"] > 0, iw,
                                   valid.astype(jnp.float32))
    has = valid[0]                       # relabeled episodes are valid from step 0 on
    n_rel = jnp.maximum(jnp.sum(has), 1)
    metrics = {
        "relabeled_frac": jnp.mean(jnp.any(has, axis=-1).astype(jnp.float32)),
        "iw_mean": jnp.sum(jnp.where(has, iw[0], 0.0)) / n_rel,
        "iw_clip_frac": jnp.sum(has & (log_rho[0] > jnp.log(hp["rho_clip"]))) / n_rel,
        "log_rho_mean": jnp.sum(jnp.where(has, log_rho[0], 0.0)) / n_rel}
    data = {"obs": rel.obs, "actions": rel.actions,
            "log_probs": jax.lax.stop_gradient(log_probs_new),
            "advantages": jnp.broadcast_to(adv[None], valid.shape),
            "weights": jnp.where(valid, example_w, 0.0)}
    return data, metrics

  def update_fn(state, hp):
    key, k_roll, k_rel, k_perm = jax.random.split(state.key, 4)
    traj = rollout.collect_groups(env, env_params, policy_fn, state.params, k_roll,
                                  num_tasks, group, horizon)            # [T, N, K]
    valid = traj.valid
    returns = jnp.sum(jnp.where(valid, traj.rewards, 0.0), axis=0)     # [N, K]
    success = jnp.mean((returns > 0).astype(jnp.float32))
    ema = ema_decay * state.aux["success_ema"] + (1.0 - ema_decay) * success
    adv, degenerate = baselines.group_advantages(returns, kind=kind)          # [N, K]
    # Copy axis M last: [T, N, K, M], M = 1 (original) + relabeled goals.
    data = {"obs": traj.obs[:, :, :, None], "actions": traj.actions[..., None],
            "log_probs": traj.log_probs[..., None],
            "advantages": jnp.broadcast_to(adv[None], valid.shape)[..., None],
            "weights": valid.astype(jnp.float32)[..., None]}
    weight = relabel.relabel_schedule(ema, hp["relabel_weight"],
                                        hp["relabel_threshold"], hp["relabel_ramp"])
    rel_data, rel_metrics = relabeled_examples(state, traj, returns, k_rel, weight, hp)
    data = jax.tree.map(lambda a, b: jnp.concatenate([a, b], axis=3), data, rel_data)
    # Minibatches split the task axis (axis 1), so groups and their relabels stay whole.
    # Normalised by the number of real (original) valid steps, so relabeled examples
    # add gradient on top of GRPO's instead of diluting it.
    params, opt_state, metrics, lr = grpo.weighted_optimise(
        network, state, data, hp, k_perm, config, optimizer, lambda w: w[..., 0])
    metrics.update({**rel_metrics, **grpo.episode_metrics(valid, returns, lr),
                    "success": success, "success_ema": ema, "relabel_weight": weight,
                    "degenerate_frac": jnp.mean(degenerate.astype(jnp.float32))})
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                             update=state.update + 1, aux={"success_ema": ema}), metrics

  return train_lib.attach_evaluation(train_lib.Train(   # evaluated on the env's own goals
      config=config, init_fn=init_fn, update_fn=update_fn,
      default_hparams={**{k: config[k] for k in HPARAMS if k in config},
                       **mode_hparams(config.relabel, config.relabel_weight)},
      num_updates=n_updates,
      env_steps_per_update=(num_tasks * group
                            * train_lib.episode_steps(config, env, env_params)),
      headline=("success", "relabel_weight", "degenerate_frac")), env, env_params, network)
