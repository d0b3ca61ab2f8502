"""GRPO with a sequence network (`config.network.kind` "gru" or "transformer").

`grpo.make_train` hands configs with a sequence network here; the MLP path stays in
`grpo.py`, untouched. What differs from it:

  * the group rollout (`rollout.collect_groups` with a `SequencePolicy`) starts every
    member's episode from the network's initial `PolicyState` (the carry reset, no
    previous action or reward), and resets it after the episode's end;
  * the loss replays each whole episode from the initial carry with
    `sequence_networks.unroll` (the `K` episodes of a group are independent sequences;
    the steps after an episode's end, invalid and masked out of the loss, start from a
    reset carry and cannot leak into it); with the parameters that acted the replay's
    log-probs are the rollout's (up to float rounding);
  * the frozen reference policy of the KL penalty is replayed the same way.

PRM shaping (`config.prm`, `credit_jax/addons/prm.py`) and a curriculum (`config.curriculum`,
`credit_jax/addons/curriculum.py`) hook in where `grpo.py` hooks them (the PRM scores the
episodes' observations and actions, not the policy's memory; the curriculum sets each
update's episode length), with the same hparams, aux entries and metrics.

Advantages, loss aggregation, minibatches over whole groups (the task axis), and the
metrics are GRPO's (see `grpo.py`). Network fields (`config.network`): `kind`; GRU:
`hidden_sizes` (encoder MLP), `gru_size`, `activation`, `shared_torso`; transformer:
`d_model`, `num_heads`, `num_layers`, `max_len` (cache slots = attention window; at
least `horizon` to attend over the whole episode). The networks' value head is unused.
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp

from credit_jax.addons import features, hooks as hooks_lib
from credit_jax import rollout
from credit_jax.nets import sequence as sn
from credit_jax.algos import train as train_lib, group_update
from credit_jax.types import PolicyState

NETWORK_KINDS = train_lib.FLAT_KINDS + sn.KINDS


def network_kind(config) -> str:
  """`config.network.kind`, "mlp" when the config has no such field."""
  return str(config.network.get("kind", "mlp"))


def validate_network(config, sequence_ok: bool = True) -> None:
  """The network fields; raises `ConfigError` naming the field. `sequence_ok=False`: the
  recipe runs MLPs only (kind must be "mlp")."""
  req = train_lib.require
  kind = network_kind(config)
  req(kind in NETWORK_KINDS, "network.kind", f"must be one of {NETWORK_KINDS}, got {kind!r}")
  req(sequence_ok or kind in train_lib.FLAT_KINDS, "network.kind",
      f"recipe {config.get('algo', '?')!r} runs memoryless policies only "
      f"{train_lib.FLAT_KINDS}, got {kind!r}")
  if kind not in train_lib.FLAT_KINDS:
    train_lib.validate_sequence_fields(config)


def replay_logits(network, params, traj_obs, prev_actions, prev_rewards, starts):
  """Logits `[T, N, K, A]` of group episodes replayed from the initial carry.

  Args:
    traj_obs: [T, N, K, *obs_shape]; prev_actions [T, N, K] int32; prev_rewards
      [T, N, K] float32; starts [T, N, K] bool (from `rollout.sequence_inputs`).
  """
  if prev_actions.ndim != 3 or starts.shape != prev_actions.shape or \
      prev_rewards.shape != prev_actions.shape or \
      jnp.shape(traj_obs)[:3] != prev_actions.shape:
    raise ValueError(f"obs [T, N, K, ...], prev_actions, prev_rewards and starts "
                     f"[T, N, K] must agree, got {jnp.shape(traj_obs)}, "
                     f"{prev_actions.shape}, {prev_rewards.shape}, {starts.shape}")
  carry = network.initial_carry()

  def one(o, pa, pr, s):                                     # one episode [T, ...]
    return sn.unroll(network, params, carry, o, pa, pr, s)[0]

  over_members = jax.vmap(one, in_axes=1, out_axes=1)        # [T, K, ...]
  over_tasks = jax.vmap(over_members, in_axes=1, out_axes=1)  # [T, N, K, ...]
  return over_tasks(traj_obs, prev_actions, prev_rewards, starts)


# What the hooks see of this program: GRPO's groups (grpo.RECIPE's; the registry's
# step-credit hooks, which restart states under a memoryless policy, are refused with a
# sequence network by features.check).
RECIPE = hooks_lib.Recipe("grpo", ("curriculum", "prm", "rudder", "hca", "cocoa"),
                          rollout=hooks_lib.GROUPS, open=True)


def _start(num_tasks: int, group: int) -> PolicyState:
  return PolicyState(carry=None, prev_action=jnp.full((num_tasks, group), -1, jnp.int32),
                     prev_reward=jnp.zeros((num_tasks, group), jnp.float32))


def make_train(checked: train_lib.Checked, hparam_names: Sequence[str],
               surrogate_loss: Callable, static: tuple) -> train_lib.Train:
  """`Train` for GRPO with a sequence network; `grpo.make_train` calls it with the
  validated config and the feature objects it was given (`checked`), its loss
  (`grpo.surrogate_loss`) and static settings (`grpo.settings(config)`). The hooks fill
  the slots they fill in `grpo.py`; an estimator sees the policy's logits through each
  episode's replay."""
  config, passed = checked.config, checked.features
  env, env_params = features.wrap_env(config, checked.env, checked.env_params, passed)
  network, obs_shape = train_lib.make_network(config, env, env_params, value_head=True)
  policy = sn.make_sequence_policy(network, value=False)
  (num_tasks, group, horizon, n_mb, n_epochs, n_updates, optimizer, with_success, use_kl,
   kind, agg) = static

  def logits_of(params, traj):
    """[T, N, K, A] of the group rollout `traj`, each episode replayed."""
    inputs = rollout.sequence_inputs(traj, _start(*traj.actions.shape[1:]))
    return replay_logits(network, params, traj.obs, *inputs)

  hooks = features.bind(config, RECIPE, env, env_params, policy, num_tasks * group,
                        logits=logits_of, passed=passed)

  def init_fn(key, hp):
    k_params, k_run, k_prm = jax.random.split(key, 3)
    params = sn.init_params(network, k_params, obs_shape)
    opt_state = optimizer.init(params, hp["max_grad_norm"])
    # The reference policy is the initial one, frozen, riding in the state.
    aux = {"ref_params": params} if use_kl else {}
    aux.update(hooks.init(k_prm))
    return train_lib.TrainState(params=params, opt_state=opt_state, key=k_run,
                                update=jnp.zeros((), jnp.int32), aux=aux)

  def loss_fn(params, mb, ref_params, hp):
    inputs = (mb["obs"], mb["prev_actions"], mb["prev_rewards"], mb["starts"])
    logits = replay_logits(network, params, *inputs)                  # [T, n, K, A]
    ref_logits = replay_logits(network, ref_params, *inputs) if use_kl else None
    return surrogate_loss(logits, ref_logits, mb, hp, agg)

  def update_fn(state, hp):
    key, k_roll, k_perm = jax.random.split(state.key, 3)
    roll_params, notes = hooks.env_params(state.aux, env_params, state.update, k_perm)
    traj = rollout.collect_groups(env, roll_params, policy, state.params, k_roll,
                                  num_tasks, group, horizon)            # [T, N, K]
    prev_a, prev_r, starts = rollout.sequence_inputs(traj, _start(num_tasks, group))
    step_adv, degenerate, returns, signal, aux, hook_metrics = \
        group_update.step_advantages(hooks, state.aux, traj, kind, hp, k_perm,
                                     state.update, state.params)
    credit, aux, est_metrics = hooks.advantages(aux, hooks_lib.EstimatorInput(
        traj, signal, None, step_adv, state.params, hp, k_perm))
    data = group_update.policy_data(
        traj, credit, lambda: replay_logits(network, state.params, traj.obs, prev_a,
                                            prev_r, starts),
        prev_actions=prev_a, prev_rewards=prev_r, starts=starts)
    params, opt_state, metrics, lr = group_update.optimise(   # every episode stays whole
        loss_fn, state, aux, data, hp, k_perm, anneal_lr=bool(config.anneal_lr),
        num_updates=n_updates, num_epochs=n_epochs, num_minibatches=n_mb,
        optimizer=optimizer)
    aux, metrics = group_update.finish(
        hooks, aux, notes, metrics, hooks_lib.merge_metrics(hook_metrics, est_metrics),
        traj, returns, group_update.advantage_array(credit, step_adv), degenerate, lr,
        with_success)
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                                update=state.update + 1, aux=aux), metrics

  return train_lib.Train(
      config=config, init_fn=init_fn, update_fn=update_fn,
      default_hparams={**{k: config[k] for k in hparam_names},
                       **features.hparams(config, passed)},
      num_updates=n_updates,
      env_steps_per_update=(num_tasks * group
                            * train_lib.episode_steps(config, env, env_params)),
      headline=(("success",) if with_success else ("return",)) + ("degenerate_frac",))
