"""REINFORCE on whole episodes, with a choice of credit and of baseline.

One update collects one episode per environment (up to `horizon` steps; steps after an
episode's end are masked out), gives every step a credit `G_t`, subtracts a baseline
`b_t`, and takes one gradient step on `-mean_t log pi(a_t|s_t) (G_t - b_t)`.

Credit (`config.credit`), the three classic answers to "which actions get the reward":
  "terminal":  every step gets the whole episode's (undiscounted) return;
  "rtg":       returns-to-go, `sum_{s>=t} gamma^(s-t) r_s` (no credit for the past);
  "gae":       the lambda-return `G^lambda_t` bootstrapped from a learned value; with the
               value baseline, `G^lambda_t - V(s_t)` is exactly GAE.
Baseline (`config.baseline`):
  "none":      `b_t = 0`;
  "mean":      the leave-one-out batch mean of `G_t` over the other episodes still running
               at step t (unbiased: it does not depend on the episode's own actions);
  "value":     a learned `V(s_t)` regressed on `G_t`.
A value head is trained whenever the credit or the baseline needs one.

Metrics: `loss` (policy loss - entropy bonus + value loss), `return` (mean episode
return) and, where the env has success (`episodes.has_success`), `success`: the fraction
of the sampled episodes that solved their task.

`config.network.kind`: "mlp" (the default, also when absent; this module), or "gru" /
"transformer", sequence networks (`_sequence_model` below): the policy carries its memory
through the rollout (`rollout.collect_episodes` with a `SequencePolicy`), and the loss replays
each whole episode from the initial carry with `nets.sequence.unroll` (the steps after the
episode's end start from a reset carry and are masked out); credit "gae" bootstraps a truncated
step from the value of its final observation read as the next token of its episode. Network
fields: as PPO's (`credit_jax/algos/ppo_agent.py`).

`config.explore_epsilon` (memoryless networks): the policy acts and learns as
`(1 - eps) pi + eps / A`, gradients through the mixture (COCOA's exploration,
`nets.EpsilonNetwork`); an evaluation from a checkpoint acts with `pi` itself.

Hyperparameters in `hparams` (traced): lr, gamma, gae_lambda, ent_coef, vf_coef,
max_grad_norm.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Tuple

import jax
import jax.numpy as jnp
import ml_collections

from credit_jax import returns
from credit_jax import nets, rollout
from credit_jax.addons import features as features_lib, hooks as hooks_lib
from credit_jax.algos import train as train_lib, losses
from credit_jax import episodes
from credit_jax.nets import sequence as sn
from credit_jax.types import PolicyState

HPARAMS = ("lr", "gamma", "gae_lambda", "ent_coef", "vf_coef", "max_grad_norm")
_CREDITS = ("terminal", "rtg", "gae")
BASELINES = ("none", "mean", "value")
# Features (credit_jax/addons/features.py) this recipe takes, MLP and sequence networks
# alike: RUDDER's redistributed rewards (`shape_rewards`), HCA's and COCOA's credit (the
# `advantages` slot); and any feature passed to `make_train` as an object.
HOOKS = ("curriculum", "rudder", "hca", "cocoa")
RECIPE = hooks_lib.Recipe("reinforce", HOOKS, rollout=hooks_lib.EPISODES, open=True)


def needs_value(config) -> bool:
  return config.credit == "gae" or config.baseline == "value"


def default_config() -> ml_collections.ConfigDict:
  """REINFORCE with returns-to-go and a leave-one-out baseline on KeyChain-v0 (T=20, k=2)."""
  c = train_lib.keychain_env(train_lib.base_config(), horizon=20, num_pivotal=2)
  c.algo = "reinforce"            # this recipe

  c.num_updates = 200             # updates (one batch of episodes each)
  c.num_envs = 64                 # episodes per update
  c.credit = "rtg"                # terminal | rtg | gae: what each step is credited with
  c.baseline = "mean"             # none | mean (leave-one-out) | value (learned)
  c.normalize_advantages = False  # standardise advantages over the batch

  c.lr = 3e-3                     # learning rate (a traced hparam)
  c.gamma = 1.0                   # discount of returns-to-go / lambda-returns (traced)
  c.gae_lambda = 0.95             # lambda of credit="gae" (a traced hparam)
  c.ent_coef = 0.0                # entropy bonus weight (a traced hparam)
  c.vf_coef = 0.5                 # value loss weight, credit="gae" or baseline="value" (traced)
  c.explore_epsilon = 0.0         # act and learn with (1 - eps) pi + eps / A (COCOA's
                                  # exploration; memoryless networks only)

  c.chunk_updates = 25            # updates per compiled call (one progress line each)
  c.checkpoint_every = 50         # updates between checkpoints (k * chunk_updates)
  train_lib.add_network_kind(c)      # network.kind (mlp | gru | transformer) and its fields
  return c


def validate_fields(config) -> None:
  """Raises `ConfigError` naming the first REINFORCE-specific field that cannot run."""
  req = train_lib.require
  train_lib.require_one_of(config.credit, "credit", _CREDITS)
  train_lib.require_one_of(config.baseline, "baseline", BASELINES)
  train_lib.require_range(config, ("num_envs", "horizon", "num_updates"), 1)
  req(config.baseline != "mean" or config.num_envs >= 2, "num_envs",
      f"baseline='mean' is a leave-one-out mean and needs num_envs >= 2, got "
      f"{config.num_envs}")
  train_lib.require_range(config, ("gamma", "gae_lambda"), 0.0, 1.0)
  train_lib.require_range(config, ("ent_coef", "vf_coef"), 0.0)
  eps = float(config.get("explore_epsilon", 0.0))
  req(0.0 <= eps < 1.0, "explore_epsilon", f"must lie in [0, 1), got {eps}")
  req(eps == 0.0 or train_lib.flat_network(config), "explore_epsilon",
      "needs a memoryless network (network.kind mlp | tabular | linear)")
  train_lib.validate_network(config)


validate_config = train_lib.validator("reinforce", validate_fields, RECIPE,
                                      whole_episodes=True)


def leave_one_out_mean(x, mask):
  """`[T, B]` mean of `x` over the other batch entries where `mask`, per step (0 if none)."""
  mask = mask.astype(x.dtype)
  total = jnp.sum(x * mask, axis=1, keepdims=True)
  count = jnp.sum(mask, axis=1, keepdims=True)
  others = count - mask
  return jnp.where(others > 0, (total - x * mask) / jnp.maximum(others, 1.0), 0.0)


class Model(NamedTuple):
  """What REINFORCE needs of its network, for an MLP or a sequence network.

  init: `key -> params`; policy: what the rollout acts with; outputs: `(params, traj
  [T, B]) -> (logits [T, B, A], values [T, B])` at the episodes' steps; final_values:
  `(params, traj) -> [T, B]` values of each step's final observation.
  """
  init: Callable
  policy: Any
  outputs: Callable
  final_values: Callable


def _mlp_model(config, env, env_params, with_value: bool) -> Tuple[Model, Any]:
  """(the `Model`, its flax network) of a memoryless network (`train_lib.FLAT_KINDS`)."""
  network, obs_shape = train_lib.make_network(config, env, env_params, value_head=with_value)
  eps = float(config.get("explore_epsilon", 0.0))
  acting = nets.EpsilonNetwork(network, eps) if eps > 0 else network
  return Model(init=lambda k: train_lib.init_params(network, k, obs_shape),
               policy=nets.make_policy_fn(acting),
               outputs=lambda params, traj: acting.apply(params, traj.obs),
               final_values=lambda params, traj: network.apply(params, traj.final_obs)[1]
               ), network


def replay_sequence(network, params, traj, final: bool):
  """`(logits [T, B, A], values [T, B], final_values [T, B] or None)` of episodes `[T, B]`
  from `collect_episodes`, each replayed from the sequence network's initial carry."""
  batch = traj.rewards.shape[1]
  start = PolicyState(carry=None, prev_action=jnp.full((batch,), -1, jnp.int32),
                      prev_reward=jnp.zeros((batch,), jnp.float32))
  return sn.unroll_episodes(network, params, traj.obs,
                            *rollout.sequence_inputs(traj, start),
                            (traj.final_obs, traj.actions, traj.rewards) if final else None)


