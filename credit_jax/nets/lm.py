"""A small causal transformer language model over a token stream, with a value head.

`TokenLM` reads the stream of the token environments (`credit_jax/envs/tokens.py`) one
token at a time and predicts the next one. Two paths compute the same function:

  * `step(carry, token) -> (carry, logits [V], value [])`: one token of one stream
    against a key/value cache of `max_len` slots per layer (slot t holds token t), so
    acting inside the rollout's `lax.scan` costs O(d^2 + max_len d) per token and layer
    at every position; `make_policy` wraps it as a `SequencePolicy`;
  * `sequence(tokens [T]) -> (logits [T, V], values [T])`: the whole stream at once with
    a causal mask, for training; with the same parameters it equals the cached path at
    every position (float rounding apart).

Positions enter through rotary embeddings on queries and keys (relative offsets, no
position table). Pre-LayerNorm blocks: attention, then a GELU MLP of `mlp_ratio * d`.
The value head reads the final hidden state of the actor's trunk (`critic="shared"`) or
of an independent trunk of the same shape with its own embedding (`critic="separate"`,
whose cache the policy carries too: a critic that reads the whole context costs a second
transformer). A stream longer than `max_len` keeps writing its last slot: the cache
never grows or fails under jit, but the answers past `max_len` are wrong, so the recipe
requires episodes of at most `max_len` tokens.

`make_policy(..., reencode=True)` is the baseline without a cache: the carry is the token
buffer `[max_len]`, and every step re-encodes all of it with `sequence` (O(max_len^2 d)
per token), the cost a policy pays when it cannot keep a cache.
"""
from __future__ import annotations

from typing import Any, Tuple

import flax.linen as nn
import jax
from jax import Array
import jax.numpy as jnp
import numpy as np

from credit_jax.nets import mlp
from credit_jax.types import SequencePolicy

CRITICS = ("shared", "separate")


def _rotary(x: Array, positions: Array) -> Array:
  """Rotary position embedding: `x [..., H, dh]` rotated by `positions [...]` (int).

  Pairs `(x_i, x_{i + dh/2})` turn by angle `pos * 10000^(-2i/dh)`, so a query-key dot
  product depends on the positions only through their difference.
  """
  half = x.shape[-1] // 2
  freqs = np.exp(-np.log(10_000.0) * np.arange(half) / half).astype(np.float32)
  angle = jnp.asarray(positions, jnp.float32)[..., None, None] * freqs     # [..., 1, h]
  cos, sin = jnp.cos(angle), jnp.sin(angle)
  x1, x2 = x[..., :half], x[..., half:]
  return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def _dense(features: int, scale: float = 1.0) -> nn.Dense:
  return nn.Dense(features, kernel_init=nn.initializers.normal(scale * 0.02),
                  bias_init=nn.initializers.zeros)


class Blocks:
  """Pre-LN causal attention blocks with a GELU MLP, mixed into the flax modules that hold
  them (`Trunk` here, `sequence.TransformerActorCritic`): the module defines `d_model`,
  `num_heads`, `num_layers` and `mlp_ratio` and calls `make_blocks` in its `setup`."""

  def make_blocks(self, dense, residual_scale: float, mlp_in_scale: float = 1.0):
    """Layers `ln_attn`, `qkv`, `attn_out`, `ln_mlp`, `mlp_in`, `mlp_out` (one per block)
    and `ln_final`; `dense(features, scale)` makes each projection, the residual ones
    (attention and MLP outputs) at `residual_scale`, the MLP's input at `mlp_in_scale`."""
    d, n = self.d_model, self.num_layers
    self.ln_attn = [nn.LayerNorm() for _ in range(n)]
    self.qkv = [dense(3 * d, 1.0) for _ in range(n)]
    self.attn_out = [dense(d, residual_scale) for _ in range(n)]
    self.ln_mlp = [nn.LayerNorm() for _ in range(n)]
    self.mlp_in = [dense(self.mlp_ratio * d, mlp_in_scale) for _ in range(n)]
    self.mlp_out = [dense(d, residual_scale) for _ in range(n)]
    self.ln_final = nn.LayerNorm()

  @property
  def head_dim(self) -> int:
    return self.d_model // self.num_heads

  def project(self, layer: int, x: Array, positions=None):
    """x [..., d] -> q, k, v [..., H, dh]; q and k rotated by `positions [...]` (None:
    not rotated)."""
    qkv = self.qkv[layer](self.ln_attn[layer](x))
    qkv = qkv.reshape(x.shape[:-1] + (3, self.num_heads, self.head_dim))
    q, k, v = qkv[..., 0, :, :], qkv[..., 1, :, :], qkv[..., 2, :, :]
    if positions is None:
      return q, k, v
    return _rotary(q, positions), _rotary(k, positions), v

  def attend(self, q: Array, k: Array, v: Array, mask: Array) -> Array:
    """q [N, H, dh], k/v [S, H, dh], mask [N, S] bool -> [N, H, dh]."""
    scores = jnp.einsum("nhd,shd->hns", q, k) / np.float32(np.sqrt(self.head_dim))
    scores = jnp.where(mask[None], scores, jnp.finfo(jnp.float32).min)
    return jnp.einsum("hns,shd->nhd", jax.nn.softmax(scores, axis=-1), v)

  def finish(self, layer: int, x: Array, attended: Array) -> Array:
    x = x + self.attn_out[layer](attended.reshape(x.shape))
    return x + self.mlp_out[layer](nn.gelu(self.mlp_in[layer](self.ln_mlp[layer](x))))

  def cached_step(self, keys: Array, values: Array, slot: Array, mask: Array, x: Array,
                  positions=None):
    """One token `x [d]` through every block against the cache `keys`/`values`
    [layers, M, H, dh], its own key and value written at `slot` first; `mask [1, M]`: the
    slots it sees. `(keys, values, hidden [d])`, the hidden state before `ln_final`."""
    new_k, new_v = [], []
    for layer in range(self.num_layers):
      q, k, v = self.project(layer, x, positions)                        # [H, dh]
      ks = jax.lax.dynamic_update_index_in_dim(keys[layer], k, slot, 0)
      vs = jax.lax.dynamic_update_index_in_dim(values[layer], v, slot, 0)
      x = self.finish(layer, x, self.attend(q[None], ks, vs, mask)[0])
      new_k.append(ks)
      new_v.append(vs)
    return jnp.stack(new_k), jnp.stack(new_v), x


