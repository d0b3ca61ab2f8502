"""PPO with GAE and a value head, on fixed-length auto-resetting rollouts.

One update: collect `num_steps` steps from `num_envs` environments (episodes continue
across updates), compute GAE with episode boundaries as data (a terminated step does not
bootstrap; a truncated one bootstraps from the value of its final observation, which the
auto-reset would otherwise hide), then `update_epochs` passes of `num_minibatches`
shuffled minibatches of the clipped surrogate + value loss - entropy bonus.

Defaults reproduce PureJaxRL's CartPole setting (4 envs x 128 steps, 4 epochs x 4
minibatches, lr 2.5e-4 annealed, gamma .99, lambda .95, clip .2, entropy .01, value .5,
grad norm .5, 64-unit tanh MLPs) with one difference on purpose: truncation bootstraps.

Metrics: `loss` and the clipped-surrogate pieces averaged over the minibatch steps,
`return` (mean return of the episodes that ended in this rollout) and, where the env has
success (`episodes.has_success`), `success`: the fraction of those episodes the sampled
policy solved (both carry the previous value when no episode ended).

Hyperparameters in `hparams` (traced, sweepable by vmap): lr, gamma, gae_lambda,
clip_eps, ent_coef, vf_coef, max_grad_norm.

Curriculum (`config.curriculum`, absent by default; see `credit_jax/addons/curriculum.py`): the
episode length `horizon` of KeyChain-v0 chosen per update (fixed, gated, or PLR scored by
learnability or by value loss from this update's GAE), applied to the episodes that start
in that update; adds `curriculum_stage`, `curriculum_value` and `env_steps`.

`config.network.kind` picks the network: "mlp" (the default when the field is absent;
this module), or "gru" / "transformer", sequence networks with memory of the episode,
trained by `credit_jax.algos.ppo_sequence` (minibatches over whole environment windows).
`config.network.critic_kind` ("same": that network's value head, the default) and
`config.network.critic_oracle` give the critic a network of its own (an MLP actor with a
GRU critic, the reverse, a critic that also sees the environment's ground-truth state),
trained by `credit_jax.algos.ppo_critics`. `config.gae_gradient_every = N > 0` adds
metrics `gae_grad_*` every N updates: the GAE policy gradient under the critic against
KeyChain's exact gradient (`credit_jax/addons/gae_probe.py`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections

from credit_jax import returns
from credit_jax.addons import curriculum, hooks as hooks_lib, prm, step_credit
from credit_jax import nets, rollout
from credit_jax.algos import train as train_lib, losses, ppo_critics, ppo_sequence
from credit_jax import episodes

HPARAMS = ("lr", "gamma", "gae_lambda", "clip_eps", "ent_coef", "vf_coef", "max_grad_norm")
NETWORK_KINDS = ("mlp", "gru", "transformer")
# Hooks (credit_jax/addons/hooks.py) this recipe takes: VinePPO's Monte-Carlo advantages
# (credit_jax/addons/step_credit.py).
HOOKS = ("vine",)
RECIPE = hooks_lib.Recipe("ppo", HOOKS, rollout=hooks_lib.CONTINUING, critic=True)


def network_kind(config) -> str:
  """`config.network.kind`, "mlp" when the config has no such field."""
  return str(config.network.get("kind", "mlp"))


def default_config() -> ml_collections.ConfigDict:
  """PPO on CartPole-v1 with PureJaxRL's settings (reaches return ~500 in 5e5 steps)."""
  c = train_lib.base_config()
  c.algo = "ppo"                  # this recipe
  c.env_name = "CartPole-v1"      # any id of credit_jax.envs.registered_envs()

  c.total_timesteps = 500_000     # env steps per seed; updates = this // (envs * steps)
  c.num_envs = 4                  # parallel environments per seed
  c.num_steps = 128               # rollout length per update, per environment
  c.update_epochs = 4             # passes over each rollout
  c.num_minibatches = 4           # minibatches per pass; must divide num_envs * num_steps

  c.lr = 2.5e-4                   # learning rate (a traced hparam)
  c.anneal_lr = True              # linearly anneal lr to 0 over the run
  c.max_grad_norm = 0.5           # global gradient-norm clip (a traced hparam)
  c.gamma = 0.99                  # discount (a traced hparam)
  c.gae_lambda = 0.95             # GAE lambda (a traced hparam)
  c.gae_method = "auto"           # returns.gae method: "scan", "associative" or "auto"
  c.clip_eps = 0.2                # PPO ratio clip, also the value clip (a traced hparam)
  c.clip_value_loss = True        # clip the value update around the rollout's values
  c.ent_coef = 0.01               # entropy bonus weight (a traced hparam)
  c.vf_coef = 0.5                 # value loss weight (a traced hparam)

  train_lib.add_network_kind(c)      # network.kind (mlp | gru | transformer) and its fields
  ppo_critics.add_critic_fields(c)  # network.critic_kind, network.critic_oracle
  ppo_sequence.add_fields(c)      # network.bptt_chunk (GRU truncated BPTT; 0: off)

  c.chunk_updates = 61            # updates per compiled call (one progress line each)
  c.checkpoint_every = 244        # updates between checkpoints (k * chunk_updates)
  return c


