"""PPO with a sequence network (`config.network.kind` "gru" or "transformer").

`ppo.make_train` hands configs with a sequence network here; the MLP path stays in
`ppo.py`, untouched. What differs from it:

  * the rollout carries the network's memory (`rollout.collect` with a `PolicyState`),
    and the train state keeps the `PolicyState` at the start of the next window;
  * the loss replays each environment's window from the carry stored at its start
    (`sequence_networks.unroll`), the memory reset where an episode starts inside the
    window; with the parameters that acted, the replay's log-probs are the rollout's (up
    to float rounding);
  * values for GAE replay the window too (`values_and_advantages`). With
    `credit_jax.fast_paths` on, a GRU's are read from the rollout instead
    (`gru_values_and_advantages`: its value head at every step, and the hidden state
    after every step, from which a truncated step's final observation is valued): the
    same function of the same numbers without the replay's pass over the window, equal
    to it up to float rounding (the per-step and the whole-window matmuls round
    differently; tested). A transformer always replays: its carry, a KV cache, is too
    large to store at every step;
  * `network.bptt_chunk = L` (GRU, opt-in; 0, the default, is the whole window):
    truncated backpropagation through time with stored carries. The rollout keeps the
    hidden state at every L-th step, and the loss replays each L-step chunk of a window
    from the hidden state stored at its start, all chunks of a minibatch side by side
    (a scan of L steps over `E * T / L` sequences instead of T steps over E). The
    forward numbers are the full replay's up to float rounding (the stored states are
    the rollout's, so at the first minibatch of an update the ratio is 1); the gradient
    stops at chunk boundaries (a stored state is data, as the window's first carry
    always is), so credit reaches back at most L - 1 steps through the memory.
    `bptt_chunk = T` is the default path. On a 2-core CPU it cut wall time only under
    load, not CPU work (BENCHMARKS.md);
  * GAE is unchanged: a truncated step bootstraps from the value of its final
    observation read as the next token of its episode (the memory at that step), the
    last step from the value of the next window's first observation;
  * minibatches split the environments, never time: each minibatch holds whole
    `[num_steps]` sequences of `num_envs / num_minibatches` environments.

Network fields (`config.network`): `kind`; GRU: `hidden_sizes` (encoder MLP),
`gru_size`, `activation`, `shared_torso`; transformer: `d_model`, `num_heads`,
`num_layers`, `max_len` (cache slots = attention window); PPO only: `bptt_chunk` (GRU).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from credit_jax import returns
from credit_jax import fast_paths, rollout
from credit_jax.nets import gru
from credit_jax.nets import sequence as sn
from credit_jax.algos import train as train_lib, losses
from credit_jax import episodes


def add_fields(c):
  """Adds PPO's sequence-network field `network.bptt_chunk` (0: whole window) to `c`."""
  c.network.bptt_chunk = 0           # GRU: >0 = truncated BPTT in chunks of this many steps
  return c                           # from stored hidden states (divides num_steps); 0 = off


def bptt_chunk(config) -> int:
  """`config.network.bptt_chunk` (0, off, when the config has no such field)."""
  return int(config.network.get("bptt_chunk", 0) or 0)


def network_kwargs(net, kind: str) -> dict:
  """The constructor arguments of a `kind` ("gru" | "transformer") sequence network from
  the fields of `config.network` (`net`)."""
  if kind == "gru":
    return dict(hidden_size=int(net.get("gru_size", 64)),
                encoder_sizes=tuple(net.hidden_sizes), activation=net.activation,
                shared_torso=bool(net.shared_torso))
  return dict(d_model=int(net.get("d_model", 32)), num_heads=int(net.get("num_heads", 2)),
              num_layers=int(net.get("num_layers", 1)), max_len=int(net.get("max_len", 64)))


def make_network(config, env, env_params):
  """`(network, obs_shape)`: the sequence actor-critic `config.network` describes."""
  obs_shape = env.observation_space(env_params).shape
  kind = str(config.network.kind)
  network = sn.make_sequence_network(kind, env.num_actions, obs_rank=len(obs_shape),
                                     **network_kwargs(config.network, kind))
  return network, obs_shape