class Trunk(Blocks, nn.Module):
  """Token embedding and `num_layers` pre-LN causal attention blocks (no heads)."""
  vocab_size: int
  d_model: int
  num_heads: int
  num_layers: int
  mlp_ratio: int

  def setup(self):
    self.embed = nn.Embed(self.vocab_size, self.d_model,
                          embedding_init=nn.initializers.normal(0.02))
    # Residual projections scaled down with depth (GPT-2's initialisation).
    self.make_blocks(_dense, 1.0 / np.sqrt(2 * self.num_layers))

  def __call__(self, tokens: Array) -> Array:
    """tokens [T] -> final hidden states [T, d] under a causal mask (positions 0..T-1)."""
    positions = jnp.arange(tokens.shape[0])
    x = self.embed(tokens)
    causal = positions[:, None] >= positions[None, :]
    for layer in range(self.num_layers):
      q, k, v = self.project(layer, x, positions)
      x = self.finish(layer, x, self.attend(q, k, v, causal))
    return self.ln_final(x)

  def step(self, keys: Array, values: Array, t: Array, token: Array):
    """One token at position t against the cache `keys`/`values` [layers, M, H, dh]:
    `(keys, values, hidden [d])`."""
    m = keys.shape[1]
    mask = (jnp.arange(m) <= t)[None]                                    # [1, M]
    keys, values, x = self.cached_step(keys, values, jnp.minimum(t, m - 1), mask,
                                       self.embed(token), t)
    return keys, values, self.ln_final(x)


