"""The PRM network, its jitted training loop, and held-out accuracy / calibration.

Part of the PRM modules (`credit_jax/addons/prm.py` re-exports every name here). A PRM is a small
MLP over (observation, step action) -> logit of P(step is good), trained by Adam on
minibatches of labelled steps inside one `lax.scan`.
"""
from __future__ import annotations

from typing import Dict

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


class PRM(nn.Module):
  """MLP: (obs [..., D], action [...] int) -> logit [...] of P(step is good)."""
  num_actions: int
  hidden_sizes: tuple = (32,)

  @nn.compact
  def __call__(self, obs, actions):
    x = jnp.concatenate([obs, jax.nn.one_hot(actions, self.num_actions)], axis=-1)
    for h in self.hidden_sizes:
      x = nn.tanh(nn.Dense(h)(x))
    return nn.Dense(1)(x)[..., 0]


def init_prm(net: PRM, key, obs_dim: int):
  return net.init(key, jnp.zeros((obs_dim,)), jnp.zeros((), jnp.int32))


def bce(logits, labels):
  """Binary cross-entropy with (possibly soft) labels; elementwise."""
  return optax.sigmoid_binary_cross_entropy(logits, labels)


def train_prm(net: PRM, params, data: Dict[str, jax.Array], labels: jax.Array, key,
              num_steps: int, batch_size: int, lr: float):
  """`num_steps` Adam steps on minibatches of the `[S]` steps in `data`.

  Args:
    data: `obs [S, D]`, `actions [S]`, `valid [S]` (weights: invalid steps ignored).
    labels: [S] float32 in [0, 1].
  Returns:
    (params, losses [num_steps]).
  """
  n = labels.shape[0]
  if data["obs"].shape[0] != n or data["actions"].shape != (n,):
    raise ValueError(f"labels [S={n}] do not match obs {data['obs'].shape} / actions "
                     f"{data['actions'].shape}")
  opt = optax.adam(lr)
  weights = data["valid"].astype(jnp.float32)

  def loss_fn(p, idx):
    logits = net.apply(p, data["obs"][idx], data["actions"][idx])
    w = weights[idx]
    return jnp.sum(bce(logits, labels[idx]) * w) / jnp.maximum(jnp.sum(w), 1.0)

  def step(carry, k):
    p, s = carry
    idx = jax.random.randint(k, (batch_size,), 0, n)
    loss, g = jax.value_and_grad(loss_fn)(p, idx)
    upd, s = opt.update(g, s, p)
    return (optax.apply_updates(p, upd), s), loss

  (params, _), losses = jax.lax.scan(step, (params, opt.init(params)),
                                     jax.random.split(key, num_steps))
  return params, losses


def evaluate(net: PRM, params, obs, actions, truth, valid, num_bins: int = 10):
  """Held-out quality of a PRM against ground truth, over valid steps `[S]`.

  Returns dict of []: `accuracy` (threshold 0.5), `bce`, `ece` (expected calibration
  error over `num_bins` equal-width probability bins), `mean_prob`, `base_rate`.
  """
  if truth.shape != valid.shape or truth.ndim != 1:
    raise ValueError(f"truth {truth.shape} and valid {valid.shape} must both be [S]")
  logits = net.apply(params, obs, actions)
  prob = jax.nn.sigmoid(logits)
  w = valid.astype(jnp.float32)
  tot = jnp.maximum(jnp.sum(w), 1.0)
  truth = truth.astype(jnp.float32)
  acc = jnp.sum(((prob > 0.5) == (truth > 0.5)) * w) / tot
  bins = jnp.clip((prob * num_bins).astype(jnp.int32), 0, num_bins - 1)
  onehot = jax.nn.one_hot(bins, num_bins) * w[:, None]
  cnt = jnp.sum(onehot, 0)
  gap = jnp.abs(jnp.sum(onehot * prob[:, None], 0) - jnp.sum(onehot * truth[:, None], 0))
  return {"accuracy": acc, "bce": jnp.sum(bce(logits, truth) * w) / tot,
          "ece": jnp.sum(gap) / tot, "mean_prob": jnp.sum(prob * w) / tot,
          "base_rate": jnp.sum(truth * w) / tot, "bin_count": cnt}