def num_updates(config) -> int:
  return int(config.total_timesteps) // (config.num_envs * config.num_steps)


def validate_fields(config) -> None:
  """Raises `ConfigError` naming the first PPO-specific field that cannot run."""
  req = train_lib.require
  for f in ("num_envs", "num_steps", "update_epochs", "num_minibatches"):
    req(int(config[f]) >= 1, f, f"must be >= 1, got {config[f]}")
  batch = config.num_envs * config.num_steps
  req(batch % config.num_minibatches == 0, "num_minibatches",
      f"batch num_envs * num_steps = {config.num_envs} * {config.num_steps} = {batch} is "
      f"not divisible by num_minibatches={config.num_minibatches}")
  req(num_updates(config) >= 1, "total_timesteps",
      f"{config.total_timesteps} is less than one update of num_envs * num_steps = "
      f"{batch} steps")
  req(0.0 <= config.gamma <= 1.0, "gamma", f"must lie in [0, 1], got {config.gamma}")
  req(0.0 <= config.gae_lambda <= 1.0, "gae_lambda",
      f"must lie in [0, 1], got {config.gae_lambda}")
  req(config.gae_method in ("scan", "associative", "auto"), "gae_method",
      f"must be scan, associative or auto, got {config.gae_method!r}")
  req(config.clip_eps > 0.0, "clip_eps", f"must be > 0, got {config.clip_eps}")
  for f in ("ent_coef", "vf_coef"):
    req(config[f] >= 0.0, f, f"must be >= 0, got {config[f]}")
  kind = network_kind(config)
  req(kind in NETWORK_KINDS, "network.kind", f"must be one of {NETWORK_KINDS}, got {kind!r}")
  if kind != "mlp":
    ppo_sequence.validate_config(config)
  ppo_critics.validate_fields(config)
  curriculum.validate_ppo(config)   # curriculum hook (credit_jax/addons/curriculum.py)
  step_credit.check(config, RECIPE)
  req(not (step_credit.enabled(config) and ppo_critics.separate_critic(config)),
      "network.critic_kind", "the vine hook runs with PPO's own value head only: set "
      "network.critic_kind='same' and network.critic_oracle=False")
  prm_on = config.get("prm") is not None and bool(config.prm.get("enabled", False))
  if config.get("prm") is not None:   # optional PRM shaping (credit_jax/addons/prm.py)
    prm.validate_config(config.prm, req)
    req(kind == "mlp" or not prm_on, "network.kind", "PRM shaping needs 'mlp'")
    req(not prm_on or config.prm.form in prm.PPO_FORMS, "prm.form",
        f"PPO shapes per step: one of {prm.PPO_FORMS}, got {config.prm.form!r}")
  req(not ((curriculum.enabled(config) or prm_on) and ppo_critics.separate_critic(config)),
      "network.critic_kind", "a curriculum or PRM shaping runs with PPO's own value head "
      "only: set network.critic_kind='same' and network.critic_oracle=False")


