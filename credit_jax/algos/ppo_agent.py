"""PPO's networks as parts of its one program (`ppo.py`): every network kind and critic.

`ppo.py` writes PPO once: its rollout modes, its update and the hook slots. What differs
between network arrangements is an `Agent`, built here by `make_agent`:

  * flat (`network.kind` mlp | tabular | linear, `network.critic_kind` "same"): one
    memoryless actor-critic whose value head is the critic. Minibatches shuffle steps;
    GAE is `advantages_with_boundaries` (one value pass after the rollout).
  * sequence (`network.kind` gru | transformer, "same" critic): an actor-critic with
    memory of the episode. The rollout carries its memory (`rollout.collect` with a
    `PolicyState`, kept in the train state for the next window); the loss replays each
    environment's window from the carry stored at its start (`sequence.unroll`, the
    memory reset where an episode starts); minibatches split the environments, never
    time. Values for GAE replay the window too (`replay_advantages`); with
    `credit_jax.fast_paths` on, a GRU's are read from the rollout instead
    (`gru_values_and_advantages`: its value head at every step and the hidden state after
    every step, equal to the replay up to float rounding; a transformer always replays,
    its KV cache too large to store per step). `network.bptt_chunk = L` (GRU, opt-in):
    truncated backpropagation through time, each L-step chunk of a window replayed from
    the hidden state the rollout stored at its start, all chunks side by side; the
    forward numbers are the full replay's, the gradient stops at chunk boundaries
    (`chunk_carries`). A truncated step bootstraps from the value of its final
    observation read as the next token of its episode.
  * split (`network.critic_kind` mlp | gru | transformer, or `network.critic_oracle`):
    an actor of `network.kind` and a critic of its own, parameters `{"actor", "critic"}`
    trained by one optimiser on PPO's summed loss (the gradient clip global over both).
    A sequence critic is a sequence network whose policy head is unused; with
    `critic_oracle` the critic also sees the environment's ground truth
    `env.oracle_feature(state)` through `OracleFeatureWrapper` (final observations
    included), which the actor's input drops. When either part has memory, the rollout
    carries the pair `(actor carry, critic carry)` (`()` for an MLP) and minibatches hold
    whole windows, as for a sequence network.

`make_ppo_measure(config)` measures PPO's GAE policy gradient under its critic against
KeyChain's exact gradient (`credit_jax/addons/gae_probe.py`); `config.gae_gradient_every`
makes `ppo.make_train` report it every N updates (`with_gae_gradient`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from gymnax.environments import environment, spaces

from credit_jax import envs, fast_paths, nets, returns, rollout
from credit_jax.addons import gae_probe
from credit_jax.algos import train as train_lib
from credit_jax.envs import wrappers
from credit_jax.nets import gru
from credit_jax.nets import sequence as sn
from credit_jax.types import PolicyState, PresampledPolicy, SequencePolicy

CRITIC_KINDS = ("same", "mlp", "gru", "transformer")


# --- the network fields -------------------------------------------------------------

def add_fields(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Adds `network.bptt_chunk` (0: off), `network.critic_kind` ("same"),
  `network.critic_oracle` (False) and the GAE gradient measurement's
  `gae_gradient_every` (0: off) and `gae_gradient_episodes` to `c`."""
  c.network.bptt_chunk = 0           # GRU: >0 = truncated BPTT in chunks of this many steps
                                     # from stored hidden states (divides num_steps); 0 = off
  c.network.critic_kind = "same"     # same (network.kind's value head) | mlp | gru | transformer
  c.network.critic_oracle = False    # critic also sees env.oracle_feature(state); actor never
  c.gae_gradient_every = 0           # >0: every N updates, metrics gae_grad_* (KeyChain, MLP actor)
  c.gae_gradient_episodes = 256      # fresh episodes per gae_grad measurement
  return c


def bptt_chunk(config) -> int:
  """`config.network.bptt_chunk` (0, off, when the config has no such field)."""
  return int(config.network.get("bptt_chunk", 0) or 0)


def critic_kind(config) -> str:
  """The critic's network kind: `network.kind`'s when `critic_kind` is "same"/absent."""
  kind = str(config.network.get("critic_kind", "same"))
  return str(config.network.get("kind", "mlp")) if kind == "same" else kind


def critic_oracle(config) -> bool:
  return bool(config.network.get("critic_oracle", False))


