"""PPO with an independent critic: any actor with any critic, and an oracle-state critic.

`config.network.kind` (mlp | gru | transformer) picks PPO's actor-critic; by default its
value head is the critic (`network.critic_kind = "same"`, the paths of `ppo.py` and
`ppo_sequence.py`, untouched). Two fields hand the critic to a network of its own,
trained here:

  * `network.critic_kind`: "mlp" (a value MLP over the current observation), "gru" or
    "transformer" (a sequence network over the episode's (observation, previous action,
    previous reward) tokens, its policy head unused). So an MLP actor can have a
    history-aware critic, and a GRU actor an observation-only one.
  * `network.critic_oracle`: the critic also sees the environment's ground truth
    `env.oracle_feature(state)` (KeyChain: whether every pivotal step so far was right,
    and the fraction of pivotal steps left); the actor never does. With "same" the critic
    is then an independent network of the actor's kind.

Actor and critic have separate parameters `{"actor", "critic"}` trained by one optimiser
on PPO's loss (the sum: clipped surrogate + vf_coef * value loss - ent_coef * entropy;
the gradient clip is global over both). The oracle feature reaches the critic through
`OracleFeatureWrapper`, which appends it to every observation (final observations
included, so truncation bootstraps see it); the actor's input drops those entries.

When either network is a sequence network, the rollout carries both carries (the pair
`(actor carry, critic carry)`, `()` for an MLP), reset where an episode starts, and
minibatches hold whole environment windows, as in `ppo_sequence.py`; a sequence critic's
values replay the window from its stored carry and GAE bootstraps a truncated step from
its final observation under the carry at that step (`ppo_sequence.values_and_advantages`).
With two MLPs, minibatches shuffle steps and GAE is `ppo.advantages_with_boundaries`.

`make_ppo_measure(config)` measures PPO's GAE policy gradient under its critic against
KeyChain's exact gradient (`credit_jax/gae_probe.py`); `config.gae_gradient_every`
makes `ppo.make_train` report it every N updates (`with_gae_gradient`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from gymnax.environments import environment, spaces

from credit_jax import envs, nets, rollout
from credit_jax.addons import gae_probe
from credit_jax.nets import sequence as sn
from credit_jax.algos import train as train_lib, losses, ppo_sequence
from credit_jax import episodes
from credit_jax.types import PolicyState, PresampledPolicy, SequencePolicy

CRITIC_KINDS = ("same", "mlp", "gru", "transformer")


def add_critic_fields(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Adds `network.critic_kind` ("same"), `network.critic_oracle` (False) and the GAE
  gradient measurement's `gae_gradient_every` (0: off) and `gae_gradient_episodes` to `c`."""
  c.network.critic_kind = "same"     # same (network.kind's value head) | mlp | gru | transformer
  c.network.critic_oracle = False    # critic also sees env.oracle_feature(state); actor never
  c.gae_gradient_every = 0           # >0: every N updates, metrics gae_grad_* (KeyChain, MLP actor)
  c.gae_gradient_episodes = 256      # fresh episodes per gae_grad measurement
  return c


def critic_kind(config) -> str:
  """The critic's network kind: `network.kind`'s when `critic_kind` is "same"/absent."""
  kind = str(config.network.get("critic_kind", "same"))
  return str(config.network.get("kind", "mlp")) if kind == "same" else kind


def critic_oracle(config) -> bool:
  return bool(config.network.get("critic_oracle", False))


def separate_critic(config) -> bool:
  """Whether the critic is a network of its own (trained by this module)."""
  return str(config.network.get("critic_kind", "same")) != "same" or critic_oracle(config)


def validate_fields(config) -> None:
  """The critic fields; raises `ConfigError` naming the field. Nothing is compiled."""
  req = train_lib.require
  raw = config.network.get("critic_kind", "same")
  req(raw in CRITIC_KINDS, "network.critic_kind",
      f"must be one of {CRITIC_KINDS}, got {raw!r}")
  oracle = config.network.get("critic_oracle", False)
  req(isinstance(oracle, (bool, np.bool_)), "network.critic_oracle",
      f"must be True or False, got {oracle!r}")
  gae_probe.validate_config(config)
  if not separate_critic(config):
    return
  req(not ppo_sequence.bptt_chunk(config), "network.bptt_chunk",
      "truncated BPTT is for PPO's own GRU (network.critic_kind 'same', critic_oracle "
      "False); set it to 0 with a critic of its own")
  if "sequence" in _layout(config):
    ppo_sequence.validate_config(config)
  if oracle:
    req(int(config.get("retry_attempts", 0) or 0) == 0, "retry_attempts",
        "must be 0 with network.critic_oracle (the oracle feature reads the base "
        "environment's state)")
    try:
      env, _ = envs.make(config.env_name, **dict(config.get("env_kwargs", {}) or {}))
    except ValueError:
      return   # train_lib.validate reports the environment itself
    req(callable(getattr(env, "oracle_feature", None)), "network.critic_oracle",
        f"{config.env_name} has no oracle_feature(state) for an oracle-state critic "
        f"(KeyChain-v0 has one)")