def validate_config(config) -> None:
  """The sequence-network fields; raises `ConfigError` naming the field."""
  req = train_lib.require
  net = config.network
  req(config.num_envs % config.num_minibatches == 0, "num_minibatches",
      f"a sequence network splits minibatches over environments: num_envs="
      f"{config.num_envs} is not divisible by num_minibatches={config.num_minibatches}")
  for f, default in (("gru_size", 64), ("d_model", 32), ("num_heads", 2),
                     ("num_layers", 1), ("max_len", 64)):
    req(int(net.get(f, default)) >= 1, f"network.{f}", f"must be >= 1, got {net.get(f)}")
  req(int(net.get("d_model", 32)) % int(net.get("num_heads", 2)) == 0, "network.d_model",
      f"must be divisible by network.num_heads={net.get('num_heads', 2)}")
  chunk = net.get("bptt_chunk", 0) or 0
  req(int(chunk) == chunk and chunk >= 0, "network.bptt_chunk",
      f"must be an int >= 0 (0: the whole window), got {chunk!r}")
  if chunk:
    req(str(net.kind) == "gru", "network.bptt_chunk",
        f"truncated BPTT is for network.kind 'gru' (got {net.kind!r}); set it to 0")
    req(int(config.num_steps) % int(chunk) == 0, "network.bptt_chunk",
        f"must divide num_steps={config.num_steps}, got {chunk}")


