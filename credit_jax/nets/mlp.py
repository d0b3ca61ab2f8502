"""Policy and value networks (flax.linen) and a hand-written categorical distribution.

Parameters are plain pytrees, so vmapping a whole training run over seeds or
hyperparameters needs no framework glue. The categorical helpers work on logits through
`jax.nn.log_softmax` (no distrax: its tensorflow-probability dependency breaks on newer JAX).

`ActorCritic`: MLP policy logits and an optional value head, with separate torsos
(PureJaxRL-style, the default) or one shared torso.

Memory (KeyChain with `cue_delay`), two ways. A fixed window: the same `ActorCritic`
over the last `W` observations (`[W, *obs_shape]`, oldest first, `obs_rank` one higher),
as produced by `credit_jax.envs.HistoryWrapper`; the window lives in the
environment state, so a stateless `policy_fn(params, obs, key)` sees it, and `W >=
cue_delay + 1` shows a cue given `cue_delay` steps before its pivotal step. Or the whole
episode: the GRU and causal-transformer actor-critics of `credit_jax.nets.sequence`,
whose memory the rollout engine carries (`credit_jax.types.SequencePolicy`).
"""
from __future__ import annotations

from typing import Callable, Sequence, Tuple

import flax.linen as nn
import jax
from jax import Array
import jax.numpy as jnp
import numpy as np

from credit_jax import fast_paths
from credit_jax.nets import initializers
from credit_jax.types import PresampledPolicy

_ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


def activation_fn(name: str) -> Callable[[Array], Array]:
  """Returns the activation called `name` ("tanh", "relu", "gelu", "silu")."""
  if name not in _ACTIVATIONS:
    raise ValueError(
        f"activation must be one of {sorted(_ACTIVATIONS)}, got {name!r}")
  return _ACTIVATIONS[name]


def _dense(features: int, scale: float, name=None, cls=nn.Dense) -> nn.Dense:
  # Orthogonal init with per-layer gains (sqrt(2) hidden, 0.01 policy, 1 value) keeps the
  # initial policy near uniform and the value near zero: the standard PPO recipe.
  return cls(features, kernel_init=initializers.orthogonal(scale),
             bias_init=nn.initializers.zeros, name=name)


class ColumnDense(nn.Dense):
  """`nn.Dense` (same parameters, names and init) computed one output column at a time.

  For a head with a few outputs (logits over 2-8 actions), XLA CPU lowers the kernel's
  gradient, `[N, H]^T [N, A]` with a tiny `A`, to a batched dot that runs at a few
  GFLOP/s; as one matrix-vector product per output column it is ~4x cheaper (16 vmapped
  seeds, 128 x 64 -> 2, forward and gradient: 182 -> 48 us), a few percent of a PPO
  minibatch step.
  """

  @nn.compact
  def __call__(self, x: Array) -> Array:
    kernel = self.param("kernel", self.kernel_init, (jnp.shape(x)[-1], self.features),
                        self.param_dtype)
    bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype)
    columns = [x @ kernel[:, a] for a in range(self.features)]
    return jnp.stack(columns, axis=-1) + bias


# With `fast_paths` on, policy heads with at most this many actions use `ColumnDense`.
_COLUMN_HEAD_MAX = 8


@jax.custom_jvp
def _few_inputs_matmul(x: Array, kernel: Array) -> Array:
  """`x @ kernel` for `x: [..., K]`, `kernel: [K, N]` with a small `K`, as `K` broadcast
  multiply-adds, which XLA fuses with the bias and activation that follow; the tangent
  (and so the gradient) keeps the dots."""
  out = x[..., 0:1] * kernel[0]
  for i in range(1, kernel.shape[0]):
    out = out + x[..., i:i + 1] * kernel[i]
  return out


@_few_inputs_matmul.defjvp
def _few_inputs_matmul_jvp(primals, tangents):
  x, kernel = primals
  x_dot, kernel_dot = tangents
  # The kernel's tangent through a transposed copy of x, [K, rows]: transposed for the
  # gradient, it is `x^T @ g` with x^T already laid out [K, rows], a plain product that
  # XLA CPU gives to YNNPACK; from x itself it would contract x's major axis, which XLA
  # runs in its generic dot (~60 -> ~20 us at 16 seeds x 128 rows x 4 -> 64). The
  # barrier keeps XLA from folding the transpose back into the dot.
  rows = x.reshape((-1, x.shape[-1]))
  x_t = jax.lax.optimization_barrier(rows.T)                     # [K, rows]
  kernel_term = (x_t.T @ kernel_dot).reshape(x.shape[:-1] + kernel_dot.shape[-1:])
  return _few_inputs_matmul(x, kernel), x_dot @ kernel + kernel_term