def _layout(config) -> str:
  kinds = (str(config.network.get("kind", "mlp")), critic_kind(config))
  return "flat" if kinds == ("mlp", "mlp") else "sequence"


class OracleFeatureWrapper(environment.Environment):
  """Observations `[D + F]`: the wrapped env's `[D]` with `env.oracle_feature(state)`
  (`[F]`) appended, computed from the state the observation belongs to (so at auto-reset
  and final observations too). State, rewards, boundaries and info are the env's."""

  def __init__(self, env: environment.Environment):
    super().__init__()
    if not callable(getattr(env, "oracle_feature", None)):
      raise ValueError(f"{type(env).__name__} has no oracle_feature(state)")
    self._env = env

  @property
  def inner(self) -> environment.Environment:
    return self._env

  @property
  def default_params(self):
    return self._env.default_params

  def _with_feature(self, obs, state):
    obs = jnp.asarray(obs, jnp.float32)
    if obs.ndim != 1:
      raise ValueError(f"OracleFeatureWrapper needs [D] observations, got {obs.shape}")
    return jnp.concatenate([obs, jnp.asarray(self._env.oracle_feature(state), jnp.float32)])

  def reset_env(self, key, params):
    obs, state = self._env.reset_env(key, params)
    return self._with_feature(obs, state), state

  def step_env(self, key, state, action, params):
    obs, state, reward, terminated, info = self._env.step_env(key, state, action, params)
    return self._with_feature(obs, state), state, reward, terminated, info

  def is_truncated(self, state, params):
    return self._env.is_truncated(state, params)

  def is_terminated(self, state, params):
    return self._env.is_terminated(state, params)

  @property
  def num_features(self) -> int:
    """F, the number of oracle entries appended."""
    state = jax.eval_shape(lambda k: self._env.reset_env(k, self.default_params)[1],
                           jax.random.PRNGKey(0))
    return int(np.prod(jax.eval_shape(self._env.oracle_feature, state).shape))

  def observation_space(self, params):
    shape = tuple(self._env.observation_space(params).shape)
    return spaces.Box(-jnp.inf, jnp.inf, (shape[0] + self.num_features,), jnp.float32)

  def action_space(self, params):
    return self._env.action_space(params)

  @property
  def num_actions(self) -> int:
    return self._env.num_actions

  @property
  def name(self) -> str:
    return f"Oracle({self._env.name})"


def make_env(config):
  """`(env, env_params, num_oracle)`: `train_lib.make_env`'s environment, with the oracle
  features (`num_oracle` of them, 0 without `critic_oracle`) appended to each base
  observation, under the history window if any."""
  if not critic_oracle(config):
    env, env_params = train_lib.make_env(config)
    return env, env_params, 0
  env, env_params = envs.make(config.env_name, **dict(config.get("env_kwargs", {}) or {}))
  env = OracleFeatureWrapper(env)
  num_oracle = env.num_features
  window = int(config.get("history_window", 0) or 0)
  if window > 0:
    env = envs.HistoryWrapper(env, window)
  return env, env_params, num_oracle


class ValueMLP(nn.Module):
  """An MLP value `[...]` of observations `[..., *obs_shape]` (`obs_rank` dims each)."""
  hidden_sizes: Tuple[int, ...] = (64, 64)
  activation: str = "tanh"
  obs_rank: int = 1

  @nn.compact
  def __call__(self, obs):
    keep = obs.ndim - self.obs_rank
    x = obs.reshape(obs.shape[:keep] + (-1,)).astype(jnp.float32)
    x = nets.MLP(tuple(self.hidden_sizes), self.activation, name="v_torso")(x)
    return nn.Dense(1, kernel_init=nets.orthogonal(1.0),   # safe to vmap (issue 46)
                    bias_init=nn.initializers.zeros)(x)[..., 0]


