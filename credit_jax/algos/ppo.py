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

One program for every network: `config.network.kind` (mlp | tabular | linear | gru |
transformer) and the critic (`network.critic_kind`, `network.critic_oracle`) pick an
`Agent` (`credit_jax/algos/ppo_agent.py`: a memoryless actor-critic, one with memory of
the episode, or an actor with a critic of its own), and this module's update, its two
rollout modes and its hook slots are the same for all of them. `config.rollout =
"episodes"` (memoryless networks with their own value head) collects whole episodes from
fresh resets, for the estimators that read the outcomes after a step (HCA, COCOA,
RUDDER). `config.gae_gradient_every = N > 0` adds metrics `gae_grad_*` every N updates:
the GAE policy gradient under the critic against KeyChain's exact gradient
(`credit_jax/addons/gae_probe.py`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections

from credit_jax import episodes, returns, rollout
from credit_jax.addons import contributions, features as features_lib, hooks as hooks_lib
from credit_jax.algos import losses, ppo_agent, train as train_lib

HPARAMS = ("lr", "gamma", "gae_lambda", "clip_eps", "ent_coef", "vf_coef", "max_grad_norm")
ROLLOUTS = ("continuing", "episodes")
# Hooks (credit_jax/addons/hooks.py, registry features.py) this recipe takes, by rollout:
# continuing windows take a horizon curriculum, PRM shaping, VinePPO's Monte-Carlo
# advantages and RUDDER (windows of whole fixed-length episodes); whole episodes
# (`rollout = "episodes"`) take RUDDER, HCA and COCOA, whose credit reads the outcomes
# after a step. HCA and COCOA are listed for continuing windows too, so that their own
# check says why they need episodes. Each feature's own check refuses a network it cannot
# run with (PRM: an MLP; the step-credit hooks: a memoryless one); `validate_fields`
# those a critic of its own cannot (module doc).
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

  train_lib.add_network_kind(c)   # network.kind (mlp | gru | transformer ...) and its fields
  ppo_agent.add_fields(c)         # network.bptt_chunk, critic_kind, critic_oracle, gae_gradient_*

  c.chunk_updates = 61            # updates per compiled call (one progress line each)
  c.checkpoint_every = 244        # updates between checkpoints (k * chunk_updates)
  return c


def num_updates(config) -> int:
  return int(config.total_timesteps) // (config.num_envs * config.num_steps)


def validate_fields(config) -> None:
  """Raises `ConfigError` naming the first PPO-specific field that cannot run."""
  req = train_lib.require
  train_lib.require_range(config, ("num_envs", "num_steps", "update_epochs",
                                   "num_minibatches"), 1)
  batch = config.num_envs * config.num_steps
  req(batch % config.num_minibatches == 0, "num_minibatches",
      f"batch num_envs * num_steps = {config.num_envs} * {config.num_steps} = {batch} is "
      f"not divisible by num_minibatches={config.num_minibatches}")
  req(num_updates(config) >= 1, "total_timesteps",
      f"{config.total_timesteps} is less than one update of num_envs * num_steps = "
      f"{batch} steps")
  train_lib.require_range(config, ("gamma", "gae_lambda"), 0.0, 1.0)
  req(config.gae_method in ("scan", "associative", "auto"), "gae_method",
      f"must be scan, associative or auto, got {config.gae_method!r}")
  train_lib.require_range(config, "clip_eps", 0.0, strict=True)
  train_lib.require_range(config, ("ent_coef", "vf_coef"), 0.0)
  kind = train_lib.network_kind(config)
  train_lib.require_one_of(kind, "network.kind", train_lib.NETWORK_KINDS)
  train_lib.require_one_of(str(config.get("rollout", "continuing")), "rollout", ROLLOUTS)
  ppo_agent.validate_fields(config)
  on = features_lib.enabled(config)
  if ppo_agent.critic_oracle(config):
    req(not on, "network.critic_oracle", f"the oracle critic's environment wrapper runs "
        f"with none of the registry's features, which wrap or replace the environment; "
        f"on: {', '.join(on)}")
  elif ppo_agent.separate_critic(config):
    extra = [n for n in on if n != "curriculum"]
    req(not extra, "network.critic_kind", f"with a critic of its own PPO has no one "
        f"network for the hooks that read it ({', '.join(extra)}); set "
        f"network.critic_kind='same'")
  if episodic(config):
    req(kind in train_lib.FLAT_KINDS and not ppo_agent.separate_critic(config),
        "rollout", f"whole episodes run a memoryless policy with its own value head "
        f"{train_lib.FLAT_KINDS}, got network.kind {kind!r}")


def _validate_env(checked: train_lib.Checked) -> None:
  config = checked.config
  ppo_agent.validate_env(config, checked.made)
  if episodic(config):
    train_lib.check_rollout_horizon(config, checked.env, checked.env_params, "num_steps")


validate_config = train_lib.validator("ppo", validate_fields, recipe, env_fn=_validate_env)


def make_train(config, features=()) -> train_lib.Train:
  """`Train` for PPO on `config.env_name` (or on a `Checked` config from
  `validate_config`); see `train_lib.Train` for how to call it. `features`: feature
  objects (`hooks.Feature`) beside the registry's."""
  checked = train_lib.checked(config, features, validate_config)
  config, passed = checked.config, checked.features
  env, env_params, num_oracle = ppo_agent.make_env(config, checked.made)
  env, env_params = features_lib.wrap_env(config, env, env_params, passed)
  agent = ppo_agent.make_agent(config, env, env_params, num_oracle)
  num_envs, num_steps = int(config.num_envs), int(config.num_steps)
  logits = None if agent.apply is None else (
      lambda params, traj: agent.apply(params, traj.obs)[0])
  hooks = features_lib.bind(config, recipe(config), env, env_params, agent.policy(),
                            num_envs, agent.network, logits,
                            discount=lambda hp: hp["gamma"], passed=passed)
  n_updates = num_updates(config)
  optimizer = train_lib.make_optimizer(config)
  with_success = episodes.has_success(config, checked.made[0])
  clip_value = bool(config.clip_value_loss)

  def learn(state, params, data, hp, k_perm):
    """The minibatch epochs over `data` (leaves `[N, ...]`: steps, or whole windows)."""
    lr = train_lib.learning_rate(hp["lr"], state.update, n_updates, bool(config.anneal_lr))
    params, opt_state, metrics = train_lib.minibatch_epochs(
        lambda p, mb: losses.ppo_objective(*agent.outputs(p, mb), mb, hp, clip_value),
        params, state.opt_state, data, k_perm, num_epochs=int(config.update_epochs),
        num_minibatches=int(config.num_minibatches), axis=0, lr=lr,
        max_grad_norm=hp["max_grad_norm"], optimizer=optimizer)
    return params, opt_state, metrics, lr

  def init_state(key, hp, aux_keys: int, aux_fn):
    """Fresh parameters from the first keys of `key`'s split, `aux_fn(*aux keys)`."""
    keys = jax.random.split(key, agent.param_keys + aux_keys + 1)
    params = agent.init(*keys[:agent.param_keys])
    return train_lib.TrainState(
        params=params, opt_state=optimizer.init(params, hp["max_grad_norm"]),
        key=keys[-1], update=jnp.zeros((), jnp.int32),
        aux=aux_fn(*keys[agent.param_keys:-1]))

  def init_aux(k_env):
    """Continuing windows' carry: the hooks', the environments after a reset, the
    episode bookkeeping and a sequential agent's memory."""
    aux = hooks.init(jax.random.fold_in(k_env, 2) if hooks.init_keys else None)
    obs, env_state = rollout.reset(env, hooks.initial_env_params(aux, env_params), k_env,
                                   num_envs)
    aux = {**aux, **episodes.continuing_init(num_envs, with_success),
           "env_state": env_state, "obs": obs}
    if agent.sequential:
      aux["policy_state"] = rollout.initial_policy_state(agent.policy(), num_envs)
    return aux

  if episodic(config):
    init_fn = lambda key, hp: init_state(key, hp, hooks.init_keys, hooks.init)
    steps = num_envs * min(num_steps, train_lib.episode_limit(env, env_params) or num_steps)
  else:
    init_fn = lambda key, hp: init_state(key, hp, 1, init_aux)
    steps = num_envs * num_steps
  train = train_lib.Train(
      config=config, init_fn=init_fn,
      update_fn=_update(config, env, env_params, agent, hooks, learn, with_success),
      default_hparams={**{k: config[k] for k in HPARAMS},
                       **features_lib.hparams(config, passed)},
      num_updates=n_updates, env_steps_per_update=steps,
      headline=("success", "return") if with_success else ("return", "entropy"))
  if agent.network is not None or agent.eval_policy is not None:
    train = train_lib.attach_evaluation(train, env, env_params, agent.network,
                                        agent.eval_policy)
  return ppo_agent.with_gae_gradient(config, train, checked.made)


def _update(config, env, env_params, agent, hooks, learn, with_success: bool):
  """PPO's update: the hooks' env params and shaping, the agent's values and GAE, the
  estimator slot, the minibatch epochs. Continuing windows (default): `num_steps` steps
  of `num_envs` auto-resetting environments (episodes, and a sequence network's memory,
  continue across updates), boundaries as data. Whole episodes (`config.rollout =
  "episodes"`): `num_envs` episodes of up to `num_steps` steps from fresh resets, a
  truncated step or the last one of a cut episode bootstrapping from its final
  observation's value; HCA's advantages or COCOA's per-action credit replace GAE's
  while the value head regresses GAE's targets; the epochs mask invalid steps. Metrics:
  the epochs', `lr`, `value_mean`, `advantage_std`, `return`, `success` (on episodes, of
  these episodes, with `episode_length`)."""
  num_envs, num_steps = int(config.num_envs), int(config.num_steps)
  whole = episodic(config)

  def update_fn(state, hp):
    key, k_roll, k_perm = jax.random.split(state.key, 3)
    params, aux = state.params, state.aux
    start = aux.get("policy_state")
    roll_params, notes = hooks.env_params(aux, env_params, state.update, k_perm)
    if whole:
      traj = rollout.collect_episodes(env, roll_params, agent.policy(), params, k_roll,
                                      num_envs, num_steps)
    else:
      traj, (env_state, obs, *end) = rollout.collect(
          env, roll_params, agent.policy(), params, k_roll, aux["env_state"], aux["obs"],
          num_steps, policy_state=start)
    signal, aux, hook_metrics = hooks.shape_rewards(
        aux, hooks_lib.Signal(traj.rewards), traj, hp, k_perm, state.update, params)
    valid = traj.valid
    if whole:
      logits, values = agent.apply(params, traj.obs)
      final = agent.apply(params, traj.final_obs)[1]
      own = returns.gae(jnp.where(valid, signal.rewards, 0.0), hp["gamma"],
                        jnp.concatenate([values, final[-1:]], axis=0), hp["gae_lambda"],
                        terminated=traj.terminated & valid,
                        truncated=traj.truncated & valid, final_values=final,
                        method=str(config.gae_method))
    else:
      own, values = agent.advantages(params, traj, signal.rewards, start, obs,
                                     end[0] if end else None, hp)
    credit, aux, est_metrics = hooks.advantages(aux, hooks_lib.EstimatorInput(
        traj, signal, values, own, params, hp, k_perm))
    # the value targets: GAE's on episodes, the estimator's advantages on windows
    advantages = own if whole else credit
    data = {"obs": traj.obs, "actions": traj.actions, "log_probs": traj.log_probs,
            "values": values, "advantages": credit, "targets": advantages + values}
    if whole:
      data["valid"] = valid
    if isinstance(credit, contributions.CocoaCredit):   # whole episodes only
      data["advantages"] = credit._replace(coefficients=None)
      data["old_logits"] = jax.lax.stop_gradient(logits)
    if agent.sequential:   # whole windows: [T, B] -> [B, T], the sequence inputs, carry
      prev_a, prev_r, starts = rollout.sequence_inputs(traj, start)
      data.update(prev_actions=prev_a, prev_rewards=prev_r, starts=starts)
      data = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), data)
      data["carry"] = agent.carry(traj, start)
    else:
      data = jax.tree.map(lambda x: x.reshape((num_envs * num_steps,) + x.shape[2:]), data)
    params, opt_state, metrics, lr = learn(state, params, data, hp, k_perm)
    if whole:
      ep_carry, taken = {}, jnp.sum(valid).astype(jnp.float32)
      ep_metrics = {"value_mean": episodes.masked_mean(values, valid),
                    "advantage_std": jnp.sqrt(episodes.masked_mean(jnp.square(
                        own - episodes.masked_mean(own, valid)), valid)),
                    "episode_length": jnp.sum(valid, axis=0).astype(jnp.float32).mean(),
                    "return": jnp.sum(jnp.where(valid, traj.rewards, 0.0), axis=0).mean()}
      if with_success:
        hit = valid & (episodes.success_signal(traj) > 0)
        ep_metrics["success"] = jnp.mean(jnp.any(hit, axis=0).astype(jnp.float32))
    else:
      ep_metrics, ep_carry = episodes.continuing_update(
          traj.rewards, traj.dones, aux, with_success, episodes.success_signal(traj))
      ep_metrics.update(value_mean=values.mean(), advantage_std=advantages.std())
      taken = jnp.float32(num_envs * num_steps)
    metrics.update(lr=lr, **ep_metrics, **hooks_lib.merge_metrics(hook_metrics, est_metrics))
    if hooks.counts_steps:   # steps taken: the rollout's and the hooks' (vines)
      metrics["env_steps"] = taken + metrics.get("env_steps", 0.0)
    aux, metrics = hooks.observe(aux, notes, hooks_lib.Outcome(
        metrics.get("success"), advantages, traj), metrics)
    if not whole:
      aux = {**aux, **ep_carry, "env_state": env_state, "obs": obs}
      if end:   # a sequential agent's memory at the next window's start
        aux["policy_state"] = end[0]
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                                update=state.update + 1, aux=aux), metrics

  return update_fn