class RowDense(nn.Dense):
  """`nn.Dense` (same parameters, names and init) for a layer with few inputs (<= 8).

  The product is written as one broadcast multiply-add per input feature, so XLA fuses it
  with the bias add and the activation after it; a tiny dot is a call of its own on
  CPU. In a microbenchmark shaped like the rollout (4 rows per seed and step, 16 vmapped
  seeds) this halved a 4 -> 64 -> 64 torso's forward time (31 -> 16 us per step); in the
  PPO update as a whole, 0.98x. The gradient stays in dots (a custom JVP): as broadcast
  reductions it was slower. The input gradient is `nn.Dense`'s; the kernel gradient goes
  through a transposed copy of the input (see `_few_inputs_matmul_jvp`).
  """

  @nn.compact
  def __call__(self, x: Array) -> Array:
    kernel = self.param("kernel", self.kernel_init, (jnp.shape(x)[-1], self.features),
                        self.param_dtype)
    bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype)
    return _few_inputs_matmul(x, kernel) + bias


# With `fast_paths` on, layers with at most this many input features use `RowDense`.
_ROW_INPUT_MAX = 8


class MLP(nn.Module):
  """Fully connected torso: `[..., D] -> [..., hidden_sizes[-1]]`.

  `nn.Dense` layers; with `credit_jax.fast_paths` on when traced, a layer with <= 8
  inputs is a `RowDense` (same parameters and names, so checkpoints do not depend on it).
  """
  hidden_sizes: Sequence[int]
  activation: str = "tanh"

  @nn.compact
  def __call__(self, x: Array) -> Array:
    act = activation_fn(self.activation)
    for i, size in enumerate(self.hidden_sizes):
      # Named as nn.Dense would auto-name them, whichever class computes the layer.
      fast = fast_paths.enabled() and jnp.shape(x)[-1] <= _ROW_INPUT_MAX
      cls = RowDense if fast else nn.Dense
      x = act(_dense(size, np.sqrt(2.0), f"Dense_{i}", cls)(x))
    return x


class ActorCritic(nn.Module):
  """MLP policy logits and optional value.

  Call on `obs: [..., *obs_shape]` (any leading batch dims, or none for a single
  observation) where `obs_shape` has `obs_rank` dims; they are flattened into one
  feature vector. For a history window `[..., W, D]` use `obs_rank=2`: every position
  of the window gets its own weights, so a cue's age is part of what the policy sees.
  Returns `(logits: [..., num_actions], value: [...])`. With `value_head=False` the value
  is zeros (no parameters are created for it), so policy-only recipes carry no dead weights.
  With `credit_jax.fast_paths` on when traced, a head of <= 8 actions is a `ColumnDense`.
  """
  num_actions: int
  hidden_sizes: Sequence[int] = (64, 64)
  activation: str = "tanh"
  shared_torso: bool = False
  value_head: bool = True
  obs_rank: int = 1
  value_hidden_sizes: Sequence[int] = ()   # the value torso's widths (): hidden_sizes

  @nn.compact
  def __call__(self, obs: Array) -> Tuple[Array, Array]:
    keep = obs.ndim - self.obs_rank
    if keep < 0:
      raise ValueError(
          f"obs must be [..., *obs_shape] with obs_rank={self.obs_rank} dims per "
          f"observation, got shape {obs.shape}")
    x = obs.reshape(obs.shape[:keep] + (-1,)).astype(jnp.float32)
    pi_h = MLP(self.hidden_sizes, self.activation, name="pi_torso")(x)
    # Heads named as nn.Dense would auto-name them, so parameter trees (and checkpoints)
    # do not depend on which class computes the logits.
    fast = fast_paths.enabled() and self.num_actions <= _COLUMN_HEAD_MAX
    head = ColumnDense if fast else nn.Dense
    logits = _dense(self.num_actions, 0.01, "Dense_0", head)(pi_h)
    if not self.value_head:
      return logits, jnp.zeros(logits.shape[:-1], jnp.float32)
    v_h = pi_h if self.shared_torso else MLP(
        self.value_hidden_sizes or self.hidden_sizes, self.activation, name="v_torso")(x)
    value = _dense(1, 1.0, "Dense_1")(v_h)[..., 0]
    return logits, value


# --- categorical distribution over logits [..., A] -------------------------------------

def categorical_sample(key: jax.Array, logits: Array) -> Array:
  """Samples actions `[...]` int32 from `logits: [..., A]`."""
  return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


def categorical_noise(key: jax.Array, num_actions: int) -> Array:
  """The Gumbel noise `[num_actions]` float32 that `categorical_sample` adds to one logits
  row under `key` (`jax.random.categorical` is the argmax of logits plus this noise)."""
  return jax.random.gumbel(key, (num_actions,), jnp.float32)


def categorical_sample_with_noise(logits: Array, noise: Array) -> Array:
  """Actions `[...]` int32: the argmax of `logits + noise`, both `[..., A]` (Gumbel-max)."""
  if jnp.shape(logits) != jnp.shape(noise):
    raise ValueError(f"logits [..., A] and noise [..., A] must share a shape, got "
                     f"{jnp.shape(logits)} and {jnp.shape(noise)}")
  return jnp.argmax(logits + noise, axis=-1).astype(jnp.int32)