def validate_config(config) -> None:
  """Raises `ConfigError` naming the first field of `config` that cannot run."""
  train_lib.validate(config, "ppo", validate_fields)


def advantages_with_boundaries(value_fn, traj, next_obs, gamma, gae_lambda,
                               method: str = "auto", max_truncations=None):
  """Values and GAE for a fixed-length auto-resetting rollout, boundaries handled as data.

  Args:
    value_fn: `obs [N, *obs_shape] -> values [N]` under the current parameters.
    traj: Trajectory [T, B]; its `final_obs` is what a truncated step bootstraps from.
    next_obs: [B, *obs_shape] the observation after the rollout's last step.
    gamma, gae_lambda: [] discount and lambda.
    max_truncations: None, or an int `k` such that no environment (column of `traj`) has
      more than `k` truncated steps (`rollout.max_truncations` gives it from the time
      limit). With `k` the value network runs on the `k` first truncated steps' `final_obs`
      per environment (`T B + B + k B` rows) instead of every step's (`2 T B + B`); a
      column with more than `k` truncations gets NaN advantages, so a wrong bound stops
      training (the runner's NaN check) instead of bootstrapping from wrong values.

  Returns:
    `(advantages [T, B], values [T, B])`: `values` of `traj.obs`; terminated steps do not
    bootstrap, truncated steps bootstrap from the value of `final_obs`, the last step
    from the value of `next_obs`.
  """
  num_steps, batch = traj.rewards.shape
  obs_shape = traj.obs.shape[2:]
  if jnp.shape(next_obs) != (batch,) + obs_shape:
    raise ValueError(f"next_obs must be [B, *obs_shape] = {(batch,) + obs_shape}, got "
                     f"{jnp.shape(next_obs)}")
  if max_truncations is not None and (int(max_truncations) != max_truncations
                                      or max_truncations < 0):
    raise ValueError(f"max_truncations must be None or an int >= 0, got {max_truncations}")
  n = num_steps * batch
  if max_truncations is None or max_truncations >= num_steps:
    hits, final_obs = None, traj.final_obs.reshape((n,) + obs_shape)
  else:
    # The j-th truncated step of each column (j < k): a one-hot [T, B] mask per j and
    # its row index (argmax of an all-False column is 0: gathered, then masked out).
    rank = jnp.cumsum(traj.truncated.astype(jnp.int32), axis=0)       # [T, B]
    hits = [jnp.logical_and(traj.truncated, rank == j + 1)
            for j in range(int(max_truncations))]
    rows = jnp.stack([jnp.argmax(h, axis=0) for h in hits]) if hits else \
        jnp.zeros((0, batch), jnp.int32)                               # [k, B]
    final_obs = jnp.take_along_axis(
        traj.final_obs, rows.reshape(rows.shape + (1,) * len(obs_shape)), axis=0)
    final_obs = final_obs.reshape((-1,) + obs_shape)                   # [k B, ...]
  # One value pass over every observation the estimator needs, after the rollout rather
  # than inside it: on CPU a [B]-row matmul per step costs several times more per row
  # than one pass over all rows (16 vmapped seeds, 4 envs: ~25 us per small matmul).
  v = value_fn(jnp.concatenate([traj.obs.reshape((n,) + obs_shape), next_obs, final_obs],
                               axis=0))
  values = v[:n].reshape(num_steps, batch)
  values_tp1 = jnp.concatenate([values, v[n:n + batch][None]], axis=0)  # [T + 1, B]
  v_final = v[n + batch:]
  if hits is None:
    final_values = v_final.reshape(num_steps, batch)
  else:
    v_final = v_final.reshape(len(hits), batch)
    final_values = jnp.zeros((num_steps, batch), v.dtype)
    for j, h in enumerate(hits):
      final_values = jnp.where(h, v_final[j][None], final_values)
  discounts = jnp.full_like(traj.rewards, gamma)
  advantages = returns.gae(traj.rewards, discounts, values_tp1, gae_lambda,
                      terminated=traj.terminated, truncated=traj.truncated,
                      final_values=final_values, method=method)
  if hits is not None:
    overflow = jnp.sum(traj.truncated, axis=0) > len(hits)             # [B]
    advantages = jnp.where(overflow[None], jnp.nan, advantages)
  return advantages, values


