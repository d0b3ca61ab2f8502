"""The training program the learned-credit study runs: episodic policy gradient (REINFORCE,
or PPO's clipped epochs) on whole episodes, taking RUDDER, HCA and COCOA through the
hooks protocol (`credit_jax/addons/hooks.py`), the slots called as a recipe calls them.

It exists because the recipes of `credit_jax/algos` do not call the hooks yet; when they
do, RUDDER (`shape_rewards`) and HCA (`advantages`, per-step) plug into them unchanged,
and COCOA needs the one addition this program makes: an estimator slot may return a
`contributions.CocoaCredit` (per-action credit), which the policy loss then reads with
`contributions.all_action_loss` / `clipped_all_action_loss`.

Each update: N whole episodes of the MLP actor (`collect_episodes`), the hooks' reward
shaping, the recipe's own credit (`credit`: "rtg", discounted returns-to-go minus a
leave-one-out batch mean per step; or "gae", GAE(lambda) under a learned value head, as
PPO's), the estimator slot (replacing that credit where a feature fills it), then
`num_epochs` full-batch steps: one plain policy-gradient step (`objective = "reinforce"`)
or PPO's clipped surrogate over `num_epochs` steps (`objective = "ppo"`). The value head
regresses the returns (lambda-returns for "gae") of the shaped rewards.

Metrics: `loss`, `success` (an episode's `info["success"]` where the env reports it, else
a positive return), `return`, `env_steps`, `entropy`, and every hook's.
"""
from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import ml_collections

from credit_jax import episodes, nets, returns, rollout
from credit_jax.addons import contributions as cb
from credit_jax.addons import hindsight_credit, hooks, rudder
from credit_jax.algos import losses, train as train_lib
from credit_jax.algos.reinforce import leave_one_out_mean
from credit_jax.config import require

__all__ = ["FEATURES", "RECIPE", "default_config", "episode_success", "make_train",
           "validate_config"]

FEATURES = (rudder.HOOK, hindsight_credit.HCA_HOOK, hindsight_credit.COCOA_HOOK)
RECIPE = hooks.Recipe("learned_credit", tuple(f.name for f in FEATURES),
                      rollout=hooks.EPISODES, critic=False)
HPARAMS = ("lr", "gamma", "gae_lambda", "ent_coef", "vf_coef", "max_grad_norm",
           "clip_eps")
OBJECTIVES = ("reinforce", "ppo")
CREDITS = ("rtg", "gae")


def default_config() -> ml_collections.ConfigDict:
  """REINFORCE with returns-to-go and a leave-one-out baseline on KeyChain (T = 20, k = 2);
  add a `rudder`, `hca` or `cocoa` block (their `add_config`) to change the credit."""
  c = train_lib.keychain_env(train_lib.base_config(), horizon=20, num_pivotal=2)
  c.algo = "learned_credit"       # this program
  c.num_updates = 200             # updates (one batch of whole episodes each)
  c.num_envs = 64                 # episodes per update
  c.objective = "reinforce"       # reinforce (one step) | ppo (clipped epochs)
  c.num_epochs = 1                # full-batch steps per update (ppo: its epochs)
  c.credit = "rtg"                # rtg (leave-one-out baseline) | gae (value head)
  c.lr = 3e-3                     # policy learning rate (traced)
  c.gamma = 1.0                   # discount (traced)
  c.gae_lambda = 0.95             # lambda of credit = gae (traced)
  c.ent_coef = 0.0                # entropy bonus (traced)
  c.vf_coef = 0.5                 # value loss weight, credit = gae (traced)
  c.clip_eps = 0.2                # PPO's ratio clip (traced)
  c.chunk_updates = 25            # updates per compiled call
  return c


def _fields(config) -> None:
  req = require
  req(config.objective in OBJECTIVES, "objective",
      f"must be one of {OBJECTIVES}, got {config.objective!r}")
  req(config.credit in CREDITS, "credit", f"must be one of {CREDITS}, got {config.credit!r}")
  for f in ("num_envs", "horizon", "num_updates", "num_epochs"):
    req(int(config[f]) >= 1, f, f"must be >= 1, got {config[f]}")
  req(int(config.num_envs) >= 2, "num_envs", "the leave-one-out baseline needs >= 2")
  req(config.objective == "ppo" or int(config.num_epochs) == 1, "num_epochs",
      "REINFORCE takes one step per batch; use objective = 'ppo' for epochs")


def validate_config(config) -> None:
  """Raises `ConfigError` naming the first field of `config` that cannot run."""
  train_lib.validate(config, "learned_credit", _fields, RECIPE, FEATURES)


def episode_success(traj) -> jax.Array:
  """[B] float: each episode's success (`info["success"]` at any valid step where the
  env reports it, else a positive return)."""
  info = traj.info if isinstance(traj.info, dict) else {}
  if "success" in info:
    return jnp.any(info["success"] & traj.valid, axis=0).astype(jnp.float32)
  return (jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), 0) > 0).astype(jnp.float32)


