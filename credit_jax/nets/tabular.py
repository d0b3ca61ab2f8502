"""Tabular and linear policies and critics over a discrete observation's one-hot parts.

Most credit questions here are not representation questions: where the right action is a
table lookup on what the agent sees, a table (or one linear layer) cannot fail for want of
features, so a failure to learn is a failure of credit. Both modules have `ActorCritic`'s
interface (`credit_jax/nets/mlp.py`): `apply(params, obs [..., D]) -> (logits [..., A],
value [...])`, so any recipe that takes an MLP takes them (`config.network.kind`
"tabular" or "linear"; `credit_jax/algos/train.make_network`).

The observation's discrete parts are its one-hot groups, `(start, stop)` spans given by
the environment (`env.onehot_groups`: KeyChain-v0, LinearKeyToDoor-v0,
ConveyorTreasure-v0); every other feature (the time feature `t / T`) is left out, so a
table does not grow with the horizon. A group of width w has w + 1 categories: "all zeros"
(0) and "feature j is the largest and positive" (1 + j); a single-feature group (a flag) is
off or on.

  * `Tabular`: one logit row (and one value) per joint category, the mixed-radix index of
    the groups' categories: `prod_g (w_g + 1)` rows. Zero-initialised (the uniform policy,
    value 0), so a run's start does not depend on its key.
  * `Linear`: logits `x W + b` over the groups' features concatenated (additive across
    groups; within one group it is a table), value `x w + c`; zero-initialised too.

Entropy floor (`min_prob`, 0: off): the policy is the mixture
`(1 - A min_prob) softmax(theta) + min_prob`, every action's probability at least
`min_prob` (< 1/A), returned as log-probabilities (a valid logits vector), so sampling,
log-probabilities, entropies and KL divergences through `categorical_*` all see the
floored policy. A table's softmax can saturate (a probability of exactly 0 after float
rounding), after which no gradient moves that entry; the floor keeps every action
explorable, at a cost of at most `A min_prob` in success per decision.
"""
from __future__ import annotations

from typing import Sequence, Tuple

import flax.linen as nn
import jax
from jax import Array
import jax.numpy as jnp
import numpy as np

__all__ = ["KINDS", "Linear", "Tabular", "env_groups", "joint_index", "make_table_network",
           "table_size"]

KINDS = ("tabular", "linear")


def _check_groups(groups: Sequence[Tuple[int, int]]) -> Tuple[Tuple[int, int], ...]:
  out = tuple((int(a), int(b)) for a, b in groups)
  if not out:
    raise ValueError("groups must name at least one (start, stop) one-hot span")
  for a, b in out:
    if not 0 <= a < b:
      raise ValueError(f"groups: each span must have 0 <= start < stop, got ({a}, {b})")
  return out


def table_size(groups: Sequence[Tuple[int, int]]) -> int:
  """Rows of a `Tabular` over `groups`: `prod_g (stop_g - start_g + 1)`."""
  return int(np.prod([b - a + 1 for a, b in _check_groups(groups)]))


def _group_categories(obs: Array, start: int, stop: int) -> Array:
  """[...] int32 category of one group of `obs: [..., D]`: 0 when all its features are
  <= 0, else 1 + the index of its largest feature."""
  part = obs[..., start:stop]
  return jnp.where(jnp.max(part, axis=-1) > 0,
                   1 + jnp.argmax(part, axis=-1), 0).astype(jnp.int32)


def joint_index(obs: Array, groups: Sequence[Tuple[int, int]]) -> Array:
  """[...] int32 row of `obs: [..., D]` in a table over `groups` (mixed radix, the first
  group most significant), in `[0, table_size(groups))`."""
  index = jnp.zeros(obs.shape[:-1], jnp.int32)
  for a, b in _check_groups(groups):
    index = index * (b - a + 1) + _group_categories(obs, a, b)
  return index


def _floor_logits(logits: Array, min_prob: float) -> Array:
  """`logits: [..., A]` -> log of `(1 - A min_prob) softmax(logits) + min_prob`
  (the logits themselves when `min_prob` is 0)."""
  if not min_prob:
    return logits
  a = logits.shape[-1]
  if not 0.0 < min_prob < 1.0 / a:
    raise ValueError(f"network.min_prob must lie in [0, 1/A) = [0, {1.0 / a:.4g}), "
                     f"got {min_prob}")
  probs = (1.0 - a * min_prob) * jax.nn.softmax(logits, axis=-1) + min_prob
  return jnp.log(probs)


def _check_obs(obs: Array, obs_size: int) -> None:
  if obs.ndim < 1 or obs.shape[-1] != obs_size:
    raise ValueError(f"obs must be [..., {obs_size}] (flat observations), got shape "
                     f"{obs.shape}")