def _loss(network, clip_value, chunk, params, mb, hp):
  """PPO's loss on a minibatch of whole sequences `[E, T, ...]` (E environments); with
  `chunk = L` each is replayed as `T / L` chunks from the carries `mb["carry"]` (leaves
  `[E, T / L, ...]`) stored at their starts, else from `mb["carry"]` (`[E, ...]`)."""
  seqs = [mb[k] for k in ("obs", "prev_actions", "prev_rewards", "starts")]
  carry = mb["carry"]
  lead = mb["starts"].shape                                     # (E, T)
  if chunk:
    split = lambda x: x.reshape((lead[0] * (lead[1] // chunk), chunk) + x.shape[2:])
    seqs = [split(x) for x in seqs]                             # [E T / L, L, ...]
    carry = jax.tree.map(lambda c: c.reshape((-1,) + c.shape[2:]), carry)
  logits, values, _ = jax.vmap(
      lambda c, o, pa, pr, s: sn.unroll(network, params, c, o, pa, pr, s))(carry, *seqs)
  if chunk:
    logits, values = logits.reshape(lead + logits.shape[2:]), values.reshape(lead)
  return losses.ppo_objective(logits, values, mb, hp, clip_value)


def chunk_carries(start_carry, carries, chunk: int):
  """The carry at the start of every `chunk`-step piece of a window, for truncated BPTT.

  Args:
    start_carry: the window's first carry, leaves [B, ...].
    carries: the carry after every step (the rollout's extras "carry"), leaves
      [T, B, ...], before any episode reset (`unroll` resets where `starts`).
    chunk: L, dividing T.
  Returns:
    leaves [B, T / L, ...]: `start_carry`, then the carry after steps L - 1, 2L - 1, ...
  """
  def one(c0, cs):
    if cs.shape[0] % chunk or cs.shape[1:] != c0.shape:
      raise ValueError(f"carries must be [T, *start_carry.shape] with T divisible by "
                       f"chunk={chunk}; got {cs.shape} and start_carry {c0.shape}")
    return jnp.swapaxes(jnp.concatenate([c0[None], cs[chunk - 1:-1:chunk]]), 0, 1)
  return jax.tree.map(one, start_carry, carries)


def values_and_advantages(network, params, traj, start_state, next_obs, next_state,
                          gamma, gae_lambda, method="auto"):
  """Values (replayed from the window's stored carry) and GAE with boundaries as data.

  Args:
    traj: Trajectory [T, B] from `rollout.collect` with a sequence policy.
    start_state: `PolicyState` (leaves [B, ...]) the window started from.
    next_obs: [B, *obs_shape] and next_state: `PolicyState` after the window.
  Returns:
    `(advantages [T, B], values [T, B], inputs)`: `inputs` are
    `rollout.sequence_inputs(traj, start_state)` for replaying the window.
  """
  num_steps, batch = traj.rewards.shape
  if jnp.shape(next_obs)[:1] != (batch,):
    raise ValueError(f"next_obs must be [B, ...] with B = {batch}, got {jnp.shape(next_obs)}")
  inputs = rollout.sequence_inputs(traj, start_state)
  replay = jax.vmap(lambda c, o, pa, pr, s, fo, a, r: sn.unroll(
      network, params, c, o, pa, pr, s, (fo, a, r)), in_axes=(0,) + (1,) * 7,
                    out_axes=1)
  _, values, final_values = replay(start_state.carry, traj.obs, *inputs, traj.final_obs,
                                   traj.actions, traj.rewards)               # [T, B]
  advantages = _gae_after_window(network, params, traj, values, final_values, next_obs,
                                 next_state, gamma, gae_lambda, method)
  return advantages, values, inputs


def _gae_after_window(network, params, traj, values, final_values, next_obs, next_state,
                      gamma, gae_lambda, method):
  """GAE [T, B] of a window from its values [T, B] and truncation bootstraps
  `final_values` [T, B], the last step bootstrapping from `next_obs` [B, ...] stepped
  under `next_state`; terminated steps do not bootstrap, truncated ones use
  `final_values` (`returns.gae`)."""
  _, _, next_values = jax.vmap(lambda c, o, a, r: network.apply(
      params, c, o, a, r, method="step"))(next_state.carry, next_obs,
                                          next_state.prev_action, next_state.prev_reward)
  values_tp1 = jnp.concatenate([values, next_values[None]], axis=0)      # [T + 1, B]
  return returns.gae(traj.rewards, jnp.full_like(traj.rewards, gamma), values_tp1,
                gae_lambda, terminated=traj.terminated, truncated=traj.truncated,
                final_values=final_values, method=method)


def gru_values_and_advantages(network, params, traj, next_obs, next_state, gamma,
                              gae_lambda, method="auto", max_truncations=None):
  """`values_and_advantages` for a GRU from the values and carries its rollout stored.

  Args:
    traj: Trajectory [T, B] from `rollout.collect` with
      `make_sequence_policy(network, value=True, carry=True)`: extras "value" [T, B]
      and "carry" (leaves [T, B, H]: the hidden state after each step, before a reset).
    next_obs: [B, *obs_shape] and next_state: `PolicyState` after the window.
    max_truncations: None, or an int `k` no environment's truncated steps exceed
      (`rollout.max_truncations`): the final observations are then valued at the first
      `k` truncated steps of each environment only (`k B` rows instead of `T B`); a
      column with more gets NaN advantages, as in `ppo.advantages_with_boundaries`.
  Returns:
    `(advantages [T, B], values [T, B])`. The values are the rollout's; a truncated step
    bootstraps from its final observation stepped from the hidden state after the step
    (the replay's `final`), the last step from `next_obs` under `next_state`. The same
    function of the same numbers as the replay in `values_and_advantages`, without its
    pass over the window; equal to it up to float rounding (tests/test_sequence_bptt.py).
  """
  num_steps, batch = traj.rewards.shape
  if jnp.shape(next_obs)[:1] != (batch,):
    raise ValueError(f"next_obs must be [B, ...] with B = {batch}, got {jnp.shape(next_obs)}")
  if "value" not in traj.extras or "carry" not in traj.extras:
    raise ValueError("traj.extras needs 'value' and 'carry': collect with "
                     "make_sequence_policy(network, value=True, carry=True)")
  values = traj.extras["value"]                                          # [T, B]
  if jnp.shape(values) != (num_steps, batch):
    raise ValueError(f"traj.extras['value'] must be [T, B] = {(num_steps, batch)}, got "
                     f"{jnp.shape(values)}")
  if max_truncations is not None and (int(max_truncations) != max_truncations
                                      or max_truncations < 0):
    raise ValueError(f"max_truncations must be None or an int >= 0, got {max_truncations}")

  def value_after(final_obs, actions, rewards, carry):   # leaves [N, B, ...] -> [N, B]
    xp, w_h, b_h = network.apply(params, final_obs, actions, rewards, method="project")
    after = gru.step(w_h, b_h, network.stack(carry), xp)
    return network.apply(params, network.unstack(after), method="heads")[1]

  final = (traj.final_obs, traj.actions, traj.rewards, traj.extras["carry"])
  hits = None
  if max_truncations is None or max_truncations >= num_steps:
    final_values = value_after(*final)                                   # [T, B]
  else:   # the j-th truncated step of each column (j < k), gathered, then scattered back
    rank = jnp.cumsum(traj.truncated.astype(jnp.int32), axis=0)         # [T, B]
    hits = [jnp.logical_and(traj.truncated, rank == j + 1)
            for j in range(int(max_truncations))]
    final_values = jnp.zeros((num_steps, batch), values.dtype)
    if hits:
      rows = jnp.stack([jnp.argmax(h, axis=0) for h in hits])           # [k, B]
      take = lambda x: jnp.take_along_axis(
          x, rows.reshape(rows.shape + (1,) * (x.ndim - 2)), axis=0)     # [k, B, ...]
      v_final = value_after(*jax.tree.map(take, final))                  # [k, B]
      for j, h in enumerate(hits):
        final_values = jnp.where(h, v_final[j][None], final_values)
  advantages = _gae_after_window(network, params, traj, values, final_values, next_obs,
                                 next_state, gamma, gae_lambda, method)
  if hits is not None:
    overflow = jnp.sum(traj.truncated, axis=0) > len(hits)               # [B]
    advantages = jnp.where(overflow[None], jnp.nan, advantages)
  return advantages, values


def make_train(config, hparam_names, n_updates: int) -> train_lib.Train:
  """`Train` for PPO with a sequence network; `ppo.make_train` calls it."""
  validate_config(config)
  env, env_params = train_lib.make_env(config)
  network, obs_shape = make_network(config, env, env_params)
  is_gru = str(config.network.kind) == "gru"
  chunk = bptt_chunk(config)

  def make_policy():
    """The acting policy, and whether GAE reads the rollout's values (read at trace time,
    as `fast_paths` is): a GRU's rollout keeps its values and hidden states when GAE
    (fast paths on) or truncated BPTT reads them."""
    rollout_values = is_gru and fast_paths.enabled()
    return sn.make_sequence_policy(network, value=rollout_values,
                                   carry=rollout_values or chunk > 0), rollout_values

  policy, _ = make_policy()
  num_envs, num_steps = int(config.num_envs), int(config.num_steps)
  n_mb, n_epochs = int(config.num_minibatches), int(config.update_epochs)
  optimizer = train_lib.make_optimizer(config)
  with_success = episodes.has_success(config)
  clip_value = bool(config.clip_value_loss)
  gae_method = str(config.gae_method)
  max_truncations = rollout.max_truncations(env, env_params, num_steps)

  def init_fn(key, hp):
    k_params, k_env, k_run = jax.random.split(key, 3)
    params = sn.init_params(network, k_params, obs_shape)
    opt_state = optimizer.init(params, hp["max_grad_norm"])
    obs, env_state = rollout.reset(env, env_params, k_env, num_envs)
    aux = {"env_state": env_state, "obs": obs,
           "policy_state": rollout.initial_policy_state(policy, num_envs),
           **episodes.continuing_init(num_envs, with_success)}
    return train_lib.TrainState(params=params, opt_state=opt_state, key=k_run,
                             update=jnp.zeros((), jnp.int32), aux=aux)

  def update_fn(state, hp):
    key, k_roll, k_perm = jax.random.split(state.key, 3)
    params, aux = state.params, state.aux
    start_state = aux["policy_state"]
    policy, rollout_values = make_policy()
    traj, (env_state, obs, policy_state) = rollout.collect(
        env, env_params, policy, params, k_roll, aux["env_state"], aux["obs"], num_steps,
        policy_state=start_state)
    if rollout_values:
      advantages, values = gru_values_and_advantages(
          network, params, traj, obs, policy_state, hp["gamma"], hp["gae_lambda"],
          gae_method, max_truncations)
      prev_a, prev_r, starts = rollout.sequence_inputs(traj, start_state)
    else:
      advantages, values, (prev_a, prev_r, starts) = values_and_advantages(
          network, params, traj, start_state, obs, policy_state, hp["gamma"],
          hp["gae_lambda"], gae_method)
    batch_major = lambda x: jnp.swapaxes(x, 0, 1)                 # [T, B] -> [B, T]
    data = {"obs": traj.obs, "prev_actions": prev_a, "prev_rewards": prev_r,
            "starts": starts, "actions": traj.actions, "log_probs": traj.log_probs,
            "values": values, "advantages": advantages, "targets": advantages + values}
    data = jax.tree.map(batch_major, data)
    data["carry"] = (chunk_carries(start_state.carry, traj.extras["carry"], chunk)
                     if chunk else start_state.carry)   # leaves [B, T / L, ...] or [B, ...]
    params, opt_state, metrics, ep_carry = optimise_and_report(
        lambda p, mb: _loss(network, clip_value, chunk, p, mb, hp), params, state, data,
        k_perm, hp, traj, aux, values, advantages, config=config, num_updates=n_updates,
        num_epochs=n_epochs, num_minibatches=n_mb, optimizer=optimizer,
        with_success=with_success)
    new_aux = {"env_state": env_state, "obs": obs, "policy_state": policy_state,
               **ep_carry}
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                             update=state.update + 1, aux=new_aux), metrics

  return sequence_train(config, init_fn, update_fn, hparam_names, n_updates,
                        num_envs * num_steps, with_success)


def optimise_and_report(loss, params, state, data, k_perm, hp, traj, aux, values,
                        advantages, *, config, num_updates: int, num_epochs: int,
                        num_minibatches: int, optimizer, with_success: bool):
  """A sequence-PPO update's gradient steps and its episode metrics, shared by this
  program and `ppo_critics`' history critics: `num_epochs` passes of `num_minibatches`
  minibatches over the batch axis (axis 0 of every `data` leaf, `[B, ...]`), `loss(params,
  minibatch)`; then the sampled policy's episodes (and success) over `traj` ([T, B]), as
  PPO's MLP path reports them, with `lr`, `value_mean` and `advantage_std`.

  Returns (params, opt_state, metrics, episode carry for the aux)."""
  lr = train_lib.learning_rate(hp["lr"], state.update, num_updates, bool(config.anneal_lr))
  params, opt_state, metrics = train_lib.minibatch_epochs(
      loss, params, state.opt_state, data, k_perm, num_epochs=num_epochs,
      num_minibatches=num_minibatches, axis=0, lr=lr, max_grad_norm=hp["max_grad_norm"],
      optimizer=optimizer)
  ep_metrics, ep_carry = episodes.continuing_update(traj.rewards, traj.dones, aux,
                                                    with_success,
                                                    episodes.success_signal(traj))
  metrics.update({**ep_metrics, "lr": lr, "value_mean": values.mean(),
                  "advantage_std": advantages.std()})
  return params, opt_state, metrics, ep_carry


def sequence_train(config, init_fn, update_fn, hparam_names, num_updates: int,
                   env_steps_per_update: int, with_success: bool) -> train_lib.Train:
  """The `Train` of a sequence-PPO program (this one, `ppo_critics`' history critics)."""
  return train_lib.Train(
      config=config, init_fn=init_fn, update_fn=update_fn,
      default_hparams={k: config[k] for k in hparam_names}, num_updates=num_updates,
      env_steps_per_update=env_steps_per_update,
      headline=("success", "return") if with_success else ("return", "entropy"))