def make_train(config) -> train_lib.Train:
  """`Train` of this program on `config.env_name` (module doc)."""
  validate_config(config)
  env, env_params = train_lib.make_env(config)
  with_value = config.credit == "gae"
  network, obs_shape = train_lib.make_network(config, env, env_params, with_value)
  policy = nets.make_policy_fn(network)
  logits_of = lambda p, obs: network.apply(p, obs)[0]
  agent = types.SimpleNamespace(logits=logits_of, policy=lambda: policy)
  num_envs, horizon, n_updates = int(config.num_envs), int(config.horizon), \
      int(config.num_updates)
  context = hooks.Context(config=config, recipe=RECIPE, env=env, env_params=env_params,
                          agent=agent, batch=num_envs)
  bound = hooks.Hooks([(f.name, f.bind(context)) for f in FEATURES if f.enabled(config)])
  extra_hp = {}
  for f in FEATURES:
    if f.enabled(config):
      extra_hp.update(f.hparams(config))
  optimizer = train_lib.make_optimizer(config)
  ppo, epochs = config.objective == "ppo", int(config.num_epochs)

  def init_fn(key, hp):
    k_params, k_hooks, k_run = jax.random.split(key, 3)
    params = train_lib.init_params(network, k_params, obs_shape)
    return train_lib.TrainState(params=params,
                                opt_state=optimizer.init(params, hp["max_grad_norm"]),
                                key=k_run, update=jnp.zeros((), jnp.int32),
                                aux=bound.init(k_hooks))

  def own_credit(traj, rewards, params, hp):
    """(advantages [T, B], value targets [T, B] or None) of the shaped rewards."""
    valid, dones = traj.valid, traj.dones & traj.valid
    rewards = jnp.where(valid, rewards, 0.0)
    if not with_value:
      g = returns.discounted_returns(rewards, hp["gamma"], terminated=dones)
      return g - leave_one_out_mean(g, valid), None
    values = network.apply(params, traj.obs)[1]
    final = network.apply(params, traj.final_obs)[1]
    values_tp1 = jnp.concatenate([values, final[-1:]], axis=0)
    kw = dict(terminated=traj.terminated & valid, truncated=traj.truncated & valid,
              final_values=final)
    adv = returns.gae(rewards, hp["gamma"], values_tp1, hp["gae_lambda"], **kw)
    return adv, adv + values

  def loss_fn(params, traj, credit, targets, old_logits, hp):
    logits, values = network.apply(params, traj.obs)
    valid = traj.valid
    if isinstance(credit, cb.CocoaCredit):
      if ppo:
        pg = cb.clipped_all_action_loss(logits, old_logits, traj.actions, credit.immediate,
                                        credit.contributions, hp["clip_eps"], valid)
      else:
        pg = cb.all_action_loss(logits, traj.actions, credit.immediate,
                                credit.contributions, valid)
    else:
      logp = nets.categorical_log_prob(logits, traj.actions)
      if ppo:
        old = nets.categorical_log_prob(old_logits, traj.actions)
        per = losses.clipped_surrogate(logp, old, credit, hp["clip_eps"])[0]
      else:
        per = losses.reinforce(logp, credit)
      pg = episodes.masked_mean(per, valid)
    entropy = episodes.masked_mean(nets.categorical_entropy(logits), valid)
    loss = pg - hp["ent_coef"] * entropy
    if targets is not None:
      loss = loss + hp["vf_coef"] * episodes.masked_mean(
          losses.value_loss(values, targets), valid)
    return loss, entropy

  def update_fn(state, hp):
    key, k_roll, k_hooks = jax.random.split(state.key, 3)
    params, aux = state.params, state.aux
    traj = rollout.collect_episodes(env, env_params, policy, params, k_roll, num_envs,
                                    horizon)
    signal, aux, m_shape = bound.shape_rewards(aux, hooks.Signal(traj.rewards), traj, hp,
                                               k_hooks, state.update, params)
    adv, targets = own_credit(traj, signal.rewards, params, hp)
    credit, aux, m_est = bound.advantages(aux, hooks.EstimatorInput(
        traj, signal, None, adv, params, hp, k_hooks))
    credit = jax.tree.map(jax.lax.stop_gradient, credit)
    old_logits = jax.lax.stop_gradient(network.apply(params, traj.obs)[0])
    lr = train_lib.learning_rate(hp["lr"], state.update, n_updates, bool(config.anneal_lr))

    def epoch(carry, _):
      p, o = carry
      (loss, ent), grads = jax.value_and_grad(loss_fn, has_aux=True)(
          p, traj, credit, targets, old_logits, hp)
      p, o, gnorm = optimizer.apply(p, o, grads, lr, hp["max_grad_norm"])
      return (p, o), (loss, ent, gnorm)

    (params, opt_state), (loss, ent, gnorm) = jax.lax.scan(
        epoch, (params, state.opt_state), None, length=epochs)
    success = episode_success(traj)
    ep_return = jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), axis=0)
    metrics = {"loss": loss[-1], "entropy": ent[-1], "grad_norm": gnorm[-1],
               "success": success.mean(), "return": ep_return.mean(),
               "env_steps": jnp.float32(num_envs * horizon)}
    metrics = hooks.merge_metrics(hooks.merge_metrics(metrics, m_shape), m_est)
    aux, metrics = bound.observe(aux, (None,) * len(bound.names), hooks.Outcome(
        metrics["success"], adv, traj), metrics)
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                                update=state.update + 1, aux=aux), metrics

  return train_lib.Train(
      config=config, init_fn=init_fn, update_fn=update_fn,
      default_hparams={**{k: config[k] for k in HPARAMS}, **extra_hp},
      num_updates=n_updates, env_steps_per_update=num_envs * horizon,
      headline=("success", "return"))
