"""GiGPO in one place: step advantages from anchor states (the estimator), and the hook
that adds them to GRPO's (`GigpoFeature`).

The estimator: anchor-state groups, states equal across a group. GiGPO (Feng et al.,
2025, arXiv 2505.10978) adds to GRPO's episode-level advantage a step-level one, with no
critic and no extra rollout: the K trajectories of a task group start from one state,
and wherever two of their steps stand in the *same* environment state (an "anchor
state"), the discounted returns that followed are samples of the same state's value, so
they can be compared like the K episode returns of a GRPO group:

    A_step(t, k) = (G^(k)_t - mean_g G) / (std_g G + eps),  g = the steps in state s^(k)_t
    A(t, k)      = A_episode(k) + step_weight * A_step(t, k)

A state is a pytree (the env state, or the observation where no state is exposed), so an
anchor group is an equality class of pytrees, formed here inside jit: every step's leaves
are flattened to 32-bit words and hashed; steps whose hashes meet (in a hash table, or
adjacent after a sort: `anchor_groups`) join only if their words are equal, so collisions
are resolved by equality and two steps share a group when their states are bitwise equal
(floats compare by their bits: 0.0 and -0.0 differ, a NaN equals an identical NaN). Cost:
a few scatters and gathers of T K entries per group, and one segment sum.

A group of one step, or one whose returns are all equal, carries no signal: its step
advantages are exactly 0 and it is counted as degenerate, as a degenerate episode group is
in `baselines.group_advantages`.

The hook: `config.gigpo` (`add_config`): `enabled`; `anchor` ("state": the environment
state each step started from, kept by `StepStateWrapper`; "obs": the observation, for
environments whose state is not to be compared); `kind` ("grpo" or "mean", `KINDS`);
`method` ("table" or "sort", `METHODS`); traced hparams `gigpo.step_weight` (the weight
of the step advantage, GiGPO's omega) and `gigpo.gamma` (the discount of the step
returns).

Each update, in every task group of the GRPO rollout `[T, N, K]`, steps whose anchors are
equal form a group; their discounted returns-to-go (of the shaped rewards) give the step
advantages (`anchor_advantages` below), added with the weight to the
recipe's own episode advantages. Metrics: `gigpo_groups` (anchor groups per task group),
`gigpo_degenerate_frac` (the fraction of them with one step or equal returns),
`gigpo_anchored_frac` (valid steps in a group with signal) and `gigpo_unresolved`.
No env steps and no critic are added.

On KeyChain the observation does not depend on past actions (all K trajectories of a
group see the same observation at step t), so "obs" anchors are the K steps at each t
and add little to GRPO; "state" anchors also split them by whether every pivotal answer
so far was right.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import ml_collections

from credit_jax import returns
from credit_jax.addons import hooks, step_states
from credit_jax.config import require, require_one_of, require_range

__all__ = ["add_config", "anchor_advantages", "anchor_groups", "AnchorGroups", "ANCHORS",
           "gigpo_advantages", "GigpoFeature", "KINDS", "METHODS", "state_words"]

KINDS = ("grpo", "mean")


class AnchorGroups(NamedTuple):
  """The anchor groups of task groups of K trajectories, `[T, N..., K]` steps."""
  group: jax.Array       # [T, N..., K] int32  index t K + k of the group's first step; -1 invalid
  size: jax.Array        # [T, N..., K] int32  steps in the step's group (0 at invalid steps)
  num_groups: jax.Array  # [N...] int32  distinct states among the valid steps
  unresolved: jax.Array  # [N...] int32  valid steps left in a group of their own ("table")


def state_words(tree: Any, lead: int) -> jax.Array:
  """`[*lead_dims, W]` uint32: every leaf's trailing entries as 32-bit words.

  Args:
    tree: pytree whose leaves share their first `lead` dims (e.g. `[T, K]`).
    lead: how many leading dims index the steps.
  Bools and integers of <= 32 bits become one word each, float32 its bits, wider types
  two words (the low and high halves), narrower floats their float32 bits.
  """
  leaves = jax.tree.leaves(tree)
  if not leaves:
    raise ValueError("the state pytree has no leaves to compare")
  dims = leaves[0].shape[:lead]
  words = []
  for x in leaves:
    if x.shape[:lead] != dims:
      raise ValueError(f"every leaf must start with the step dims {dims}, got {x.shape}")
    x = x.reshape(dims + (-1,))
    if x.dtype == jnp.bool_:
      x = x.astype(jnp.uint32)
    elif jnp.issubdtype(x.dtype, jnp.floating):
      x = x.astype(jnp.float32) if x.dtype.itemsize < 4 else x
      x = jax.lax.bitcast_convert_type(x, jnp.uint32)
    elif x.dtype.itemsize < 4:
      x = x.astype(jnp.int32)
    if x.dtype.itemsize == 8:   # a uint32 pair per entry
      x = jax.lax.bitcast_convert_type(x, jnp.uint32).reshape(dims + (-1,))
    words.append(jax.lax.bitcast_convert_type(x, jnp.uint32)
                 if x.dtype != jnp.uint32 else x)
  return jnp.concatenate(words, axis=-1)


def _hash_words(words: jax.Array) -> jax.Array:
  """`[...]` uint32 hash of `words: [..., W]` uint32 (murmur3-style word mixing)."""
  h = jnp.full(words.shape[:-1], 0x811C9DC5, jnp.uint32)
  for i in range(words.shape[-1]):
    k = words[..., i] * jnp.uint32(0xCC9E2D51)
    k = (k << 15) | (k >> 17)
    h = h ^ (k * jnp.uint32(0x1B873593))
    h = ((h << 13) | (h >> 19)) * jnp.uint32(5) + jnp.uint32(0xE6546B64)
  h = h ^ jnp.uint32(words.shape[-1] * 4)
  h = (h ^ (h >> 16)) * jnp.uint32(0x85EBCA6B)
  h = (h ^ (h >> 13)) * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


METHODS = ("table", "sort")


def _check(states, valid, method):
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")
  if valid.ndim < 2 or valid.dtype != jnp.bool_:
    raise ValueError(f"valid must be [T, N..., K] bool, got {valid.shape} {valid.dtype}")
  words = state_words(states, valid.ndim)
  if words.shape[:-1] != valid.shape:
    raise ValueError(f"states must be [T, N..., K, ...] = {valid.shape} + ..., got "
                     f"{words.shape[:-1]}")
  return words


def _group_major(x, lead):
  """[T, N..., K, ...] -> [G, T K, ...]: each task group's steps contiguous."""
  x = jnp.moveaxis(x, 0, lead - 2)                       # [N..., T, K, ...]
  return x.reshape((-1, x.shape[lead - 2] * x.shape[lead - 1]) + x.shape[lead:])