@dataclasses.dataclass(frozen=True)
class Part:
  """One network (the actor or the critic) behind one interface.

  `step(params, carry, obs, prev_action, prev_reward) -> (carry, logits, value)` for ONE
  environment; `window(params, carry, obs [E, T, ...], prev_actions, prev_rewards,
  starts [E, T]) -> (logits [E, T, A], values [E, T])` replays E windows from their
  stored carries (an MLP ignores carry and history). `prepare(obs)` is what this part
  sees of the (possibly oracle-augmented) observation. Absent outputs are zeros.
  """
  kind: str
  module: nn.Module
  prepare: Callable[[Any], Any]
  is_actor: bool

  @property
  def sequential(self) -> bool:
    return self.kind != "mlp"

  def initial_carry(self):
    return self.module.initial_carry() if self.sequential else ()

  def init(self, key, obs_shape):
    obs = self.prepare(jnp.zeros(obs_shape, jnp.float32))
    if self.sequential:
      return sn.init_params(self.module, key, obs.shape)
    return self.module.init(key, obs)

  def mlp_outputs(self, params, obs):
    out = self.module.apply(params, self.prepare(obs))
    return (out[0], out[1]) if self.is_actor else (None, out)

  def step(self, params, carry, obs, prev_action, prev_reward):
    if not self.sequential:
      return (carry,) + self.mlp_outputs(params, obs)
    return self.module.apply(params, carry, self.prepare(obs), prev_action, prev_reward,
                             method="step")

  def window(self, params, carry, obs, prev_actions, prev_rewards, starts):
    if not self.sequential:
      return self.mlp_outputs(params, obs)
    logits, values, _ = jax.vmap(lambda c, o, pa, pr, s: sn.unroll(
        self.module, params, c, self.prepare(o), pa, pr, s))(
            carry, obs, prev_actions, prev_rewards, starts)
    return logits, values


def make_parts(config, env, env_params, num_oracle: int) -> Tuple[Part, Part, tuple]:
  """`(actor, critic, obs_shape)` for `config`; `obs_shape` is the env's (with oracle)."""
  net = config.network
  obs_shape = tuple(env.observation_space(env_params).shape)
  rank, num_actions = len(obs_shape), env.num_actions
  strip = (lambda o: o[..., :-num_oracle]) if num_oracle else (lambda o: o)

  def module(kind, actor):
    if kind == "mlp" and actor:
      return nets.ActorCritic(num_actions=num_actions,
                                  hidden_sizes=tuple(net.hidden_sizes),
                                  activation=net.activation, shared_torso=net.shared_torso,
                                  value_head=False, obs_rank=rank)
    if kind == "mlp":
      return ValueMLP(tuple(net.hidden_sizes), net.activation, rank)
    return sn.make_sequence_network(kind, num_actions, obs_rank=rank,
                                    **ppo_sequence.network_kwargs(net, kind))

  actor_kind = str(net.get("kind", "mlp"))
  actor = Part(actor_kind, module(actor_kind, True), strip, True)
  critic = Part(critic_kind(config), module(critic_kind(config), False), lambda o: o, False)
  return actor, critic, obs_shape


def make_policy(actor: Part, critic: Part, layout: str):
  """The rollout policy: samples from the actor; with the "sequence" layout a
  `SequencePolicy` whose carry is `(actor carry, critic carry)` (the critic's is stepped
  only to be stored for the value replay)."""
  num_actions = int(actor.module.num_actions)

  def draw(key):
    return nets.categorical_noise(key, num_actions)

  def sample(logits, noise):
    action = nets.categorical_sample_with_noise(logits, noise)
    return action, nets.categorical_log_prob(logits, action)

  if layout == "flat":
    def act_flat(params, obs, noise):
      logits, _ = actor.mlp_outputs(params["actor"], obs)
      return sample(logits, noise) + ({},)
    return PresampledPolicy(draw=draw, act=act_flat)

  def act(params, carry, obs, prev_action, prev_reward, noise):
    ca, logits, _ = actor.step(params["actor"], carry[0], obs, prev_action, prev_reward)
    cc = carry[1]
    if critic.sequential:
      cc = critic.step(params["critic"], cc, obs, prev_action, prev_reward)[0]
    return ((ca, cc),) + sample(logits, noise) + ({},)

  return SequencePolicy(initial_carry=lambda: (actor.initial_carry(), critic.initial_carry()),
                        draw=draw, act=act)