def separate_critic(config) -> bool:
  """Whether the critic is a network of its own (the split agent)."""
  return str(config.network.get("critic_kind", "same")) != "same" or critic_oracle(config)


def _sequential_parts(config) -> bool:
  return not train_lib.flat_network(config) or critic_kind(config) in sn.KINDS


def validate_fields(config) -> None:
  """The network and critic fields; raises `ConfigError` naming the field."""
  req = train_lib.require
  net = config.network
  if _sequential_parts(config):
    train_lib.validate_sequence_fields(config)
    req(config.num_envs % config.num_minibatches == 0, "num_minibatches",
        f"a sequence network splits minibatches over environments: num_envs="
        f"{config.num_envs} is not divisible by num_minibatches={config.num_minibatches}")
  chunk = net.get("bptt_chunk", 0) or 0
  req(int(chunk) == chunk and chunk >= 0, "network.bptt_chunk",
      f"must be an int >= 0 (0: the whole window), got {chunk!r}")
  if chunk:
    req(str(net.kind) == "gru", "network.bptt_chunk",
        f"truncated BPTT is for network.kind 'gru' (got {net.kind!r}); set it to 0")
    req(int(config.num_steps) % int(chunk) == 0, "network.bptt_chunk",
        f"must divide num_steps={config.num_steps}, got {chunk}")
  raw = net.get("critic_kind", "same")
  train_lib.require_one_of(raw, "network.critic_kind", CRITIC_KINDS)
  oracle = net.get("critic_oracle", False)
  req(isinstance(oracle, (bool, np.bool_)), "network.critic_oracle",
      f"must be True or False, got {oracle!r}")
  req(not (chunk and separate_critic(config)), "network.bptt_chunk",
      "truncated BPTT is for PPO's own GRU (network.critic_kind 'same', critic_oracle "
      "False); set it to 0 with a critic of its own")
  req(not (oracle and int(config.get("retry_attempts", 0) or 0)), "retry_attempts",
      "must be 0 with network.critic_oracle (the oracle feature reads the base "
      "environment's state)")


def validate_env(config, made) -> None:
  """What the network fields need of the environment `made` (`envs.make`'s `(env,
  env_params)` for `config`): the oracle feature, the exact GAE gradient's KeyChain."""
  train_lib.require(not critic_oracle(config) or callable(
      getattr(made[0], "oracle_feature", None)), "network.critic_oracle",
      f"{config.env_name} has no oracle_feature(state) for an oracle-state critic "
      f"(KeyChain-v0 has one)")
  gae_probe.validate_config(config, made)


# --- the environment with the oracle feature ------------------------------------------

class OracleFeatureWrapper(wrappers.Wrapper):
  """Observations `[D + F]`: the wrapped env's `[D]` with `env.oracle_feature(state)`
  (`[F]`) appended, computed from the state the observation belongs to (so at auto-reset
  and final observations too). State, rewards, boundaries and info are the env's."""

  def __init__(self, env: environment.Environment):
    if not callable(getattr(env, "oracle_feature", None)):
      raise ValueError(f"{type(env).__name__} has no oracle_feature(state)")
    super().__init__(env)

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

  def get_obs(self, state, params=None, key=None):
    return self._with_feature(self._env.get_obs(state, params), state)

  @property
  def num_features(self) -> int:
    """F, the number of oracle entries appended."""
    state = jax.eval_shape(lambda k: self._env.reset_env(k, self.default_params)[1],
                           jax.random.PRNGKey(0))
    return int(np.prod(jax.eval_shape(self._env.oracle_feature, state).shape))

  def observation_space(self, params=None):
    shape = tuple(self._env.observation_space(params).shape)
    return spaces.Box(-jnp.inf, jnp.inf, (shape[0] + self.num_features,), jnp.float32)

  @property
  def name(self) -> str:
    return f"Oracle({self._env.name})"


def make_env(config, made=None):
  """`(env, env_params, num_oracle)`: `train_lib.make_env`'s environment, with the oracle
  features (`num_oracle` of them, 0 without `critic_oracle`) appended to each base
  observation, under the history window if any. `made`: `envs.make`'s `(env,
  env_params)` for `config` where the caller has them (else made here)."""
  if not critic_oracle(config):
    env, env_params = train_lib.make_env(config, made)
    return env, env_params, 0
  env, env_params = made or envs.make(config.env_name,
                                      **dict(config.get("env_kwargs", {}) or {}))
  env = OracleFeatureWrapper(env)
  num_oracle = env.num_features
  window = int(config.get("history_window", 0) or 0)
  if window > 0:
    env = envs.HistoryWrapper(env, window)
  return env, env_params, num_oracle


