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

from credit_jax import episodes, nets, returns, rollout
from credit_jax.addons import contributions, features as features_lib, hooks as hooks_lib
from credit_jax.algos import losses, ppo_critics, ppo_sequence, train as train_lib

HPARAMS = ("lr", "gamma", "gae_lambda", "clip_eps", "ent_coef", "vf_coef", "max_grad_norm")
NETWORK_KINDS = train_lib.FLAT_KINDS + ("gru", "transformer")
ROLLOUTS = ("continuing", "episodes")
# Hooks (credit_jax/addons/hooks.py, registry features.py) this recipe takes with its
# memoryless program, by rollout: continuing windows take a horizon curriculum, PRM
# shaping, VinePPO's Monte-Carlo advantages and RUDDER (windows of whole fixed-length
# episodes); whole episodes (`rollout = "episodes"`) take RUDDER, HCA and COCOA, whose
# credit reads the outcomes after a step. HCA and COCOA are listed for continuing
# windows too, so that their own check says why they need episodes.
HOOKS = ("curriculum", "prm", "vine", "rudder", "hca", "cocoa")
EPISODE_HOOKS = ("rudder", "hca", "cocoa")
RECIPE = hooks_lib.Recipe("ppo", HOOKS, rollout=hooks_lib.CONTINUING, critic=True,
                          open=True)
EPISODE_RECIPE = hooks_lib.Recipe("ppo", EPISODE_HOOKS, rollout=hooks_lib.EPISODES,
                                  critic=True, open=True)


def recipe(config) -> hooks_lib.Recipe:
  """What the features see of PPO with `config.rollout` (default "continuing")."""
  return EPISODE_RECIPE if episodic(config) else RECIPE


def episodic(config) -> bool:
  """Whether `config.rollout` is "episodes" (absent: continuing)."""
  return str(config.get("rollout", "continuing")) == "episodes"


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
  c.rollout = "continuing"        # continuing windows | episodes: whole episodes of up to
                                  # num_steps steps from fresh resets (HCA, COCOA, RUDDER)
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
  rollout_kind = str(config.get("rollout", "continuing"))
  req(rollout_kind in ROLLOUTS, "rollout", f"must be one of {ROLLOUTS}, got "
      f"{rollout_kind!r}")
  if kind not in train_lib.FLAT_KINDS:
    ppo_sequence.validate_config(config)
  ppo_critics.validate_fields(config)
  if episodic(config):
    req(kind in train_lib.FLAT_KINDS and not ppo_critics.separate_critic(config),
        "rollout", f"whole episodes run a memoryless policy with its own value head "
        f"{train_lib.FLAT_KINDS}, got network.kind {kind!r}")


def _validate_features(config, passed) -> None:
  on = features_lib.enabled(config, passed)
  req = train_lib.require
  req(not (on and ppo_critics.separate_critic(config)), "network.critic_kind",
      f"the hooks ({', '.join(on)}) run with PPO's own value head only: set "
      f"network.critic_kind='same' and network.critic_oracle=False")
  req(not on or train_lib.flat_network(config), "network.kind",
      f"the hooks ({', '.join(on)}) run in PPO's memoryless program; its sequence "
      f"program calls no hook slot")


def validate_config(config, features=()) -> None:
  """Raises `ConfigError` naming the first field of `config` that cannot run
  (`features`: the feature objects given to `make_train`)."""
  passed = tuple(features)
  train_lib.validate(config, "ppo", lambda c: (validate_fields(c),
                                               _validate_features(c, passed)),
                     recipe(config), passed)
  if episodic(config):
    train_lib.check_rollout_horizon(config, *train_lib.make_env(config), "num_steps")


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