def _per_task(x, num, shape):
  """[G M] bool -> [N...] int32 counts per task group."""
  return jnp.sum(x.reshape(num, -1), axis=1).astype(jnp.int32).reshape(shape[1:-1])


def _time_major(x, shape):
  """Inverse of `_group_major` for [G, T K] -> [T, N..., K] (`shape`)."""
  x = x.reshape(shape[1:-1] + (shape[0], shape[-1]))
  return jnp.moveaxis(x, -2, 0)


def anchor_groups(states: Any, valid: jax.Array, *, method: str = "table",
                  probes: int = 8,
                  hash_fn: Optional[Callable[[jax.Array], jax.Array]] = None
                  ) -> AnchorGroups:
  """Groups the valid steps of each task group by equal state.

  Methods (the same groups, `tests/test_anchors.py`):
    "table": an open-addressing hash table of `2^ceil(log2(2 T K))` slots per task group,
      filled by scatter-min: in each round every step still unplaced writes its index at
      its state's next slot (double hashing), and a step joins the step that won its slot
      if their words are equal. All steps of one state share every slot, so they are
      placed together, in one group headed by the state's first step. Rounds stop when
      every step is placed or after `probes`; a state still unplaced then (it lost every
      slot to other states: under a uniform hash about 1e-20 per step at the default)
      leaves its steps as groups of one, counted in `unresolved`; two different states
      are never merged.
    "sort": one lexicographic sort by (group, valid, hash, words), exact in every case;
      on CPU about 8x the table's time at T = 1000, N = 16, K = 8 (13 vs 134 ms).
  All task groups go through one table (or sort): on CPU a vmapped scatter or gather is
  several times slower than a flat one, so a vmap (over seeds) folds its axis into the
  task groups too (`jax.custom_batching.custom_vmap`).

  Args:
    states: pytree of [T, N..., K, ...]: the state (or observation) each step acted in;
      K trajectories per task group, any task-group dims N... (none: one group).
    valid: [T, N..., K] bool; invalid steps join no group.
    method: "table" or "sort".
    probes: the most rounds of the "table" method.
    hash_fn: `words [M, W] uint32 -> [M] uint32`, default `_hash_words`; any function
      gives the same groups with "sort", and with "table" when `probes` is at least the
      number of states sharing a hash (tests force collisions with a constant).
  Returns:
    `AnchorGroups`.
  """
  words = _check(states, valid, method)
  run = _fold_vmap(lambda valid, words: _group_flat(words, valid, method, int(probes),
                                                    hash_fn))
  return AnchorGroups(*run(valid, words))