# --- advantages ------------------------------------------------------------------------

def _check_truncations(max_truncations) -> None:
  if max_truncations is not None and (int(max_truncations) != max_truncations
                                      or max_truncations < 0):
    raise ValueError(f"max_truncations must be None or an int >= 0, got {max_truncations}")


def _truncation_hits(truncated, max_truncations: int):
  """The j-th truncated step of each column (j < k) as one-hot `[T, B]` masks, and their
  rows `[k, B]` (argmax of an all-False column is 0: gathered, then masked out)."""
  rank = jnp.cumsum(truncated.astype(jnp.int32), axis=0)              # [T, B]
  hits = [jnp.logical_and(truncated, rank == j + 1) for j in range(int(max_truncations))]
  rows = jnp.stack([jnp.argmax(h, axis=0) for h in hits]) if hits else \
      jnp.zeros((0, truncated.shape[1]), jnp.int32)                    # [k, B]
  return hits, rows


def _scatter_hits(hits, v_final, like):
  """`[T, B]`: row j of `v_final [k, B]` where mask `hits[j]` is True, else 0."""
  final_values = jnp.zeros(like.shape, like.dtype)
  for j, h in enumerate(hits):
    final_values = jnp.where(h, v_final[j][None], final_values)
  return final_values


def _overflow_to_nan(advantages, truncated, hits):
  """NaN advantages in columns with more truncations than `hits` were valued."""
  if hits is None:
    return advantages
  overflow = jnp.sum(truncated, axis=0) > len(hits)                    # [B]
  return jnp.where(overflow[None], jnp.nan, advantages)


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
  _check_truncations(max_truncations)
  n = num_steps * batch
  if max_truncations is None or max_truncations >= num_steps:
    hits, final_obs = None, traj.final_obs.reshape((n,) + obs_shape)
  else:
    hits, rows = _truncation_hits(traj.truncated, max_truncations)
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
    final_values = _scatter_hits(hits, v_final.reshape(len(hits), batch), values)
  discounts = jnp.full_like(traj.rewards, gamma)
  advantages = returns.gae(traj.rewards, discounts, values_tp1, gae_lambda,
                           terminated=traj.terminated, truncated=traj.truncated,
                           final_values=final_values, method=method)
  return _overflow_to_nan(advantages, traj.truncated, hits), values