class _FeatureHeads(nn.Module):
  """Logits `x W (+ b)` and value `x w (+ c)` over features `x = self.features(obs)`,
  zero-initialised; the bias only where `bias`."""
  num_actions: int
  groups: Tuple[Tuple[int, int], ...]
  obs_size: int
  value_head: bool = True
  min_prob: float = 0.0
  bias = True

  def features(self, obs: Array) -> Array:
    raise NotImplementedError

  @nn.compact
  def __call__(self, obs: Array) -> Tuple[Array, Array]:
    _check_obs(obs, self.obs_size)
    x = self.features(obs)
    f, zeros = x.shape[-1], nn.initializers.zeros
    logits = x @ self.param("W", zeros, (f, self.num_actions))
    if self.bias:
      logits = logits + self.param("b", zeros, (self.num_actions,))
    logits = _floor_logits(logits, self.min_prob)
    if not self.value_head:
      return logits, jnp.zeros(logits.shape[:-1], jnp.float32)
    value = x @ self.param("w", zeros, (f,))
    if self.bias:
      value = value + self.param("c", zeros, ())
    return logits, value


class Tabular(_FeatureHeads):
  """A logits table and a value table over the joint category of `groups`.

  `__call__(obs [..., obs_size]) -> (logits [..., A], value [...])`; value zeros (no
  parameters) without `value_head`. Parameters: "W" [n, A] (row r: the logits of joint
  category r), "w" [n] (its value), n = `table_size(groups)`.
  """
  bias = False

  def features(self, obs: Array) -> Array:
    # A one-hot row times the table, not a gather: the gather's gradient is a scatter,
    # slower on CPU (as in categorical_log_prob).
    return jax.nn.one_hot(joint_index(obs, self.groups), table_size(self.groups),
                          dtype=jnp.float32)


class Linear(_FeatureHeads):
  """Logits `x W + b` and value `x w + c` over the features of `groups` (x [..., F]).

  `__call__(obs [..., obs_size]) -> (logits [..., A], value [...])`. Parameters "W"
  [F, A], "b" [A], and with `value_head` "w" [F], "c" [].
  """

  def features(self, obs: Array) -> Array:
    return jnp.concatenate([obs[..., a:b] for a, b in _check_groups(self.groups)],
                           axis=-1).astype(jnp.float32)


def env_groups(env, select: Sequence[int] = (), what: str = "network.kind") -> Tuple:
  """`env.onehot_groups`, or the ones at the indices `select` (`network.table_groups`;
  (): all). Raises ValueError naming `what` when the env names no groups, or naming
  `network.table_groups` for an index it does not have."""
  groups = getattr(env, "onehot_groups", None)
  if groups is None:
    raise ValueError(f"{what} needs an environment that names its one-hot observation "
                     f"parts (env.onehot_groups: KeyChain-v0, LinearKeyToDoor-v0, "
                     f"ConveyorTreasure-v0); {type(env).__name__} does not")
  groups = _check_groups(groups)
  select = tuple(int(i) for i in select)
  if any(not 0 <= i < len(groups) for i in select) or len(set(select)) < len(select):
    raise ValueError(f"network.table_groups: distinct indices of the env's {len(groups)} "
                     f"one-hot groups {groups}, got {select}")
  return tuple(groups[i] for i in select) if select else groups


def make_table_network(kind: str, env, obs_shape: Sequence[int], value_head: bool,
                       min_prob: float = 0.0, select: Sequence[int] = ()) -> nn.Module:
  """The `kind` ("tabular" | "linear") network for `env`, whose `onehot_groups` (those at
  the indices `select`; (): all) name the discrete parts of its flat observations
  `obs_shape` ([D]) that the table reads. Raises ValueError naming the field when the
  env has no such groups or its observations are not flat."""
  if kind not in KINDS:
    raise ValueError(f"network.kind must be one of {KINDS} here, got {kind!r}")
  groups = env_groups(env, select, f"network.kind={kind!r}")
  if not 0.0 <= float(min_prob) < 1.0 / int(env.num_actions):
    raise ValueError(f"network.min_prob must lie in [0, 1/A) = [0, "
                     f"{1.0 / int(env.num_actions):.4g}), got {min_prob}")
  if len(obs_shape) != 1:
    raise ValueError(f"network.kind={kind!r} needs flat observations [D], got shape "
                     f"{tuple(obs_shape)}")
  cls = Tabular if kind == "tabular" else Linear
  return cls(num_actions=int(env.num_actions), groups=groups,
             obs_size=int(obs_shape[0]), value_head=bool(value_head),
             min_prob=float(min_prob))