def _fold_vmap(fn):
  """`fn(valid [T, N..., K], *args [T, N..., K, ...])` whose outputs are [T, N..., K] or
  [N...], made to batch a vmap by folding the vmapped axis into the task groups: one flat
  call on [T, S N..., K] instead of S batched ones."""
  @jax.custom_batching.custom_vmap
  def run(valid, *args):
    return fn(valid, *args)

  @run.def_vmap
  def _rule(axis_size, in_batched, valid, *args):
    xs = [x if b else jnp.broadcast_to(x, (axis_size,) + x.shape)
          for x, b in zip((valid,) + args, in_batched)]
    inner, alone = xs[0].shape[2:-1], xs[0].ndim == 3     # [S, T, K]: S is the group axis
    fold = lambda x: (jnp.moveaxis(x, 0, 1) if alone else jnp.moveaxis(x, 0, 1).reshape(
        (x.shape[1], -1) + x.shape[3:]))
    folded = [fold(x) for x in xs]
    out = run(*folded)
    per_step = folded[0].ndim

    def unfold(y):
      if y.ndim == per_step:                               # [T, S N..., K]
        y = y.reshape((y.shape[0], axis_size) + inner + y.shape[-1:])
        return jnp.moveaxis(y, 1, 0)
      return y.reshape((axis_size,) + inner)               # [S N...]
    out = jax.tree.map(unfold, out)
    return out, jax.tree.map(lambda _: True, out)

  return run


def _group_flat(words, valid, method, probes, hash_fn):
  shape = valid.shape
  words = _group_major(words, valid.ndim)                # [G, M, W]
  v = _group_major(valid, valid.ndim)                    # [G, M]
  num, m = v.shape
  words, v = words.reshape(num * m, -1), v.reshape(-1)
  hashed = (hash_fn or _hash_words)(words).astype(jnp.uint32)
  index = jnp.arange(num * m, dtype=jnp.int32)
  task = index // m
  if method == "sort":
    keys = (task, jnp.logical_not(v).astype(jnp.uint32), hashed) + tuple(words.T)
    out = jax.lax.sort(keys + (index,), num_keys=len(keys), is_stable=True)
    changed = jnp.zeros((num * m - 1,), bool)
    for k in out[:-1]:
      changed = changed | (k[1:] != k[:-1])
    head = jnp.concatenate([jnp.ones((1,), bool), changed])
    # The first step (smallest index, the sort being stable) of each run heads it.
    first = jax.lax.cummax(jnp.where(head, jnp.arange(num * m), 0))
    group = jnp.zeros_like(index).at[out[-1]].set(out[-1][first])
    unplaced = jnp.zeros_like(v)
  else:
    slots = 1 << max(1, (2 * m - 1).bit_length())
    # Double hashing: an odd stride visits every slot of a power-of-two table.
    stride = _hash_words(jnp.stack([hashed, jnp.full_like(hashed, 0x5BD1E995)], -1)) | 1
    base = task * slots

    def probe(carry):
      r, group = carry
      pending = v & (group < 0)
      slot = base + ((hashed + r.astype(jnp.uint32) * stride)
                     & jnp.uint32(slots - 1)).astype(jnp.int32)
      table = jnp.full((num * slots,), num * m, jnp.int32).at[slot].min(
          jnp.where(pending, index, num * m))
      winner = jnp.minimum(table[slot], num * m - 1)
      same = jnp.all(words[winner] == words, axis=-1)
      return r + 1, jnp.where(pending & same, winner, group)

    def more(carry):
      r, group = carry
      return (r < probes) & jnp.any(v & (group < 0))

    _, group = jax.lax.while_loop(more, probe, (jnp.zeros((), jnp.int32),
                                                jnp.full_like(index, -1)))
    unplaced = v & (group < 0)
    group = jnp.where(group < 0, index, group)
  safe = jnp.where(v, group, index)
  size = jnp.where(v, jax.ops.segment_sum(v.astype(jnp.int32), safe,
                                          num_segments=num * m)[safe], 0)
  per_task = functools.partial(_per_task, num=num, shape=shape)
  num_groups = per_task(v & (group == index))
  local = jnp.where(v, group - task * m, -1)
  return (_time_major(local, shape), _time_major(size, shape), num_groups,
          per_task(unplaced))