def make_train(config) -> train_lib.Train:
  """`Train` for PPO on `config.env_name`; see `train_lib.Train` for how to call it."""
  validate_config(config)
  if ppo_critics.separate_critic(config):
    return ppo_critics.with_gae_gradient(config, ppo_critics.make_train(
        config, HPARAMS, num_updates(config), advantages_with_boundaries))
  if network_kind(config) != "mlp":
    return ppo_sequence.make_train(config, HPARAMS, num_updates(config))
  # Curriculum hook: the episode length becomes a traced param set per update.
  cur_on = curriculum.enabled(config)
  env, env_params = (curriculum.make_env(config) if cur_on else train_lib.make_env(config))
  cur = curriculum.Curriculum(config, env_params) if cur_on else None
  env, env_params = step_credit.wrap_env(config, env, env_params)
  network, obs_shape = train_lib.make_network(config, env, env_params, value_head=True)
  # The rollout samples actions only; values come from one pass after it.
  policy_fn = nets.make_policy_fn(network, value=False)
  hooks = step_credit.bind(config, RECIPE, env, env_params, policy_fn,
                           int(config.num_envs))
  n_updates = num_updates(config)
  num_envs, num_steps = int(config.num_envs), int(config.num_steps)
  batch = num_envs * num_steps
  n_mb, n_epochs = int(config.num_minibatches), int(config.update_epochs)
  optimizer = train_lib.make_optimizer(config)
  with_success = episodes.has_success(config)
  clip_value = bool(config.clip_value_loss)
  gae_method = str(config.gae_method)
  # Bootstrapping needs the value of a step's final_obs only where the time limit cut
  # the episode; at most this many times per env and rollout (None: unknown, all rows).
  max_truncations = rollout.max_truncations(env, env_params, num_steps)
  shaper = prm.make_step_shaper(config, env, env_params, network)  # None unless prm.enabled

  def init_aux(params, k_env):
    del params
    carry = cur.init() if cur else None   # curriculum hook: first episodes at stage 0
    obs, env_state = rollout.reset(
        env, cur.env_params(carry, env_params, 0) if cur else env_params, k_env, num_envs)
    aux = {"env_state": env_state, "obs": obs,
           "running_return": jnp.zeros((num_envs,), jnp.float32),
           "last_return": jnp.zeros((), jnp.float32)}
    if with_success:
      aux.update(running_hits=jnp.zeros((num_envs,), jnp.float32),
                 last_success=jnp.zeros((), jnp.float32))
    if cur:
      aux["curriculum"] = carry
    if shaper is not None:   # PRM hook: its params and per-env carry (prm.py)
      aux.update(shaper.init(jax.random.fold_in(k_env, 2)))
    return aux

  def init_fn(key, hp):
    return train_lib.init_train_state(network, key, obs_shape, hp, optimizer, init_aux,
                                   aux_keys=1)

  def loss_fn(params, mb, hp):
    logits, values = network.apply(params, mb["obs"])
    return losses.ppo_objective(logits, values, mb, hp, clip_value)

  def update_fn(state, hp):
    key, k_roll, k_perm = jax.random.split(state.key, 3)
    params, aux = state.params, state.aux
    roll_params = env_params
    if cur:  # curriculum hook: the episode length of the episodes that start now
      stage = cur.select(aux["curriculum"], state.update, jax.random.fold_in(k_perm, 1))
      roll_params = cur.env_params(aux["curriculum"], env_params, stage)
    traj, (env_state, obs) = rollout.collect(env, roll_params, policy_fn, params, k_roll,
                                             aux["env_state"], aux["obs"], num_steps)
    gae_traj, prm_aux, prm_metrics = traj, {}, {}
    if shaper is not None:   # PRM hook: outcome_w * r_t + w * PRM term per step (prm.py)
      shaped, prm_aux, prm_metrics, _ = shaper.shape(
          aux, traj, None, hp, jax.random.fold_in(k_perm, 2), state.update, params)
      gae_traj = traj._replace(rewards=shaped)
      prm_aux = {k: prm_aux[k] for k in ("prm_params", "prm_prev", "prm_start")}
    advantages, values = advantages_with_boundaries(
        lambda o: network.apply(params, o)[1], gae_traj, obs, hp["gamma"],
        hp["gae_lambda"], gae_method, max_truncations)
    advantages, _, hook_metrics = hooks.advantages({}, hooks_lib.EstimatorInput(
        traj, hooks_lib.Signal(gae_traj.rewards), values, advantages, params, hp,
        k_perm))
    if hooks.names:   # steps taken: the rollout's and the hooks' (vines)
      hook_metrics = {**hook_metrics, "env_steps": jnp.float32(batch) + hook_metrics.get(
          "env_steps", 0.0)}
    prm_metrics = {**prm_metrics, **hook_metrics}
    data = {"obs": traj.obs, "actions": traj.actions, "log_probs": traj.log_probs,
            "values": values, "advantages": advantages, "targets": advantages + values}
    data = jax.tree.map(lambda x: x.reshape((batch,) + x.shape[2:]), data)
    lr = train_lib.learning_rate(hp["lr"], state.update, n_updates, bool(config.anneal_lr))

    params, opt_state, metrics = train_lib.minibatch_epochs(
        lambda p, mb: loss_fn(p, mb, hp), params, state.opt_state, data, k_perm,
        num_epochs=n_epochs, num_minibatches=n_mb, axis=0, lr=lr,
        max_grad_norm=hp["max_grad_norm"], optimizer=optimizer)
    running, mean_return, num_episodes = episodes.continuing_episode_stats(
        traj.rewards, traj.dones, aux["running_return"], aux["last_return"])
    metrics.update({"return": mean_return, "episodes": num_episodes, "lr": lr,
                    "value_mean": values.mean(), "advantage_std": advantages.std(),
                    **prm_metrics})
    new_aux = {"env_state": env_state, "obs": obs, "running_return": running,
               "last_return": mean_return, **prm_aux}
    if with_success:
      hits, success = episodes.continuing_episode_success(
          episodes.success_signal(traj), traj.dones, aux["running_hits"],
          aux["last_success"])
      metrics["success"] = success
      new_aux.update(running_hits=hits, last_success=success)
    if cur:  # curriculum hook: promotion / priorities (success or value-loss score)
      score = (None if cur.score == "learnability"
               else curriculum.value_loss_score(advantages, cur.score))
      new_aux["curriculum"] = cur.observe(aux["curriculum"], stage, success, score)
      metrics.update(cur.metrics(new_aux["curriculum"], stage),
                     env_steps=jnp.float32(batch))
    aux = new_aux
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                             update=state.update + 1, aux=aux), metrics

  return ppo_critics.with_gae_gradient(config, train_lib.attach_evaluation(train_lib.Train(
      config=config, init_fn=init_fn, update_fn=update_fn,
      default_hparams={**{k: config[k] for k in HPARAMS},
                       **(shaper.hparams if shaper is not None else {}),
                       **step_credit.hparams(config)},
      num_updates=n_updates, env_steps_per_update=batch,
      headline=("success", "return") if with_success else ("return", "entropy")),
      env, env_params, network))
