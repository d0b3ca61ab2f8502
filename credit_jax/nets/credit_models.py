"""Networks of the learned credit estimators: a return predictor and a hindsight model.

`ReturnPredictor` (return decomposition, RUDDER: Arjona-Medina et al., NeurIPS 2019):
a GRU over an episode's per-step tokens (what was seen, done and paid at each step,
`credit_jax/addons/rudder.py` builds them) whose output after step t is
`g_t`, a prediction of the episode's return from the prefix `0..t`. The change of the
prediction is the reward redistributed to step t. Time-major: tokens `[T, B, D]` ->
predictions `[T, B]`; the hidden state resets to zero where `starts` is True, so one
column may hold several episodes back to back.

`HindsightModel` (HCA: Harutyunyan et al., NeurIPS 2019; COCOA: Meulemans et al.,
NeurIPS 2023): logits of `h(a | o, u)`, the distribution of the action taken at an
observation `o` given an outcome `u` that followed it (the return-to-go for HCA, a
later reward's class for COCOA; `credit_jax/addons/contributions.py`). An MLP on the
concatenation of the observation and the outcome's features, `[..., O] x [..., U] ->
[..., A]`, with any leading dims.

`GatedHindsightModel`: the model COCOA's code trains on its corridor (its
`hindsight_model_type = "hypernet"`, read from seijin-kobayashi/cocoa
`ccoa/networks/models.py`): one ReLU layer on `[o, u]` whose output is both a logit
vector and an `[A, 2A]` matrix that gates the policy's features `[log pi, log(1 - pi)]`,
so the outcome decides how much each action's own policy probability matters; the
conjunction "this outcome at this observation" is one hidden layer away, not two. Its
two output layers start as mirrored pairs (`relu(x) - relu(x) = 0`, with a gradient), so
the untrained model outputs exactly 0: with the policy prior `h = pi` and every
coefficient `w = h / pi = 1` (theirs starts at a random output).

`TabularHindsightModel`: a table of logits, one `[A]` row per (observation row,
outcome class), the observation's row as a tabular policy's (`nets.tabular.joint_index`
over the environment's `onehot_groups`: the time feature is left out, so states that
look alike at different steps share a row). Zero-initialised: with the policy prior the
untrained model gives `h = pi`, every `w = 1`. For discrete outcomes only (COCOA's
reward classes, one-hot `[..., M]`).
"""
from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
from jax import Array
import jax.numpy as jnp

from credit_jax.nets import gru, initializers
from credit_jax.nets.mlp import MLP
from credit_jax.nets.tabular import joint_index, table_size

__all__ = ["GatedHindsightModel", "HindsightModel", "ReturnPredictor",
           "TabularHindsightModel"]


class ReturnPredictor(nn.Module):
  """`(tokens [T, B, D], starts [T, B] bool) -> g [T, B]`: the return predicted after
  each step from the episode's prefix (module doc)."""
  hidden_size: int = 32
  encoder_sizes: Sequence[int] = (32,)
  activation: str = "tanh"

  @nn.compact
  def __call__(self, tokens: Array, starts: Array) -> Array:
    if jnp.ndim(tokens) != 3 or jnp.shape(starts) != jnp.shape(tokens)[:2]:
      raise ValueError(f"ReturnPredictor needs tokens [T, B, D] and starts [T, B]; got "
                       f"tokens {jnp.shape(tokens)}, starts {jnp.shape(starts)}")
    x = MLP(tuple(self.encoder_sizes), self.activation, name="encoder")(
        tokens.astype(jnp.float32))
    w_i, b_i, w_h, b_h = gru.GRUCell(self.hidden_size, name="cell")(x.shape[-1])
    xp = (x @ w_i + b_i)[:, :, None, :]                              # [T, B, 1, 3H]
    w_h = tuple(w[None] for w in w_h)                                # K = 1 trunk
    h0 = jnp.zeros((1, self.hidden_size), jnp.float32)
    hs = jax.vmap(lambda xp_b, s_b: gru.scan(w_h, b_h[None], h0, xp_b, s_b),
                  in_axes=(1, 1), out_axes=1)(xp, starts)           # [T, B, 1, H]
    head = nn.Dense(1, kernel_init=initializers.orthogonal(1.0),
                    bias_init=nn.initializers.zeros, name="head")
    return head(hs[:, :, 0])[..., 0]


