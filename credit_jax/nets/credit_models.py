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
"""
from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from credit_jax.nets import gru, initializers
from credit_jax.nets.mlp import MLP

Array = jax.Array

__all__ = ["HindsightModel", "ReturnPredictor"]


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


def num_parameters(params) -> int:
  """The number of scalars in a parameter pytree (host int)."""
  return int(sum(np.prod(np.shape(x)) for x in jax.tree.leaves(params)))