def _sequence_model(config, env, env_params, with_value: bool) -> Model:
  network, obs_shape = train_lib.make_network(config, env, env_params, value_head=True)
  return Model(
      init=lambda k: sn.init_params(network, k, obs_shape),
      policy=sn.make_sequence_policy(network, value=with_value),
      outputs=lambda params, traj: replay_sequence(network, params, traj, final=False)[:2],
      final_values=lambda params, traj: replay_sequence(network, params, traj, final=True)[2])


def make_train(config, features=()) -> train_lib.Train:
  """`Train` for REINFORCE on `config.env_name` (or on a `Checked` config from
  `validate_config`); see `train_lib.Train` for how to call it. `features`: feature
  objects (`hooks.Feature`) beside the registry's."""
  checked = train_lib.checked(config, features, validate_config)
  config, features = checked.config, checked.features
  with_value = needs_value(config)
  env, env_params = features_lib.wrap_env(config, checked.env, checked.env_params,
                                          features)
  if not train_lib.flat_network(config):   # gru | transformer: with memory
    model, network = _sequence_model(config, env, env_params, with_value), None
  else:
    model, network = _mlp_model(config, env, env_params, with_value)
  num_envs, horizon = int(config.num_envs), int(config.horizon)
  hooks = features_lib.bind(
      config, RECIPE, env, env_params, model.policy, num_envs, network,
      logits=lambda params, traj: model.outputs(params, traj)[0],
      discount=lambda hp: hp["gamma"], passed=features)
  # With features on, each key splits once more (the hooks' key), as the learned-credit
  # program that ran RUDDER, HCA and COCOA before did; without, as always.
  hooked = bool(hooks.names)
  n_updates = int(config.num_updates)
  optimizer = train_lib.make_optimizer(config)
  with_success = episodes.has_success(config, checked.made[0])
  credit, baseline = str(config.credit), str(config.baseline)
  normalize = bool(config.normalize_advantages)

  def init_fn(key, hp):
    k_params, *k_hooks, k_run = jax.random.split(key, 2 + hooks.init_keys)
    params = model.init(k_params)
    return train_lib.TrainState(params=params,
                             opt_state=optimizer.init(params, hp["max_grad_norm"]),
                             key=k_run, update=jnp.zeros((), jnp.int32),
                             aux=hooks.init(*k_hooks))

  def credit_and_baseline(traj, params, hp):
    """([T, B] credit G_t, [T, B] baseline b_t); both constants for the policy loss."""
    valid = traj.valid
    rewards = jnp.where(valid, traj.rewards, 0.0)
    discounts = jnp.full_like(rewards, hp["gamma"])
    values = traj.extras["value"] if with_value else jnp.zeros_like(rewards)
    if credit == "terminal":
      g = jnp.broadcast_to(jnp.sum(rewards, axis=0, keepdims=True), rewards.shape)
    elif credit == "rtg":
      # Monte Carlo: nothing to bootstrap from, so any episode end stops the sum.
      g = returns.discounted_returns(rewards, discounts, terminated=traj.dones)
    else:
      final_values = model.final_values(params, traj)                       # [T, B]
      values_tp1 = jnp.concatenate([values, final_values[-1:]], axis=0)     # [T + 1, B]
      g = returns.lambda_returns(rewards, discounts, values_tp1, hp["gae_lambda"],
                            terminated=traj.terminated, truncated=traj.truncated,
                            final_values=final_values)
    if baseline == "none":
      b = jnp.zeros_like(g)
    elif baseline == "mean":
      b = leave_one_out_mean(g, valid)
    else:
      b = values
    return jax.lax.stop_gradient(g), jax.lax.stop_gradient(b)

  def loss_fn(params, traj, g, adv, hp):
    logits, values = model.outputs(params, traj)
    pg = episodes.masked_mean(losses.policy_terms(logits, traj.actions, adv), traj.valid)
    entropy = episodes.masked_mean(nets.categorical_entropy(logits), traj.valid)
    loss = pg - hp["ent_coef"] * entropy
    v_loss = jnp.zeros(())
    if with_value:
      v_loss = episodes.masked_mean(losses.value_loss(values, g), traj.valid)
      loss = loss + hp["vf_coef"] * v_loss
    return loss, {"policy_loss": pg, "value_loss": v_loss, "entropy": entropy}

  def update_fn(state, hp):
    if hooked:
      key, k_roll, k_hooks = jax.random.split(state.key, 3)
    else:
      (key, k_roll), k_hooks = jax.random.split(state.key), None
    aux = state.aux
    roll_params, notes = hooks.env_params(aux, env_params, state.update, k_hooks) \
        if hooked else (env_params, ())
    traj = rollout.collect_episodes(env, roll_params, model.policy, state.params, k_roll,
                                    num_envs, horizon)
    signal, aux, hook_metrics = hooks.shape_rewards(
        aux, hooks_lib.Signal(traj.rewards), traj, hp, k_hooks, state.update,
        state.params) if hooked else (hooks_lib.Signal(traj.rewards), aux, {})
    shaped = traj._replace(rewards=signal.rewards)
    g, b = credit_and_baseline(shaped, state.params, hp)
    adv = g - b
    if normalize:
      mean = episodes.masked_mean(adv, traj.valid)
      std = jnp.sqrt(episodes.masked_mean(jnp.square(adv - mean), traj.valid))
      adv = (adv - mean) / (std + 1e-8)
    credit, aux, est_metrics = hooks.advantages(aux, hooks_lib.EstimatorInput(
        traj, signal, traj.extras["value"] if with_value else None, adv, state.params,
        hp, k_hooks)) if hooked else (adv, aux, {})
    (loss, m), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        state.params, shaped, g, credit, hp)
    lr = train_lib.learning_rate(hp["lr"], state.update, n_updates, bool(config.anneal_lr))
    params, opt_state, gnorm = optimizer.apply(state.params, state.opt_state, grads, lr,
                                               hp["max_grad_norm"])
    ep_return = jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), axis=0)    # [B]
    metrics = {"loss": loss, "grad_norm": gnorm, "lr": lr, **m,
               "return": ep_return.mean(),
               "episode_length": jnp.sum(traj.valid, axis=0).astype(jnp.float32).mean(),
               "advantage_std": jnp.sqrt(episodes.masked_mean(
                   jnp.square(adv - episodes.masked_mean(adv, traj.valid)), traj.valid))}
    if with_success:
      hit = jnp.logical_and(traj.valid, episodes.success_signal(traj) > 0)   # [T, B]
      metrics["success"] = jnp.mean(jnp.any(hit, axis=0).astype(jnp.float32))
    if hooked:
      metrics.update(hooks_lib.merge_metrics(hook_metrics, est_metrics))
      if hooks.counts_steps:
        metrics["env_steps"] = jnp.sum(traj.valid).astype(jnp.float32) + metrics.get(
            "env_steps", 0.0)
      aux, metrics = hooks.observe(aux, notes, hooks_lib.Outcome(
          metrics.get("success"), adv, traj), metrics)
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                             update=state.update + 1, aux=aux), metrics

  train = train_lib.Train(
      config=config, init_fn=init_fn, update_fn=update_fn,
      default_hparams={**{k: config[k] for k in HPARAMS},
                       **features_lib.hparams(config, features)}, num_updates=n_updates,
      env_steps_per_update=num_envs * train_lib.episode_steps(config, env, env_params),
      headline=("success", "return") if with_success else ("return",))
  if network is not None:   # evaluation from a checkpoint
    train = train_lib.attach_evaluation(train, env, env_params, network)
  return train
