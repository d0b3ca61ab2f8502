"""Sequence policies and critics that see the whole history: GRU, causal transformer.

Both networks read, at every step, a token made of the observation, the one-hot previous
action (all zeros at an episode start, where it is -1) and the previous reward, and carry
memory from step to step. Each offers two paths that compute the same function:

  * `step(carry, obs, prev_action, prev_reward) -> (carry, logits, value)`: one step, for
    acting inside the rollout engine's scan (`make_sequence_policy` wraps it as a
    `SequencePolicy`);
  * `unroll(network, params, carry, obs, prev_actions, prev_rewards, starts, final=None)`:
    a whole window `[T]` of one environment from the carry stored at its start, for
    training (vmap it over environments). `starts[t]` resets the memory before step t (an
    episode began there); `final=(final_obs, actions, rewards)` also returns the value of
    each step's final observation under the memory at that step, which a truncated step
    bootstraps from.

`GRUActorCritic`: an MLP encoder, a GRU cell and linear heads; one trunk shared by the
policy and the value, or one trunk each (`shared_torso=False`, the carry is then a pair).
`unroll` encodes all steps and projects them onto the gates at once, scans only the
recurrent part (`credit_jax.nets.gru.scan`: one `[H, 3H]` matmul per step, sliced per gate;
hand-written backward with the fast paths on), and applies the heads at once.

`TransformerActorCritic`: a pre-LayerNorm causal transformer over the episode's tokens
with a sinusoidal encoding of the step's time in its episode. Attention is over the last
`max_len` tokens of the current episode (a sliding window; the whole episode when it is
shorter). Acting keeps a fixed-size key/value cache of `max_len` slots per layer, written
as a ring buffer (slot `t % max_len`), so the compiled step has the same shapes and the
same cost at every step index: per layer O(d^2) for the projections and MLP plus
O(max_len * d) for the attention over the cache, never more. `unroll` runs all `T` tokens
at once against the stored cache and each other (O(T (max_len + T) d) per layer), with
attention masked to the token's own episode and window, so an episode reset inside the
window cuts attention. Replaying from a stored cache uses the keys and values it holds,
computed by the parameters that acted (like a GRU's stored carry, it is data, not a
function of the parameters being trained); with the same parameters the two paths agree.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Tuple

import flax.linen as nn
import jax
from jax import Array
import jax.numpy as jnp
import numpy as np

from credit_jax.nets import gru, lm
from credit_jax.nets.mlp import _dense   # orthogonal kernel, zero bias: the MLPs' layer
from credit_jax import nets
from credit_jax.types import SequencePolicy

KINDS = ("gru", "transformer")


def _token(obs: Array, prev_action: Array, prev_reward: Array, num_actions: int,
           obs_rank: int) -> Array:
  """`[..., D + A + 1]`: flat observation, one-hot previous action, previous reward."""
  keep = obs.ndim - obs_rank
  if keep < 0 or jnp.shape(prev_action) != obs.shape[:keep] or \
      jnp.shape(prev_reward) != obs.shape[:keep]:
    raise ValueError(
        f"obs must be [..., *obs_shape] with obs_rank={obs_rank} dims per observation "
        f"and prev_action, prev_reward [...] its leading dims; got obs {obs.shape}, "
        f"prev_action {jnp.shape(prev_action)}, prev_reward {jnp.shape(prev_reward)}")
  x = obs.reshape(obs.shape[:keep] + (-1,)).astype(jnp.float32)
  a = jax.nn.one_hot(prev_action, num_actions, dtype=jnp.float32)
  return jnp.concatenate([x, a, jnp.asarray(prev_reward, jnp.float32)[..., None]], -1)


class GRUActorCritic(nn.Module):
  """GRU policy logits and value over (observation, previous action, previous reward).

  Carry: `[hidden_size]` (shared trunk) or a pair of them (policy trunk, value trunk).
  `step` accepts any leading batch dims on all its arguments (the carry's included).
  The cells are `credit_jax.nets.gru.GRUCell`s (flax's `nn.GRUCell` parameters and
  function); the `K` trunks (1 or 2) run side by side as stacked arrays
  `[..., K, .]`.
  """
  num_actions: int
  hidden_size: int = 64
  encoder_sizes: Sequence[int] = (64,)
  activation: str = "tanh"
  shared_torso: bool = True
  obs_rank: int = 1

  def setup(self):
    self.pi_encoder = nets.MLP(tuple(self.encoder_sizes), self.activation)
    self.pi_cell = gru.GRUCell(features=self.hidden_size)
    if not self.shared_torso:
      self.v_encoder = nets.MLP(tuple(self.encoder_sizes), self.activation)
      self.v_cell = gru.GRUCell(features=self.hidden_size)
    self.pi_head = _dense(self.num_actions, 0.01)
    self.v_head = _dense(1, 1.0)

  def initial_carry(self) -> Any:
    h = jnp.zeros((self.hidden_size,), jnp.float32)
    return h if self.shared_torso else (h, h)

  def stack(self, carry) -> Array:
    """The carry as `[..., K, H]`."""
    return carry[..., None, :] if self.shared_torso else jnp.stack(carry, axis=-2)

  def unstack(self, hs: Array) -> Any:
    """`[..., K, H]` back to the carry's form."""
    return hs[..., 0, :] if self.shared_torso else (hs[..., 0, :], hs[..., 1, :])

  def project(self, obs, prev_action, prev_reward):
    """`(xp [..., K, 3H], w_h, b_h [K, 3H])`: each trunk's encoded input projected onto
    its gates, and the recurrent weights, `w_h = (w_hr, w_hz, w_hn)` `[K, H, H]` each
    (see `credit_jax.nets.gru`)."""
    x = _token(obs, prev_action, prev_reward, self.num_actions, self.obs_rank)
    trunks = [(self.pi_encoder, self.pi_cell)]
    if not self.shared_torso:
      trunks.append((self.v_encoder, self.v_cell))
    xps, w_hs, b_hs = [], [], []
    for encoder, cell in trunks:
      e = encoder(x)
      w_i, b_i, w_h, b_h = cell(e.shape[-1])
      xps.append(e @ w_i + b_i)
      w_hs.append(w_h)
      b_hs.append(b_h)
    w_h = tuple(jnp.stack([w[g] for w in w_hs]) for g in range(3))
    return jnp.stack(xps, axis=-2), w_h, jnp.stack(b_hs)

  def heads(self, carry) -> Tuple[Array, Array]:
    """`(logits [..., A], value [...])` from the carry after a step."""
    h_pi, h_v = (carry, carry) if self.shared_torso else carry
    return self.pi_head(h_pi), self.v_head(h_v)[..., 0]

  def step(self, carry, obs, prev_action, prev_reward):
    xp, w_h, b_h = self.project(obs, prev_action, prev_reward)
    carry = self.unstack(gru.step(w_h, b_h, self.stack(carry), xp))
    logits, value = self.heads(carry)
    return carry, logits, value

  def __call__(self, carry, obs, prev_action, prev_reward):
    return self.step(carry, obs, prev_action, prev_reward)


def _sinusoid(time: Array, dim: int) -> Array:
  """`[..., dim]` sinusoidal encoding of integer times `[...]`."""
  half = dim // 2
  freqs = np.exp(-math.log(10_000.0) * np.arange(half) / max(half, 1)).astype(np.float32)
  angle = jnp.asarray(time, jnp.float32)[..., None] * freqs
  enc = jnp.concatenate([jnp.sin(angle), jnp.cos(angle)], axis=-1)
  return jnp.pad(enc, [(0, 0)] * (enc.ndim - 1) + [(0, dim - 2 * half)])


class TransformerActorCritic(lm.Blocks, nn.Module):
  """Causal transformer policy logits and value with a fixed `max_len`-slot KV cache.

  Carry (one environment): `{"k", "v": [num_layers, max_len, num_heads, head_dim],
  "time": [max_len] int32` (episode time of the token in each slot, -1 empty)`,
  "t": [] int32` (episode time of the next token)`}`. `step` is for ONE environment
  (vmap it); its cost does not depend on `t` (see the module docstring).
  """
  num_actions: int
  d_model: int = 32
  num_heads: int = 2
  num_layers: int = 1
  max_len: int = 64
  mlp_ratio: int = 2
  obs_rank: int = 1

  def setup(self):
    if self.d_model % self.num_heads:
      raise ValueError(f"d_model={self.d_model} must be divisible by "
                       f"num_heads={self.num_heads}")
    self.embed = _dense(self.d_model, 1.0)
    self.make_blocks(_dense, 1.0, np.sqrt(2.0))
    self.pi_head = _dense(self.num_actions, 0.01)
    self.v_head = _dense(1, 1.0)

  def initial_carry(self) -> Any:
    shape = (self.num_layers, self.max_len, self.num_heads, self.head_dim)
    return {"k": jnp.zeros(shape, jnp.float32), "v": jnp.zeros(shape, jnp.float32),
            "time": jnp.full((self.max_len,), -1, jnp.int32),
            "t": jnp.zeros((), jnp.int32)}

  def _embed(self, obs, prev_action, prev_reward, time):
    x = _token(obs, prev_action, prev_reward, self.num_actions, self.obs_rank)
    return self.embed(x) + _sinusoid(time, self.d_model)

  def _heads(self, x):
    x = self.ln_final(x)
    return self.pi_head(x), self.v_head(x)[..., 0]

  def step(self, carry, obs, prev_action, prev_reward):
    """One token of one environment: `(carry, logits [A], value [])`."""
    t = carry["t"]
    slot = t % self.max_len
    time = jax.lax.dynamic_update_index_in_dim(carry["time"], t, slot, 0)
    x = self._embed(obs, prev_action, prev_reward, t)                     # [d]
    mask = (time >= 0)[None]                                               # [1, M]
    keys, values, x = self.cached_step(carry["k"], carry["v"], slot, mask, x)
    logits, value = self._heads(x)
    return {"k": keys, "v": values, "time": time, "t": t + 1}, logits, value

  def sequence(self, carry, obs, prev_actions, prev_rewards, starts, final=None):
    """`T` tokens of one environment after `carry`; see `unroll`."""
    num_steps = starts.shape[0]
    idx = jnp.arange(num_steps)
    last_start = jax.lax.cummax(jnp.where(starts, idx, -1), axis=0)
    time = jnp.where(last_start >= 0, idx - last_start, carry["t"] + idx)  # [T]
    episode = jnp.cumsum(starts.astype(jnp.int32))                        # [T]
    x = self._embed(obs, prev_actions, prev_rewards, time)                 # [T, d]
    q_time, q_ep, q_final = time, episode, jnp.zeros((num_steps,), bool)
    if final is not None:
      final_obs, actions, rewards = final
      x = jnp.concatenate([x, self._embed(final_obs, actions, rewards, time + 1)])
      q_time = jnp.concatenate([time, time + 1])
      q_ep = jnp.concatenate([episode, episode])
      q_final = jnp.concatenate([q_final, jnp.ones((num_steps,), bool)])
    n = x.shape[0]
    m = self.max_len
    # Keys: the cache's M slots (episode 0 of the window, empty where time < 0), then
    # the N tokens. A final-observation token is seen only by itself; it sees the
    # tokens of its episode up to its step, as the next step would.
    k_time = jnp.concatenate([carry["time"], q_time])
    k_ep = jnp.concatenate([jnp.zeros((m,), jnp.int32), q_ep])
    k_valid = jnp.concatenate([carry["time"] >= 0, jnp.ones((n,), bool)])
    k_final = jnp.concatenate([jnp.zeros((m,), bool), q_final])
    k_id = jnp.concatenate([jnp.full((m,), -1), jnp.arange(n)])
    latest = q_time - q_final.astype(jnp.int32)                            # [N]
    regular = jnp.logical_and(~k_final[None], k_time[None] <= latest[:, None])
    own = jnp.logical_and(k_final[None], k_id[None] == jnp.arange(n)[:, None])
    mask = (k_valid[None] & (k_ep[None] == q_ep[:, None])
            & (k_time[None] > q_time[:, None] - m) & (regular | own))     # [N, M + N]
    for layer in range(self.num_layers):
      q, k, v = self.project(layer, x)                                     # [N, H, dh]
      ks = jnp.concatenate([carry["k"][layer], k])
      vs = jnp.concatenate([carry["v"][layer], v])
      x = self.finish(layer, x, self.attend(q, ks, vs, mask))
    logits, values = self._heads(x)
    if final is None:
      return logits, values, None
    return logits[:num_steps], values[:num_steps], values[num_steps:]

  def __call__(self, carry, obs, prev_action, prev_reward):
    return self.step(carry, obs, prev_action, prev_reward)


def make_sequence_network(kind: str, num_actions: int, obs_rank: int = 1,
                          **kwargs) -> nn.Module:
  """`GRUActorCritic` (kind "gru") or `TransformerActorCritic` ("transformer")."""
  if kind == "gru":
    return GRUActorCritic(num_actions=num_actions, obs_rank=obs_rank, **kwargs)
  if kind == "transformer":
    return TransformerActorCritic(num_actions=num_actions, obs_rank=obs_rank, **kwargs)
  raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def init_params(network: nn.Module, key: Array, obs_shape: Sequence[int]):
  """Parameters of a sequence network for observations of shape `obs_shape`."""
  return network.init(key, network.initial_carry(), jnp.zeros(obs_shape, jnp.float32),
                      jnp.full((), -1, jnp.int32), jnp.zeros((), jnp.float32),
                      method="step")


def unroll(network: nn.Module, params, carry, obs: Array, prev_actions: Array,
           prev_rewards: Array, starts: Array,
           final: Optional[Tuple[Array, Array, Array]] = None
           ) -> Tuple[Array, Array, Optional[Array]]:
  """A window of ONE environment through a sequence network, from its stored carry.

  Args:
    carry: the network's carry before step 0 (unbatched).
    obs: [T, *obs_shape]; prev_actions: [T] int (-1: none); prev_rewards: [T] float.
    starts: [T] bool, an episode starts at step t (memory reset before it).
    final: None, or `(final_obs [T, *obs_shape], actions [T], rewards [T])`: step t's
      final observation with the action and reward of step t, read as the next token of
      step t's episode.
  Returns:
    `(logits [T, A], values [T], final_values [T] or None)`, equal (up to float
    rounding) to stepping `network.step` through the window with the carry reset where
    `starts`.
  """
  num_steps = jnp.shape(starts)[0] if jnp.ndim(starts) == 1 else -1
  if num_steps < 1 or jnp.shape(prev_actions) != (num_steps,) or \
      jnp.shape(prev_rewards) != (num_steps,) or jnp.shape(obs)[:1] != (num_steps,):
    raise ValueError(f"starts [T], prev_actions [T], prev_rewards [T] and obs [T, ...] "
                     f"must share T; got {jnp.shape(starts)}, {jnp.shape(prev_actions)}, "
                     f"{jnp.shape(prev_rewards)}, {jnp.shape(obs)}")
  if final is not None and (jnp.shape(final[0]) != jnp.shape(obs) or
                            jnp.shape(final[1]) != (num_steps,) or
                            jnp.shape(final[2]) != (num_steps,)):
    raise ValueError(f"final must be (final_obs {jnp.shape(obs)}, actions [{num_steps}], "
                     f"rewards [{num_steps}]), got shapes "
                     f"{[jnp.shape(f) for f in final]}")
  if isinstance(network, TransformerActorCritic):
    return network.apply(params, carry, obs, prev_actions, prev_rewards, starts, final,
                         method="sequence")
  if not isinstance(network, GRUActorCritic):
    raise ValueError(f"unroll needs a GRUActorCritic or TransformerActorCritic, got "
                     f"{type(network).__name__}")
  xp, w_h, b_h = network.apply(params, obs, prev_actions, prev_rewards,
                               method="project")                         # [T, K, 3H]
  hs = gru.scan(w_h, b_h, network.stack(carry), xp, starts)             # [T, K, H]
  logits, values = network.apply(params, network.unstack(hs), method="heads")
  if final is None:
    return logits, values, None
  xp_final, _, _ = network.apply(params, *final, method="project")
  after = network.unstack(gru.step(w_h, b_h, hs, xp_final))
  return logits, values, network.apply(params, after, method="heads")[1]


def unroll_episodes(network: nn.Module, params, obs: Array, prev_actions: Array,
                    prev_rewards: Array, starts: Array,
                    final: Optional[Tuple[Array, Array, Array]] = None
                    ) -> Tuple[Array, Array, Optional[Array]]:
  """`unroll` of episodes that start at step 0, each from the network's initial carry.

  Args:
    obs: [T, *B, *obs_shape]; prev_actions [T, *B] int; prev_rewards [T, *B] float;
      starts [T, *B] bool (`rollout.sequence_inputs`), with any batch axes `B` (REINFORCE's
      episodes [T, B], GRPO's groups [T, N, K]).
    final: None, or `(final_obs, actions, rewards)` shaped as `obs`, `prev_actions`,
      `prev_rewards` (see `unroll`).
  Returns:
    `(logits [T, *B, A], values [T, *B], final_values [T, *B] or None)`.
  """
  lead = jnp.shape(starts)
  if len(lead) < 2 or jnp.shape(prev_actions) != lead or \
      jnp.shape(prev_rewards) != lead or jnp.shape(obs)[:len(lead)] != lead:
    raise ValueError(f"obs [T, *B, ...], prev_actions, prev_rewards and starts [T, *B] "
                     f"must agree, got {jnp.shape(obs)}, {jnp.shape(prev_actions)}, "
                     f"{jnp.shape(prev_rewards)}, {lead}")
  carry = network.initial_carry()

  def one(o, pa, pr, s, fin):                                    # one episode [T, ...]
    return unroll(network, params, carry, o, pa, pr, s, fin)

  for _ in lead[1:]:                                             # one vmap per batch axis
    one = jax.vmap(one, in_axes=1, out_axes=1)
  return one(obs, prev_actions, prev_rewards, starts, final)


def make_sequence_policy(network: nn.Module, value: bool = True,
                         carry: bool = False) -> SequencePolicy:
  """Wraps a sequence network as a `SequencePolicy` that samples its actions.

  `act(params, carry, obs, prev_action, prev_reward, noise) -> (carry, action [],
  log_prob [], extras)` for one environment; extras `{"value": []}` with `value`, and
  `{"carry": ...}` (the carry after the step, before any episode reset) with `carry`,
  else `{}`. The noise is `nets.categorical_noise`, so actions are those of sampling
  the logits with each step's key. Keep `carry` for small carries (a GRU's `[H]`): the
  rollout stores it at every step.
  """
  num_actions = int(network.num_actions)
  keep_carry = bool(carry)

  def draw(key):
    return nets.categorical_noise(key, num_actions)

  def act(params, carry, obs, prev_action, prev_reward, noise):
    carry, logits, v = network.apply(params, carry, obs, prev_action, prev_reward,
                                     method="step")
    action = nets.categorical_sample_with_noise(logits, noise)
    log_prob = nets.categorical_log_prob(logits, action)
    extras = {"value": v} if value else {}
    if keep_carry:
      extras["carry"] = carry
    return carry, action, log_prob, extras

  return SequencePolicy(initial_carry=network.initial_carry, draw=draw, act=act)