def values_and_advantages(critic: Part, critic_params, traj, start_state, next_obs,
                          next_state, gamma, gae_lambda, method="auto",
                          max_truncations=None, advantages_fn=None):
  """`(advantages [T, B], values [T, B])` of a rollout under the critic.

  A sequence critic replays the window from its stored carry (`start_state.carry[1]`;
  `start_state`/`next_state` are the rollout's `PolicyState`s, leaves [B, ...]) and
  bootstraps a truncated step from its final observation under the carry at that step
  (`ppo_sequence.values_and_advantages`). An MLP critic uses `advantages_fn`
  (`ppo.advantages_with_boundaries`) with `max_truncations`. Boundaries are data either way.
  """
  if not critic.sequential:
    return advantages_fn(lambda o: critic.mlp_outputs(critic_params, o)[1], traj, next_obs,
                         gamma, gae_lambda, method, max_truncations)
  own = lambda s: PolicyState(carry=s.carry[1], prev_action=s.prev_action,
                              prev_reward=s.prev_reward)
  advantages, values, _ = ppo_sequence.values_and_advantages(
      critic.module, critic_params, traj, own(start_state), next_obs, own(next_state),
      gamma, gae_lambda, method)
  return advantages, values


def make_train(config, hparam_names, n_updates: int, advantages_fn) -> train_lib.Train:
  """`Train` for PPO with a separate critic; `ppo.make_train` calls it with
  `ppo.advantages_with_boundaries` as `advantages_fn`."""
  validate_fields(config)
  env, env_params, num_oracle = make_env(config)
  actor, critic, obs_shape = make_parts(config, env, env_params, num_oracle)
  layout = _layout(config)
  policy = make_policy(actor, critic, layout)
  num_envs, num_steps = int(config.num_envs), int(config.num_steps)
  n_mb, n_epochs = int(config.num_minibatches), int(config.update_epochs)
  optimizer = train_lib.make_optimizer(config)
  with_success = episodes.has_success(config)
  clip_value, gae_method = bool(config.clip_value_loss), str(config.gae_method)
  max_trunc = rollout.max_truncations(env, env_params, num_steps)

  def init_fn(key, hp):
    k_actor, k_critic, k_env, k_run = jax.random.split(key, 4)
    params = {"actor": actor.init(k_actor, obs_shape),
              "critic": critic.init(k_critic, obs_shape)}
    obs, env_state = rollout.reset(env, env_params, k_env, num_envs)
    aux = {"env_state": env_state, "obs": obs,
           **episodes.continuing_init(num_envs, with_success)}
    if layout == "sequence":
      aux["policy_state"] = rollout.initial_policy_state(policy, num_envs)
    return train_lib.TrainState(params=params, opt_state=optimizer.init(params,
                                                                     hp["max_grad_norm"]),
                             key=k_run, update=jnp.zeros((), jnp.int32), aux=aux)

  def loss_fn(params, mb, hp):
    args = (mb["obs"], mb["prev_actions"], mb["prev_rewards"], mb["starts"]) \
        if layout == "sequence" else None
    if args is None:
      logits = actor.mlp_outputs(params["actor"], mb["obs"])[0]
      values = critic.mlp_outputs(params["critic"], mb["obs"])[1]
    else:
      logits = actor.window(params["actor"], mb["carry"][0], *args)[0]
      values = critic.window(params["critic"], mb["carry"][1], *args)[1]
    return losses.ppo_objective(logits, values, mb, hp, clip_value)

  def collect(state, params, k_roll):
    """`(traj, data, values, advantages, new aux entries)` of one window."""
    aux = state.aux
    if layout == "flat":
      traj, (env_state, obs) = rollout.collect(env, env_params, policy, params, k_roll,
                                               aux["env_state"], aux["obs"], num_steps)
      start = end = None
    else:
      start = aux["policy_state"]
      traj, (env_state, obs, end) = rollout.collect(
          env, env_params, policy, params, k_roll, aux["env_state"], aux["obs"], num_steps,
          policy_state=start)
    return traj, start, end, {"env_state": env_state, "obs": obs}

  def update_fn(state, hp):
    key, k_roll, k_perm = jax.random.split(state.key, 3)
    params, aux = state.params, state.aux
    traj, start, end, new_aux = collect(state, params, k_roll)
    advantages, values = values_and_advantages(
        critic, params["critic"], traj, start, new_aux["obs"], end, hp["gamma"],
        hp["gae_lambda"], gae_method, max_trunc, advantages_fn)
    data = {"obs": traj.obs, "actions": traj.actions, "log_probs": traj.log_probs,
            "values": values, "advantages": advantages, "targets": advantages + values}
    if layout == "flat":
      data = jax.tree.map(lambda x: x.reshape((num_envs * num_steps,) + x.shape[2:]), data)
    else:
      prev_a, prev_r, starts = rollout.sequence_inputs(traj, start)
      data.update(prev_actions=prev_a, prev_rewards=prev_r, starts=starts)
      data = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), data)     # [T, B] -> [B, T]
      data["carry"] = start.carry                                    # leaves [B, ...]
      new_aux["policy_state"] = end
    params, opt_state, metrics, ep_carry = ppo_sequence.optimise_and_report(
        lambda p, mb: loss_fn(p, mb, hp), params, state, data, k_perm, hp, traj, aux,
        values, advantages, config=config, num_updates=n_updates, num_epochs=n_epochs,
        num_minibatches=n_mb, optimizer=optimizer, with_success=with_success)
    new_aux.update(ep_carry)
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                             update=state.update + 1, aux=new_aux), metrics

  train = ppo_sequence.sequence_train(config, init_fn, update_fn, hparam_names, n_updates,
                                      num_envs * num_steps, with_success)
  # What evaluating a checkpoint needs (train_lib.EVALUATION): the actor samples as in
  # training, or (greedy) with zero Gumbel noise, i.e. takes its most probable action.
  greedy_policy = dataclasses.replace(
      policy, draw=lambda key: jnp.zeros((int(actor.module.num_actions),), jnp.float32))
  train.env, train.env_params = env, env_params
  train.eval_policy = lambda params, greedy=False: (
      greedy_policy if greedy else policy, params)
  return train