def replay_advantages(network, params, traj, start_state, next_obs, next_state, gamma,
                      gae_lambda, method="auto", rewards=None):
  """Values (replayed from the window's stored carry) and GAE with boundaries as data.

  Args:
    network: a sequence actor-critic (`credit_jax/nets/sequence.py`).
    traj: Trajectory [T, B] from `rollout.collect` with a sequence policy.
    start_state: `PolicyState` (leaves [B, ...]) the window started from.
    next_obs: [B, *obs_shape] and next_state: `PolicyState` after the window.
    rewards: [T, B] what GAE discounts (None: `traj.rewards`; the network's inputs are
      always the environment's rewards).
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
  advantages = _gae_after_window(network, params, traj, rewards, values, final_values,
                                 next_obs, next_state, gamma, gae_lambda, method)
  return advantages, values, inputs


def _gae_after_window(network, params, traj, rewards, values, final_values, next_obs,
                      next_state, gamma, gae_lambda, method):
  """GAE [T, B] of a window's `rewards` [T, B] (None: `traj.rewards`) from its values
  [T, B] and truncation bootstraps `final_values` [T, B], the last step bootstrapping
  from `next_obs` [B, ...] stepped under `next_state`; terminated steps do not bootstrap,
  truncated ones use `final_values` (`returns.gae`)."""
  rewards = traj.rewards if rewards is None else rewards
  _, _, next_values = jax.vmap(lambda c, o, a, r: network.apply(
      params, c, o, a, r, method="step"))(next_state.carry, next_obs,
                                          next_state.prev_action, next_state.prev_reward)
  values_tp1 = jnp.concatenate([values, next_values[None]], axis=0)      # [T + 1, B]
  return returns.gae(rewards, jnp.full_like(rewards, gamma), values_tp1, gae_lambda,
                     terminated=traj.terminated, truncated=traj.truncated,
                     final_values=final_values, method=method)


def gru_values_and_advantages(network, params, traj, next_obs, next_state, gamma,
                              gae_lambda, method="auto", max_truncations=None,
                              rewards=None):
  """`replay_advantages` for a GRU from the values and carries its rollout stored.

  Args:
    traj: Trajectory [T, B] from `rollout.collect` with
      `make_sequence_policy(network, value=True, carry=True)`: extras "value" [T, B]
      and "carry" (leaves [T, B, H]: the hidden state after each step, before a reset).
    next_obs: [B, *obs_shape] and next_state: `PolicyState` after the window.
    max_truncations: None, or an int `k` no environment's truncated steps exceed
      (`rollout.max_truncations`): the final observations are then valued at the first
      `k` truncated steps of each environment only (`k B` rows instead of `T B`); a
      column with more gets NaN advantages, as in `advantages_with_boundaries`.
    rewards: [T, B] what GAE discounts (None: `traj.rewards`).
  Returns:
    `(advantages [T, B], values [T, B])`. The values are the rollout's; a truncated step
    bootstraps from its final observation stepped from the hidden state after the step
    (the replay's `final`), the last step from `next_obs` under `next_state`. The same
    function of the same numbers as `replay_advantages`, without its pass over the
    window; equal to it up to float rounding (tests/test_sequence_bptt.py).
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
  _check_truncations(max_truncations)

  def value_after(final_obs, actions, rewards, carry):   # leaves [N, B, ...] -> [N, B]
    xp, w_h, b_h = network.apply(params, final_obs, actions, rewards, method="project")
    after = gru.step(w_h, b_h, network.stack(carry), xp)
    return network.apply(params, network.unstack(after), method="heads")[1]

  final = (traj.final_obs, traj.actions, traj.rewards, traj.extras["carry"])
  hits = None
  if max_truncations is None or max_truncations >= num_steps:
    final_values = value_after(*final)                                   # [T, B]
  else:   # the j-th truncated step of each column (j < k), gathered, then scattered back
    hits, rows = _truncation_hits(traj.truncated, max_truncations)
    final_values = jnp.zeros((num_steps, batch), values.dtype)
    if hits:
      take = lambda x: jnp.take_along_axis(
          x, rows.reshape(rows.shape + (1,) * (x.ndim - 2)), axis=0)     # [k, B, ...]
      final_values = _scatter_hits(hits, value_after(*jax.tree.map(take, final)), values)
  advantages = _gae_after_window(network, params, traj, rewards, values, final_values,
                                 next_obs, next_state, gamma, gae_lambda, method)
  return _overflow_to_nan(advantages, traj.truncated, hits), values


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


def window_outputs(network, chunk: int, params, mb):
  """`(logits [E, T, A], values [E, T])` of a minibatch of whole windows `[E, T, ...]`
  (E environments), each replayed from `mb["carry"]` (leaves `[E, ...]`); with `chunk =
  L` as `T / L` chunks from the carries (leaves `[E, T / L, ...]`) stored at their starts."""
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
  return logits, values


# --- the parts of a split agent --------------------------------------------------------

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
    return window_outputs(self.module, 0, params, {
        "obs": self.prepare(obs), "prev_actions": prev_actions,
        "prev_rewards": prev_rewards, "starts": starts, "carry": carry})


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
                                    **train_lib.sequence_kwargs(net, kind))

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


def critic_advantages(critic: Part, critic_params, traj, start_state, next_obs,
                      next_state, gamma, gae_lambda, method="auto", max_truncations=None,
                      rewards=None):
  """`(advantages [T, B], values [T, B])` of a rollout under the critic.

  A sequence critic replays the window from its stored carry (`start_state.carry[1]`;
  `start_state`/`next_state` are the rollout's `PolicyState`s, leaves [B, ...]) and
  bootstraps a truncated step from its final observation under the carry at that step
  (`replay_advantages`). An MLP critic uses `advantages_with_boundaries` with
  `max_truncations`. Boundaries are data either way; `rewards` [T, B] are what GAE
  discounts (None: `traj.rewards`).
  """
  if not critic.sequential:
    if rewards is not None:
      traj = traj._replace(rewards=rewards)
    return advantages_with_boundaries(lambda o: critic.mlp_outputs(critic_params, o)[1],
                                      traj, next_obs, gamma, gae_lambda, method,
                                      max_truncations)
  own = lambda s: PolicyState(carry=s.carry[1], prev_action=s.prev_action,
                              prev_reward=s.prev_reward)
  advantages, values, _ = replay_advantages(
      critic.module, critic_params, traj, own(start_state), next_obs, own(next_state),
      gamma, gae_lambda, method, rewards)
  return advantages, values


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