def anchor_advantages(states: Any, step_returns: jax.Array, valid: jax.Array, *,
                      kind: str = "grpo", eps: Any = 1e-6, method: str = "table",
                      probes: int = 8,
                      hash_fn: Optional[Callable[[jax.Array], jax.Array]] = None):
  """GiGPO's step advantages for task groups of K trajectories.

  Args:
    states: pytree of [T, N..., K, ...], the state (or observation) of each step.
    step_returns: [T, N..., K] float, each step's discounted return-to-go in its
      trajectory.
    valid: [T, N..., K] bool.
    kind: "grpo" ((G - mean) / (sample std + eps)) or "mean" (G - mean).
    eps: [] added to the std (may be traced).
    method, probes, hash_fn: as in `anchor_groups`.
  Returns:
    `(advantages [T, N..., K] float32, stats)`: 0 at invalid steps and in degenerate
    groups; `stats` has, per task group `[N...]`, `num_groups` (distinct anchor states),
    `degenerate` (groups of one step or of equal returns), `anchored_steps` (valid steps
    in a group with signal) and `unresolved` (`anchor_groups`).
  """
  if kind not in KINDS:
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
  if step_returns.shape != valid.shape:
    raise ValueError(f"step_returns must be [T, N..., K] = {valid.shape}, got "
                     f"{step_returns.shape}")
  words = _check(states, valid, method)
  # eps rides per step, as an argument: the batching rule folds arguments, not closures.
  run = _fold_vmap(lambda valid, words, step_returns, eps: _advantages_flat(
      words, step_returns, valid, kind, eps, method, int(probes), hash_fn))
  return run(valid, words, step_returns,
             jnp.broadcast_to(jnp.asarray(eps, jnp.float32), valid.shape))