def make_train(config, features=()) -> train_lib.Train:
  """`Train` for PPO on `config.env_name`; see `train_lib.Train` for how to call it.
  `features`: feature objects (`hooks.Feature`) beside the registry's."""
  passed = tuple(features)
  validate_config(config, passed)
  if ppo_critics.separate_critic(config):
    return ppo_critics.with_gae_gradient(config, ppo_critics.make_train(
        config, HPARAMS, num_updates(config), advantages_with_boundaries))
  if not train_lib.flat_network(config):
    return ppo_sequence.make_train(config, HPARAMS, num_updates(config))
  env, env_params = features_lib.wrap_env(config, *train_lib.make_env(config), passed)
  network, obs_shape = train_lib.make_network(config, env, env_params, value_head=True)
  policy_fn = nets.make_policy_fn(network, value=False)  # values: one pass after the rollout
  num_envs, num_steps = int(config.num_envs), int(config.num_steps)
  hooks = features_lib.bind(config, recipe(config), env, env_params, policy_fn, num_envs,
                            network, discount=lambda hp: hp["gamma"], passed=passed)
  n_updates, batch = num_updates(config), num_envs * num_steps
  optimizer = train_lib.make_optimizer(config)
  with_success = episodes.has_success(config)
  default_hparams = {**{k: config[k] for k in HPARAMS},
                     **features_lib.hparams(config, passed)}
  headline = ("success", "return") if with_success else ("return", "entropy")

  def loss_fn(params, mb, hp):
    logits, values = network.apply(params, mb["obs"])
    return losses.ppo_objective(logits, values, mb, hp, bool(config.clip_value_loss))

  def learn(state, params, data, hp, k_perm):
    """The minibatch epochs over `data` (leaves [T, B, ...] flattened to steps)."""
    data = jax.tree.map(lambda x: x.reshape((batch,) + x.shape[2:]), data)
    lr = train_lib.learning_rate(hp["lr"], state.update, n_updates, bool(config.anneal_lr))
    params, opt_state, metrics = train_lib.minibatch_epochs(
        lambda p, mb: loss_fn(p, mb, hp), params, state.opt_state, data, k_perm,
        num_epochs=int(config.update_epochs), num_minibatches=int(config.num_minibatches),
        axis=0, lr=lr, max_grad_norm=hp["max_grad_norm"], optimizer=optimizer)
    return params, opt_state, metrics, lr

  if episodic(config):
    return ppo_critics.with_gae_gradient(config, train_lib.attach_evaluation(
        train_lib.Train(
            config=config, init_fn=lambda key, hp: train_lib.init_train_state(
                network, key, obs_shape, hp, optimizer,
                lambda params, *k: hooks.init(*k), aux_keys=hooks.init_keys),
            update_fn=_episodes_update(config, env, env_params, network, policy_fn, hooks,
                                       learn, with_success),
            default_hparams=default_hparams, num_updates=n_updates,
            env_steps_per_update=num_envs * min(num_steps, train_lib.episode_limit(
                env, env_params) or num_steps),
            headline=headline), env, env_params, network))
  # A step's final_obs is valued only where the time limit cut its episode: at most this
  # many times per env and rollout (None: unknown, every row).
  max_truncations = rollout.max_truncations(env, env_params, num_steps)

  def init_aux(params, k_env):
    aux = hooks.init(jax.random.fold_in(k_env, 2) if hooks.init_keys else None)
    obs, env_state = rollout.reset(env, hooks.initial_env_params(aux, env_params), k_env,
                                   num_envs)
    return {**aux, **episodes.continuing_init(num_envs, with_success),
            "env_state": env_state, "obs": obs}

  def update_fn(state, hp):
    key, k_roll, k_perm = jax.random.split(state.key, 3)
    params, aux = state.params, state.aux
    roll_params, notes = hooks.env_params(aux, env_params, state.update, k_perm)
    traj, (env_state, obs) = rollout.collect(env, roll_params, policy_fn, params, k_roll,
                                             aux["env_state"], aux["obs"], num_steps)
    signal, aux, hook_metrics = hooks.shape_rewards(
        aux, hooks_lib.Signal(traj.rewards), traj, hp, k_perm, state.update, params)
    advantages, values = advantages_with_boundaries(
        lambda o: network.apply(params, o)[1], traj._replace(rewards=signal.rewards), obs,
        hp["gamma"], hp["gae_lambda"], str(config.gae_method), max_truncations)
    advantages, aux, est_metrics = hooks.advantages(aux, hooks_lib.EstimatorInput(
        traj, signal, values, advantages, params, hp, k_perm))
    data = {"obs": traj.obs, "actions": traj.actions, "log_probs": traj.log_probs,
            "values": values, "advantages": advantages, "targets": advantages + values}
    params, opt_state, metrics, lr = learn(state, params, data, hp, k_perm)
    ep_metrics, ep_carry = episodes.continuing_update(
        traj.rewards, traj.dones, aux, with_success, episodes.success_signal(traj))
    metrics.update(lr=lr, value_mean=values.mean(), advantage_std=advantages.std(),
                   **ep_metrics, **hooks_lib.merge_metrics(hook_metrics, est_metrics))
    if hooks.counts_steps:   # steps taken: the rollout's and the hooks' (vines)
      metrics["env_steps"] = jnp.float32(batch) + metrics.get("env_steps", 0.0)
    aux, metrics = hooks.observe(aux, notes, hooks_lib.Outcome(
        metrics.get("success"), advantages, traj), metrics)
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                                update=state.update + 1,
                                aux={**aux, **ep_carry, "env_state": env_state,
                                     "obs": obs}), metrics

  return ppo_critics.with_gae_gradient(config, train_lib.attach_evaluation(train_lib.Train(
      config=config, init_fn=lambda key, hp: train_lib.init_train_state(
          network, key, obs_shape, hp, optimizer, init_aux, aux_keys=1),
      update_fn=update_fn, default_hparams=default_hparams, num_updates=n_updates,
      env_steps_per_update=batch, headline=headline), env, env_params, network))