# --- the agent -------------------------------------------------------------------------

class Agent(NamedTuple):
  """What PPO's program needs of its networks, one arrangement of them (module doc).

  param_keys: keys `init` takes (1, or 2: the actor's and the critic's).
  init: `(*keys) -> params`.
  policy: `() -> ` the rollout policy (a `PresampledPolicy` or a `SequencePolicy`), read
    when the update is traced (a GRU's fast paths store values in the rollout).
  sequential: whether the rollout carries a `PolicyState` and minibatches are whole
    windows (batch-major `[E, T, ...]` with the sequence inputs and `carry`).
  outputs: `(params, mb) -> (logits, values)` at a minibatch's steps.
  advantages: `(params, traj, rewards, start, next_obs, end, hp) -> (advantages [T, B],
    values [T, B])` of a window (`rewards` [T, B]: what GAE discounts; `start`/`end`: the
    window's `PolicyState`s, None for a flat agent).
  carry: `(traj, start) ->` the minibatch entry "carry" (sequential agents).
  apply: `(params, obs [N, ...]) -> (logits, values)` of a flat agent (None: sequential).
  network: the one flax module of a flat actor-critic (hooks, evaluation), else None.
  eval_policy: `(params, greedy=False) -> (policy, params)` where the agent gives its
    own (`train_lib.EVALUATION`), else None.
  """
  param_keys: int
  init: Callable
  policy: Callable
  sequential: bool
  outputs: Callable
  advantages: Callable
  carry: Optional[Callable] = None
  apply: Optional[Callable] = None
  network: Any = None
  eval_policy: Optional[Callable] = None


def make_agent(config, env, env_params, num_oracle: int = 0) -> Agent:
  """The `Agent` `config.network` describes on `env` (from `make_env`, features' wrappers
  included), with `num_oracle` oracle entries at the end of its observations."""
  method = str(config.gae_method)
  max_trunc = rollout.max_truncations(env, env_params, int(config.num_steps))
  if separate_critic(config):
    return _split_agent(config, env, env_params, num_oracle, method, max_trunc)
  if train_lib.flat_network(config):
    network, obs_shape = train_lib.make_network(config, env, env_params, value_head=True)
    policy = nets.make_policy_fn(network, value=False)  # values: one pass after the rollout

    def flat_advantages(params, traj, rewards, start, next_obs, end, hp):
      del start, end
      return advantages_with_boundaries(
          lambda o: network.apply(params, o)[1], traj._replace(rewards=rewards), next_obs,
          hp["gamma"], hp["gae_lambda"], method, max_trunc)

    apply = lambda params, obs: network.apply(params, obs)
    return Agent(1, lambda k: train_lib.init_params(network, k, obs_shape), lambda: policy,
                 False, lambda params, mb: apply(params, mb["obs"]), flat_advantages,
                 apply=apply, network=network)
  network, obs_shape = train_lib.make_network(config, env, env_params, value_head=True)
  is_gru, chunk = str(config.network.kind) == "gru", bptt_chunk(config)
  # A GRU's rollout keeps its values and hidden states where GAE (fast paths on) or
  # truncated BPTT reads them; read when traced, as `fast_paths` is.
  stored = lambda: is_gru and fast_paths.enabled()

  def sequence_policy():
    return sn.make_sequence_policy(network, value=stored(), carry=stored() or chunk > 0)

  def sequence_advantages(params, traj, rewards, start, next_obs, end, hp):
    args = (hp["gamma"], hp["gae_lambda"], method)
    if stored():
      return gru_values_and_advantages(network, params, traj, next_obs, end, *args,
                                       max_trunc, rewards)
    return replay_advantages(network, params, traj, start, next_obs, end, *args,
                             rewards)[:2]

  return Agent(1, lambda k: sn.init_params(network, k, obs_shape), sequence_policy, True,
               lambda params, mb: window_outputs(network, chunk, params, mb),
               sequence_advantages,
               carry=lambda traj, start: (chunk_carries(start.carry, traj.extras["carry"],
                                                        chunk) if chunk else start.carry))