class HindsightModel(nn.Module):
  """`(obs [..., O], outcome [..., U]) -> logits [..., A]` of h(a | o, u) (module doc)."""
  num_actions: int
  hidden_sizes: Sequence[int] = (64, 64)
  activation: str = "tanh"

  @nn.compact
  def __call__(self, obs: Array, outcome: Array) -> Array:
    if jnp.shape(obs)[:-1] != jnp.shape(outcome)[:-1]:
      raise ValueError(f"obs [..., O] and outcome [..., U] need the same leading dims, "
                       f"got {jnp.shape(obs)} and {jnp.shape(outcome)}")
    x = jnp.concatenate([obs.astype(jnp.float32), outcome.astype(jnp.float32)], axis=-1)
    x = MLP(tuple(self.hidden_sizes), self.activation, name="torso")(x)
    # A small output gain starts h near uniform, as the policy's head starts.
    return nn.Dense(self.num_actions, kernel_init=initializers.orthogonal(0.01),
                    bias_init=nn.initializers.zeros, name="head")(x)


def _relu_gate(x: Array) -> Array:
  """`[..., 2n] -> [..., n]`: `relu(x[..., :n]) - relu(x[..., n:])` (a signed ReLU)."""
  first, second = jnp.split(jax.nn.relu(x), 2, axis=-1)
  return first - second


def _mirrored(scale: float):
  """A kernel initialiser `[H, 2n]` whose two halves are equal (orthogonal, `scale`), so
  `_relu_gate` of the layer's output is exactly 0 at initialisation."""
  base = initializers.orthogonal(scale)

  def init(key, shape, dtype=jnp.float32):
    half = base(key, (shape[0], shape[1] // 2), dtype)
    return jnp.concatenate([half, half], axis=-1)
  return init


class GatedHindsightModel(nn.Module):
  """`(obs [..., O], outcome [..., U], policy_logits [..., A]) -> logits [..., A]`
  (module doc); `policy_logits` are held constant (log-probabilities or logits of pi)."""
  num_actions: int
  hidden_size: int = 256

  @nn.compact
  def __call__(self, obs: Array, outcome: Array, policy_logits: Array) -> Array:
    a = self.num_actions
    lead = jnp.shape(obs)[:-1]
    if jnp.shape(outcome)[:-1] != lead or jnp.shape(policy_logits) != lead + (a,):
      raise ValueError(f"obs [..., O], outcome [..., U] and policy_logits [..., {a}] need "
                       f"the same leading dims, got {jnp.shape(obs)}, "
                       f"{jnp.shape(outcome)}, {jnp.shape(policy_logits)}")
    x = jnp.concatenate([obs.astype(jnp.float32), outcome.astype(jnp.float32)], axis=-1)
    z = jax.nn.relu(nn.Dense(self.hidden_size, name="torso")(x))
    head = lambda n, name: nn.Dense(2 * n, kernel_init=_mirrored(1.0),
                                    bias_init=nn.initializers.zeros, name=name)
    logits = _relu_gate(head(a, "logits")(z))                          # [..., A]
    gate = _relu_gate(head(2 * a * a, "gate")(z)).reshape(lead + (a, 2 * a))
    logp = jax.nn.log_softmax(jax.lax.stop_gradient(policy_logits).astype(jnp.float32))
    feats = jnp.concatenate([logp, jnp.log1p(-jnp.minimum(jnp.exp(logp), 1 - 1e-6))],
                            axis=-1)                                  # [..., 2A]
    return logits + jnp.einsum("...ij,...j->...i", gate, feats)


class TabularHindsightModel(nn.Module):
  """`(obs [..., O], outcome [..., M] one-hot, policy_logits [..., A]) -> logits [..., A]`:
  the table's row of (`joint_index(obs, groups)`, the outcome's class) (module doc);
  `policy_logits` are accepted for the gated model's signature and not read."""
  num_actions: int
  groups: Sequence[Sequence[int]]
  num_outcomes: int

  @nn.compact
  def __call__(self, obs: Array, outcome: Array, policy_logits: Array = None) -> Array:
    del policy_logits
    if jnp.shape(obs)[:-1] != jnp.shape(outcome)[:-1] or \
        jnp.shape(outcome)[-1] != self.num_outcomes:
      raise ValueError(f"obs [..., O] and outcome [..., {self.num_outcomes}] need the same "
                       f"leading dims, got {jnp.shape(obs)} and {jnp.shape(outcome)}")
    table = self.param("table", nn.initializers.zeros,
                       (table_size(self.groups), self.num_outcomes, self.num_actions))
    return table[joint_index(obs, self.groups), jnp.argmax(outcome, axis=-1)]