def _advantages_flat(words, step_returns, valid, kind, eps, method, probes, hash_fn):
  groups = AnchorGroups(*_group_flat(words, valid, method, probes, hash_fn))
  shape = valid.shape
  v = _group_major(valid, valid.ndim)                    # [G, M]
  num, m = v.shape
  v = v.reshape(-1)
  index = jnp.arange(num * m, dtype=jnp.int32)
  local = _group_major(groups.group, valid.ndim).reshape(-1)
  g = jnp.where(v, local + (index // m) * m, index)
  x = jnp.where(v, _group_major(step_returns, valid.ndim).reshape(-1).astype(jnp.float32),
                0.0)
  # Sums of deviations from the group's first return, in one segment sum: all returns
  # equal gives exactly 0 deviation (degenerate), and the shift keeps the variance free
  # of the cancellation of large means.
  d = jnp.where(v, x - x[g], 0.0)
  sums = jax.ops.segment_sum(jnp.stack([d, d * d], -1), g, num_segments=num * m)[g]
  size = _group_major(groups.size, valid.ndim).reshape(-1)
  count = jnp.maximum(size, 1).astype(jnp.float32)
  mean_d = sums[:, 0] / count
  sq = jnp.maximum(sums[:, 1] - count * mean_d ** 2, 0.0)
  signal = v & (size >= 2) & (sums[:, 1] > 0)
  centred = d - mean_d
  if kind == "grpo":
    eps = _group_major(eps, valid.ndim).reshape(-1)
    centred = centred / (jnp.sqrt(sq / jnp.maximum(count - 1.0, 1.0)) + eps)
  adv = _time_major(jnp.where(signal, centred, 0.0), shape)
  per_task = functools.partial(_per_task, num=num, shape=shape)
  heads = v & (g == index)
  stats = {"num_groups": groups.num_groups, "degenerate": per_task(heads & ~signal),
           "anchored_steps": per_task(signal), "unresolved": groups.unresolved}
  return adv, stats


def gigpo_advantages(episode_advantages: jax.Array, step_advantages: jax.Array,
                     valid: jax.Array, step_weight: Any) -> jax.Array:
  """`A(t, k) = A_episode(k) + step_weight * A_step(t, k)` at valid steps, else 0.

  Args:
    episode_advantages: [..., K] (GRPO's, `baselines.group_advantages`).
    step_advantages, valid: [T, ..., K].
    step_weight: [] (may be traced).
  """
  if step_advantages.shape[1:] != episode_advantages.shape or \
      valid.shape != step_advantages.shape:
    raise ValueError(f"step_advantages and valid must be [T, ..., K] with [..., K] = "
                     f"episode_advantages' {episode_advantages.shape}, got "
                     f"{step_advantages.shape} and {valid.shape}")
  adv = episode_advantages[None] + step_weight * step_advantages
  return jnp.where(valid, adv, 0.0)


ANCHORS = ("state", "obs")


def add_config(c: ml_collections.ConfigDict, step_weight: float = 1.0,
               anchor: str = "state") -> ml_collections.ConfigDict:
  """Adds an enabled `config.gigpo` block to `c`."""
  c.gigpo = ml_collections.ConfigDict()
  c.gigpo.enabled = True          # add GiGPO's step advantages to GRPO's
  c.gigpo.anchor = anchor         # state | obs: what makes two steps the same
  c.gigpo.kind = "grpo"           # grpo | mean: normalisation within an anchor group
  c.gigpo.method = "table"        # table | sort (`anchor_groups` above)
  c.gigpo.step_weight = step_weight  # omega, the step advantage's weight (a traced hparam)
  c.gigpo.gamma = 0.95            # discount of the step returns (a traced hparam)
  return c


class GigpoFeature(hooks.Feature):
  name = "gigpo"
  field = "gigpo.enabled"
  estimator = True
  traced = ("step_weight", "gamma")

  def validate(self, config, recipe: hooks.Recipe) -> None:
    g = config.gigpo
    require(recipe.rollout == hooks.GROUPS, "gigpo.enabled",
            f"anchor groups compare the K trajectories of a task group: the {recipe.name} "
            f"recipe's rollout is {recipe.rollout!r}, not groups")
    require_one_of(g.anchor, "gigpo.anchor", ANCHORS)
    require_one_of(g.kind, "gigpo.kind", KINDS)
    require_one_of(g.method, "gigpo.method", METHODS)
    require_range(g, "step_weight", 0.0, prefix="gigpo.")
    require_range(g, "gamma", 0.0, 1.0, prefix="gigpo.")

  def wrap_env(self, config, env, env_params):
    if config.gigpo.anchor == "state":
      return step_states.StepStateWrapper(env), env_params
    return env, env_params

  def bind(self, context: hooks.Context) -> hooks.Bound:
    g = context.config.gigpo
    anchor, kind, method = str(g.anchor), str(g.kind), str(g.method)

    def advantages(carry, inputs: hooks.EstimatorInput):
      traj, hp = inputs.traj, inputs.hp
      valid = traj.valid                                                   # [T, N, K]
      keys = traj.info[step_states.INFO_KEY] if anchor == "state" else traj.obs
      rewards = jnp.where(valid, inputs.signal.rewards, 0.0)
      to_go = returns.discounted_returns(rewards, hp["gigpo.gamma"],
                                         terminated=traj.dones & valid)
      step_adv, stats = anchor_advantages(keys, to_go, valid, kind=kind, method=method)
      adv = jnp.where(valid, inputs.advantages + hp["gigpo.step_weight"] * step_adv, 0.0)
      groups = jnp.maximum(stats["num_groups"], 1).astype(jnp.float32)
      return adv, carry, {
          "gigpo_groups": stats["num_groups"].astype(jnp.float32).mean(),
          "gigpo_degenerate_frac": (stats["degenerate"] / groups).mean(),
          "gigpo_anchored_frac": jnp.sum(stats["anchored_steps"]) / jnp.maximum(
              jnp.sum(valid), 1),
          "gigpo_unresolved": jnp.sum(stats["unresolved"]).astype(jnp.float32)}
    return hooks.Bound(advantages=advantages)