class TokenLM(nn.Module):
  """Causal LM logits over `vocab_size` tokens and a value, from one or two trunks.

  Carry of one stream: `{"k", "v": [trunks, num_layers, max_len, num_heads, head_dim],
  "t": [] int32}` (trunks = 1 shared, 2 separate). `step` and `sequence` are for ONE
  stream (vmap them).
  """
  vocab_size: int
  d_model: int = 64
  num_heads: int = 4
  num_layers: int = 2
  mlp_ratio: int = 4
  max_len: int = 256
  critic: str = "shared"

  def setup(self):
    if self.critic not in CRITICS:
      raise ValueError(f"critic must be one of {CRITICS}, got {self.critic!r}")
    if self.d_model % self.num_heads or (self.d_model // self.num_heads) % 2:
      raise ValueError(f"d_model={self.d_model} / num_heads={self.num_heads} must be an "
                       f"even whole head size (rotary embeddings turn pairs)")
    trunks = 1 if self.critic == "shared" else 2
    self.trunks = [Trunk(self.vocab_size, self.d_model, self.num_heads, self.num_layers,
                         self.mlp_ratio) for _ in range(trunks)]
    self.lm_head = _dense(self.vocab_size)
    # Values start at 0 (the trunk then learns them from the value loss alone).
    self.v_head = nn.Dense(1, kernel_init=nn.initializers.zeros,
                           bias_init=nn.initializers.zeros)

  def initial_carry(self) -> Any:
    shape = (len(CRITICS) if self.critic == "separate" else 1, self.num_layers,
             self.max_len, self.num_heads, self.d_model // self.num_heads)
    return {"k": jnp.zeros(shape, jnp.float32), "v": jnp.zeros(shape, jnp.float32),
            "t": jnp.zeros((), jnp.int32)}

  def _heads(self, hidden):
    return self.lm_head(hidden[0]), self.v_head(hidden[-1])[..., 0]

  def step(self, carry, token: Array) -> Tuple[Any, Array, Array]:
    """token [] int32 -> (carry, logits [V], value [])."""
    ks, vs, hidden = [], [], []
    for i, trunk in enumerate(self.trunks):
      k, v, h = trunk.step(carry["k"][i], carry["v"][i], carry["t"], token)
      ks.append(k)
      vs.append(v)
      hidden.append(h)
    logits, value = self._heads(hidden)
    return {"k": jnp.stack(ks), "v": jnp.stack(vs), "t": carry["t"] + 1}, logits, value

  def sequence(self, tokens: Array) -> Tuple[Array, Array]:
    """tokens [T] int32 -> (logits [T, V], values [T]); position t saw tokens 0..t."""
    return self._heads([trunk(tokens) for trunk in self.trunks])

  def __call__(self, tokens: Array) -> Tuple[Array, Array]:
    return self.sequence(tokens)


def init_params(network: TokenLM, key: Array):
  """Parameters of `network` (the same tree serves `step` and `sequence`)."""
  return network.init(key, jnp.zeros((1,), jnp.int32), method="sequence")


def sequence(network: TokenLM, params, tokens: Array) -> Tuple[Array, Array]:
  """The training pass over streams: `tokens [T, ...]` (any trailing batch dims, time
  first as everywhere) -> `(logits [T, ..., V], values [T, ...])`."""
  tokens = jnp.asarray(tokens)
  if tokens.ndim < 1 or not jnp.issubdtype(tokens.dtype, jnp.integer):
    raise ValueError(f"tokens must be an integer array [T, ...], got {tokens.dtype} "
                     f"{tokens.shape}")
  flat = jnp.moveaxis(tokens, 0, -1).reshape((-1, tokens.shape[0]))          # [B, T]
  logits, values = jax.vmap(lambda x: network.apply(params, x, method="sequence"))(flat)
  batch = tokens.shape[1:]
  logits = jnp.moveaxis(logits.reshape(batch + logits.shape[1:]), -2, 0)
  values = jnp.moveaxis(values.reshape(batch + values.shape[1:]), -1, 0)
  return logits, values


def make_policy(network: TokenLM, *, value: bool = True, greedy: bool = False,
                reencode: bool = False) -> SequencePolicy:
  """The LM as a `SequencePolicy` over the token envs' observations `[2]` (token, flag).

  `act(params, carry, obs, prev_action, prev_reward, noise) -> (carry, action [],
  log_prob [], extras)` reads the token `obs[0]` only (the stream already holds the
  agent's own tokens; previous action and reward are unused) and samples the next token
  (`greedy`: the argmax; its noise is zeros). Extras: `{"value": []}` with `value`.
  `reencode`: the cacheless baseline (see the module docstring); same actions and
  log-probs, a carry `{"tokens": [max_len], "t": []}`.
  """
  vocab = int(network.vocab_size)
  m = int(network.max_len)

  def draw(key):
    if greedy:
      return jnp.zeros((vocab,), jnp.float32)
    return mlp.categorical_noise(key, vocab)

  def forward(params, carry, token):
    if not reencode:
      return network.apply(params, carry, token, method="step")
    t = carry["t"]
    buf = jax.lax.dynamic_update_index_in_dim(carry["tokens"], token,
                                              jnp.minimum(t, m - 1), 0)
    logits, values = network.apply(params, buf, method="sequence")
    row = jnp.minimum(t, m - 1)
    return {"tokens": buf, "t": t + 1}, logits[row], values[row]

  def act(params, carry, obs, prev_action, prev_reward, noise):
    del prev_action, prev_reward
    carry, logits, v = forward(params, carry, jnp.asarray(obs)[0].astype(jnp.int32))
    action = mlp.categorical_sample_with_noise(logits, noise)
    log_prob = mlp.categorical_log_prob(logits, action)
    return carry, action, log_prob, ({"value": v} if value else {})

  def initial_carry():
    if reencode:
      return {"tokens": jnp.zeros((m,), jnp.int32), "t": jnp.zeros((), jnp.int32)}
    return network.initial_carry()

  return SequencePolicy(initial_carry=initial_carry, draw=draw, act=act)