def categorical_log_prob(logits: Array, actions: Array) -> Array:
  """log pi(a): `logits: [..., A]`, `actions: [...]` int -> `[...]` float32."""
  if logits.shape[:-1] != actions.shape:
    raise ValueError(
        f"logits [..., A] and actions [...] disagree: logits {logits.shape}, actions "
        f"{actions.shape}")
  logp = jax.nn.log_softmax(logits, axis=-1)
  # A one-hot contraction, not a gather: the gather's gradient is a scatter, which is
  # several times slower than the whole MLP backward pass on CPU.
  one_hot = jax.nn.one_hot(actions, logits.shape[-1], dtype=logp.dtype)
  return jnp.sum(logp * one_hot, axis=-1)


def categorical_entropy(logits: Array) -> Array:
  """Entropy `[...]` of the categorical with `logits: [..., A]`."""
  logp = jax.nn.log_softmax(logits, axis=-1)
  return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def categorical_kl(logits_p: Array, logits_q: Array) -> Array:
  """Exact KL(p || q) `[...]` between categoricals with logits `[..., A]`."""
  if logits_p.shape != logits_q.shape:
    raise ValueError(
        f"logits_p and logits_q must share a shape, got {logits_p.shape} and "
        f"{logits_q.shape}")
  logp = jax.nn.log_softmax(logits_p, axis=-1)
  logq = jax.nn.log_softmax(logits_q, axis=-1)
  return jnp.sum(jnp.exp(logp) * (logp - logq), axis=-1)


def epsilon_mixture_logits(logits: Array, epsilon: float) -> Array:
  """`[..., A]` log-probabilities of `(1 - epsilon) softmax(logits) + epsilon / A`: the
  policy with epsilon exploration, as a distribution of its own (COCOA's code trains and
  acts with it, gradients flowing through the mixture; `logits: [..., A]`)."""
  eps = float(epsilon)
  if not 0.0 <= eps < 1.0:
    raise ValueError(f"epsilon must lie in [0, 1), got {epsilon}")
  if eps == 0.0:
    return logits
  a = jnp.shape(logits)[-1]
  return jnp.log((1.0 - eps) * jax.nn.softmax(logits, axis=-1) + eps / a)


class EpsilonNetwork:
  """An actor-critic `network` (`apply(params, obs) -> (logits [..., A], value [...])`)
  whose logits are `epsilon_mixture_logits(logits, epsilon)`; usable wherever the network
  is (`make_policy_fn`, a recipe's loss). Evaluation uses the plain network."""

  def __init__(self, network, epsilon: float):
    epsilon_mixture_logits(jnp.zeros((1,)), epsilon)   # checks the range
    self.network, self.epsilon = network, float(epsilon)
    self.num_actions = int(network.num_actions)

  def init(self, *args, **kwargs):
    return self.network.init(*args, **kwargs)

  def apply(self, params, *args, **kwargs):
    logits, value = self.network.apply(params, *args, **kwargs)
    return epsilon_mixture_logits(logits, self.epsilon), value


def make_policy_fn(network: nn.Module, value: bool = True) -> PresampledPolicy:
  """Wraps an actor-critic module as a rollout `PolicyFn` that samples its actions.

  Returns `policy_fn(params, obs, key) -> (action [], log_prob [], extras)` for a single
  observation (the rollout engine vmaps it). With `value`, extras are `{"value": []}`: the
  value rides along in `Trajectory.extras` so bootstrapped estimators need no second
  forward pass over `obs`. Without it extras are `{}` and, the value being unused, XLA
  drops the value network from the compiled rollout.

  It is a `PresampledPolicy`: its Gumbel noise ([num_actions] per step, from the step's
  key) is what `categorical_sample` would draw, so the actions are the same whether the
  rollout engine draws the noise before its loop or the policy is called with keys.
  """
  num_actions = int(network.num_actions)

  def draw(key):
    return categorical_noise(key, num_actions)

  def act(params, obs, noise):
    logits, v = network.apply(params, obs)
    action = categorical_sample_with_noise(logits, noise)
    return action, categorical_log_prob(logits, action), ({"value": v} if value else {})
  return PresampledPolicy(draw=draw, act=act)


def make_greedy_policy_fn(network: nn.Module) -> PresampledPolicy:
  """`make_policy_fn(network, value=False)` with zero noise: the most probable action
  (Gumbel-max with no noise is the argmax); `log_prob` is that action's under the policy.
  For evaluating a trained policy without its exploration."""
  num_actions = int(network.num_actions)
  sampled = make_policy_fn(network, value=False)
  return PresampledPolicy(draw=lambda key: jnp.zeros((num_actions,), jnp.float32),
                          act=sampled.act)