def episode_values(critic: Part, critic_params, traj):
  """values [T, N] of the critic on N episodes `traj` (leaves [T, N, ...]) that start at
  step 0 (`rollout.collect_episodes`); a sequence critic runs from its initial carry."""
  if not critic.sequential:
    return critic.mlp_outputs(critic_params, traj.obs)[1]
  n = traj.rewards.shape[1]
  start = PolicyState(
      carry=jax.tree.map(lambda x: jnp.broadcast_to(x, (n,) + x.shape),
                         critic.initial_carry()),
      prev_action=jnp.full((n,), -1, jnp.int32), prev_reward=jnp.zeros((n,), jnp.float32))
  prev_a, prev_r, starts = rollout.sequence_inputs(traj, start)
  batch_major = lambda x: jnp.swapaxes(x, 0, 1)
  out = critic.window(critic_params, start.carry, batch_major(traj.obs),
                      batch_major(prev_a), batch_major(prev_r), batch_major(starts))[1]
  return batch_major(out)


def make_ppo_measure(config):
  """`measure(params, key, gamma, gae_lambda) -> {gae_probe.STAT_NAMES: []}` on PPO's
  parameters (`TrainState.params` of `ppo.make_train(config)`, one seed): the GAE policy
  gradient under PPO's critic against KeyChain's exact gradient
  (`gae_probe.make_measure`, `config.gae_gradient_episodes` fresh episodes). Needs an
  MLP actor on KeyChain-v0 with cue_delay 0 and no history window (ConfigError else)."""
  config = ml_collections.ConfigDict(config.to_dict())
  config.gae_gradient_every = max(1, int(config.get("gae_gradient_every", 0) or 0))
  config.chunk_updates = config.gae_gradient_every
  gae_probe.validate_config(config)
  episodes_n = int(config.get("gae_gradient_episodes", 256))
  if not separate_critic(config):
    env, env_params = train_lib.make_env(config)
    network, _ = train_lib.make_network(config, env, env_params, value_head=True)
    inner = gae_probe.make_measure(
        env, env_params, lambda p, o: network.apply(p, o)[0],
        lambda p, traj: network.apply(p, traj.obs)[1], episodes_n)
    return lambda params, key, gamma, lam: inner(params, params, key, gamma, lam)
  env, env_params, num_oracle = make_env(config)
  actor, critic, _ = make_parts(config, env, env_params, num_oracle)

  inner = gae_probe.make_measure(
      env, env_params, lambda p, o: actor.module.apply(p, o)[0],
      lambda p, traj: episode_values(critic, p, traj), episodes_n)
  return lambda params, key, gamma, lam: inner(params["actor"], params["critic"], key,
                                              gamma, lam)


def with_gae_gradient(config, train: train_lib.Train) -> train_lib.Train:
  """`train` itself when `config.gae_gradient_every` is 0 (absent); else a
  `train_lib.MeasuredTrain` reporting `make_ppo_measure(config)` every N updates, at
  the state's parameters, with a key folded from the state's (training draws unchanged)."""
  every = int(config.get("gae_gradient_every", 0) or 0)
  if not every:
    return train
  measure = make_ppo_measure(config)

  def measure_state(state, hp):
    key = jax.random.fold_in(state.key, 0x6AE)
    return measure(state.params, key, hp["gamma"], hp["gae_lambda"])

  return train_lib.MeasuredTrain(train, every, measure_state, gae_probe.METRIC_PREFIX)