def _split_agent(config, env, env_params, num_oracle, method, max_trunc) -> Agent:
  actor, critic, obs_shape = make_parts(config, env, env_params, num_oracle)
  sequential = actor.sequential or critic.sequential
  policy = make_policy(actor, critic, "sequence" if sequential else "flat")

  def init(k_actor, k_critic):
    return {"actor": actor.init(k_actor, obs_shape),
            "critic": critic.init(k_critic, obs_shape)}

  def outputs(params, mb):
    if not sequential:
      return (actor.mlp_outputs(params["actor"], mb["obs"])[0],
              critic.mlp_outputs(params["critic"], mb["obs"])[1])
    args = (mb["obs"], mb["prev_actions"], mb["prev_rewards"], mb["starts"])
    return (actor.window(params["actor"], mb["carry"][0], *args)[0],
            critic.window(params["critic"], mb["carry"][1], *args)[1])

  def advantages(params, traj, rewards, start, next_obs, end, hp):
    return critic_advantages(critic, params["critic"], traj, start, next_obs, end,
                             hp["gamma"], hp["gae_lambda"], method, max_trunc, rewards)

  # Evaluating a checkpoint (train_lib.EVALUATION): the actor samples as in training, or
  # (greedy) with zero Gumbel noise, i.e. takes its most probable action.
  greedy_policy = dataclasses.replace(
      policy, draw=lambda key: jnp.zeros((int(actor.module.num_actions),), jnp.float32))
  return Agent(2, init, lambda: policy, sequential, outputs, advantages,
               carry=lambda traj, start: start.carry,
               apply=None if sequential else (lambda params, obs: (
                   actor.mlp_outputs(params["actor"], obs)[0],
                   critic.mlp_outputs(params["critic"], obs)[1])),
               eval_policy=lambda params, greedy=False: (
                   greedy_policy if greedy else policy, params))


# --- the GAE gradient measurement --------------------------------------------------------

def make_ppo_measure(config, made=None):
  """`measure(params, key, gamma, gae_lambda) -> {gae_probe.STAT_NAMES: []}` on PPO's
  parameters (`TrainState.params` of `ppo.make_train(config)`, one seed): the GAE policy
  gradient under PPO's critic against KeyChain's exact gradient
  (`gae_probe.make_measure`, `config.gae_gradient_episodes` fresh episodes). Needs an
  MLP actor on KeyChain-v0 with cue_delay 0 and no history window (ConfigError else).
  `made`: `envs.make`'s `(env, env_params)` for `config` (None: made here)."""
  config = ml_collections.ConfigDict(config.to_dict())
  config.gae_gradient_every = max(1, int(config.get("gae_gradient_every", 0) or 0))
  config.chunk_updates = config.gae_gradient_every
  gae_probe.validate_config(config, made)
  episodes_n = int(config.get("gae_gradient_episodes", 256))
  env, env_params, num_oracle = make_env(config, made)
  if not separate_critic(config):
    network, _ = train_lib.make_network(config, env, env_params, value_head=True)
    inner = gae_probe.make_measure(
        env, env_params, lambda p, o: network.apply(p, o)[0],
        lambda p, traj: network.apply(p, traj.obs)[1], episodes_n)
    return lambda params, key, gamma, lam: inner(params, params, key, gamma, lam)
  actor, critic, _ = make_parts(config, env, env_params, num_oracle)
  inner = gae_probe.make_measure(
      env, env_params, lambda p, o: actor.module.apply(p, o)[0],
      lambda p, traj: episode_values(critic, p, traj), episodes_n)
  return lambda params, key, gamma, lam: inner(params["actor"], params["critic"], key,
                                              gamma, lam)


def with_gae_gradient(config, train: train_lib.Train, made=None) -> train_lib.Train:
  """`train` itself when `config.gae_gradient_every` is 0 (absent); else a
  `train_lib.MeasuredTrain` reporting `make_ppo_measure(config, made)` every N updates,
  at the state's parameters, with a key folded from the state's (training draws
  unchanged)."""
  every = int(config.get("gae_gradient_every", 0) or 0)
  if not every:
    return train
  measure = make_ppo_measure(config, made)

  def measure_state(state, hp):
    key = jax.random.fold_in(state.key, 0x6AE)
    return measure(state.params, key, hp["gamma"], hp["gae_lambda"])

  return train_lib.MeasuredTrain(train, every, measure_state, gae_probe.METRIC_PREFIX)