def _episodes_update(config, env, env_params, network, policy_fn, hooks, learn,
                     with_success: bool):
  """PPO's update on whole episodes (`config.rollout = "episodes"`): `num_envs` episodes
  of up to `num_steps` steps from fresh resets, the hooks' shaping, GAE over each
  episode's steps (a truncated step, or the last one of a cut episode, bootstraps from
  the value of its final observation), the estimator slot (HCA's advantages or COCOA's
  per-action credit replace GAE's; the value head still regresses GAE's targets), then
  the minibatch epochs over the valid steps (`losses.ppo_objective` with `valid`).
  Metrics: PPO's, with `return`, `episode_length` and `success` of these episodes."""
  num_envs, num_steps = int(config.num_envs), int(config.num_steps)

  def update_fn(state, hp):
    key, k_roll, k_perm = jax.random.split(state.key, 3)
    params, aux = state.params, state.aux
    roll_params, notes = hooks.env_params(aux, env_params, state.update, k_perm)
    traj = rollout.collect_episodes(env, roll_params, policy_fn, params, k_roll, num_envs,
                                    num_steps)
    signal, aux, hook_metrics = hooks.shape_rewards(
        aux, hooks_lib.Signal(traj.rewards), traj, hp, k_perm, state.update, params)
    valid = traj.valid
    logits, values = network.apply(params, traj.obs)
    final = network.apply(params, traj.final_obs)[1]
    own = returns.gae(jnp.where(valid, signal.rewards, 0.0), hp["gamma"],
                      jnp.concatenate([values, final[-1:]], axis=0), hp["gae_lambda"],
                      terminated=traj.terminated & valid, truncated=traj.truncated & valid,
                      final_values=final, method=str(config.gae_method))
    credit, aux, est_metrics = hooks.advantages(aux, hooks_lib.EstimatorInput(
        traj, signal, values, own, params, hp, k_perm))
    data = {"obs": traj.obs, "actions": traj.actions, "log_probs": traj.log_probs,
            "values": values, "advantages": credit, "targets": own + values,
            "valid": valid}
    if isinstance(credit, contributions.CocoaCredit):
      data["advantages"] = credit._replace(coefficients=None)
      data["old_logits"] = jax.lax.stop_gradient(logits)
    params, opt_state, metrics, lr = learn(state, params, data, hp, k_perm)
    ep_return = jnp.sum(jnp.where(valid, traj.rewards, 0.0), axis=0)
    metrics.update(lr=lr, value_mean=episodes.masked_mean(values, valid),
                   advantage_std=jnp.sqrt(episodes.masked_mean(jnp.square(
                       own - episodes.masked_mean(own, valid)), valid)),
                   episode_length=jnp.sum(valid, axis=0).astype(jnp.float32).mean(),
                   **{"return": ep_return.mean()},
                   **hooks_lib.merge_metrics(hook_metrics, est_metrics))
    if with_success:
      hit = valid & (episodes.success_signal(traj) > 0)
      metrics["success"] = jnp.mean(jnp.any(hit, axis=0).astype(jnp.float32))
    if hooks.counts_steps:
      metrics["env_steps"] = jnp.sum(valid).astype(jnp.float32) + metrics.get(
          "env_steps", 0.0)
    aux, metrics = hooks.observe(aux, notes, hooks_lib.Outcome(
        metrics.get("success"), own, traj), metrics)
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                                update=state.update + 1, aux=aux), metrics

  return update_fn
