"""Decoding baselines for tree search: greedy, best-of-M, sampling without replacement, beam.

A search result means little until the cheap ways of spending the same compute are ruled
out. Each `make_*` here returns a pure, jittable function with `make_search`'s calling
convention, over the same environment model (`credit_jax/search/model.py`: no auto-reset,
the step at depth d keyed `fold_in(env_key, d)`):

  fn = make_beam_search(env, logits_fn, width=64, max_depth=T)
  out = fn(params, env_params, key, root_states, root_obs)     # roots [B, ...]
  out.success, out.env_steps, out.policy_evals                  # [B] each

  make_greedy             the argmax action at every step (one episode; T env steps).
  make_best_of_m          M independent episodes sampled at `temperature`
                          (`make_best_of_m_streamed`: M chosen at call time).
  make_sampling_without_replacement
                          M distinct action sequences, drawn without replacement from the
                          policy at `temperature`: stochastic beam search (Gumbel-top-k
                          over whole sequences, Kool et al. 2019, arXiv:1903.06059).
  make_beam_search        the `width` highest-probability prefixes kept at every step;
                          `dedup=True` keeps one prefix per distinct environment state
                          (the simulator's state equality: a transposition table).

Each returns `BaselineOutput`: every candidate episode (actions, return, log-probability)
and per root the best return, success (a complete episode with return >= threshold) and
its cost: env steps (transitions computed) and policy evaluations (logits computed at a
live state). Beam search without dedup and sampling step only the children they keep
(`width` steps per depth); with dedup every child of every live prefix is stepped (its
state is needed to compare), `A x width` steps per depth.

Ties: beam search breaks equal scores towards the lower (prefix, action) index.
Episodes end by the environment (terminated or truncated) or at `max_depth`; only the
former count as complete. Action masks are not supported.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from credit_jax.search.model import LogitsFn, check_roots, make_env_model

Array = jax.Array
NEG_INF = -jnp.inf


class BaselineOutput(NamedTuple):
  """Candidates of a batch of roots (`M`: samples or beam width) and their cost."""
  actions: Array       # [B, M, T] int32, each candidate's actions (0 after its end)
  returns: Array       # [B, M] float32, undiscounted total reward of each candidate
  log_probs: Array     # [B, M] float32, summed log-probabilities at the temperature used
  complete: Array      # [B, M] bool, the episode was ended by the environment
  valid: Array         # [B, M] bool, the candidate exists (a beam may hold fewer early)
  total_reward: Array  # [B] float32, best return among valid complete candidates (-inf)
  success: Array       # [B] bool, total_reward >= success_threshold
  env_steps: Array     # [B] int32, environment transitions computed
  policy_evals: Array  # [B] int32, policy logits computed at live states


def _finish(actions, returns, log_probs, complete, valid, env_steps, evals, threshold):
  ok = valid & complete
  best = jnp.max(jnp.where(ok, returns, NEG_INF), axis=-1)
  return BaselineOutput(actions, returns, log_probs, complete, valid, best,
                        best >= threshold, env_steps.astype(jnp.int32),
                        evals.astype(jnp.int32))


def _check(name: str, value: int, minimum: int = 1) -> int:
  if int(value) != value or int(value) < minimum:
    raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
  return int(value)


def _where_tree(cond, new, old):
  """`new` where `cond` (shape [W] or []) else `old`, for pytrees with leading [W]."""
  def pick(n, o):
    return jnp.where(cond.reshape(cond.shape + (1,) * (n.ndim - cond.ndim)), n, o)
  return jax.tree.map(pick, new, old)


def _sampler(env, logits_fn, num_samples, max_depth, greedy):
  """`fn(params, env_params, key, roots..., temperature, threshold)` for M episodes."""
  model = make_env_model(env, logits_fn, None, None, max_depth=max_depth, rollout="greedy",
                         rollout_depth=max_depth)

  def one_episode(params, env_params, env_key, key, state, obs, temperature):
    def step(c, t):
      state, obs, ended, total, logp = c
      logits = model.masked_logits(params, obs, state) / temperature
      action = (jnp.argmax(logits) if greedy else
                jax.random.categorical(jax.random.fold_in(key, t), logits)).astype(jnp.int32)
      n_obs, n_state, reward, term, trunc, _ = model.step(
          env_params, jax.random.fold_in(env_key, t), state, action)
      live = ~ended
      state, obs = _where_tree(live, (n_state, n_obs), (state, obs))
      logp = logp + jnp.where(live, jax.nn.log_softmax(logits)[action], 0.0)
      return ((state, obs, ended | term | trunc, total + jnp.where(live, reward, 0.0), logp),
              (jnp.where(live, action, 0), live))
    c0 = (state, obs, jnp.bool_(False), jnp.float32(0.0), jnp.float32(0.0))
    (_, _, ended, total, logp), (actions, live) = jax.lax.scan(step, c0,
                                                               jnp.arange(max_depth))
    return actions, total, logp, ended, live.sum()

  def fn(params, env_params, key, root_states, root_obs, *, temperature=1.0,
         success_threshold=1.0):
    batch = check_roots(root_states, root_obs)
    k_env, k_sample = jax.random.split(key)
    env_keys = jax.random.split(k_env, batch)
    sample_keys = jax.random.split(k_sample, (batch, num_samples))
    temperature = jnp.asarray(temperature, jnp.float32)
    per_sample = jax.vmap(one_episode, (None, None, None, 0, None, None, None))
    actions, total, logp, ended, steps = jax.vmap(per_sample, (None, None, 0, 0, 0, 0, None))(
        params, env_params, env_keys, sample_keys, root_states, root_obs, temperature)
    steps = steps.sum(-1)
    return _finish(actions, total, logp, ended, jnp.ones_like(ended), steps, steps,
                   success_threshold)
  return fn


def make_greedy(env, logits_fn: LogitsFn, *, max_depth: int):
  """Greedy decoding: one episode taking `argmax` of the logits at every step.

  Returns `fn(params, env_params, key, root_states, root_obs, *, success_threshold=1.0)
  -> BaselineOutput` with M = 1; roots `[B, ...]`; `key` is unused (kept for the common
  signature).
  """
  sampler = _sampler(env, logits_fn, 1, _check("max_depth", max_depth), greedy=True)

  def fn(params, env_params, key, root_states, root_obs, *, success_threshold=1.0):
    return sampler(params, env_params, key, root_states, root_obs, temperature=1.0,
                   success_threshold=success_threshold)
  return fn


def make_best_of_m(env, logits_fn: LogitsFn, *, num_samples: int, max_depth: int):
  """Best-of-M: `num_samples` independent episodes per root sampled from
  `softmax(logits / temperature)`; the root succeeds if any episode does.

  Returns `fn(params, env_params, key, root_states, root_obs, *, temperature=1.0,
  success_threshold=1.0) -> BaselineOutput` (M = num_samples); `temperature` may be traced.
  """
  return _sampler(env, logits_fn, _check("num_samples", num_samples),
                  _check("max_depth", max_depth), greedy=False)


class StreamedOutput(NamedTuple):
  """Best-of-M reduced over its samples as they are drawn (`make_best_of_m_streamed`)."""
  total_reward: Array  # [B] float32, best return among complete episodes (-inf if none)
  success: Array       # [B] bool
  env_steps: Array     # [B] int32
  policy_evals: Array  # [B] int32


def make_best_of_m_streamed(env, logits_fn: LogitsFn, *, max_depth: int, chunk: int = 1):
  """Best-of-M with M = `chunk x num_chunks` chosen at call time (traced): a loop of
  `make_best_of_m` calls of `chunk` samples, chunk i keyed `fold_in(key, i)`, keeping only
  the best return. One compiled function serves every M (and its cost grows with M).

  Returns `fn(params, env_params, key, root_states, root_obs, num_chunks, *,
  temperature=1.0, success_threshold=1.0) -> StreamedOutput` with roots `[B, ...]`.
  """
  inner = make_best_of_m(env, logits_fn, num_samples=_check("chunk", chunk),
                         max_depth=max_depth)

  def fn(params, env_params, key, root_states, root_obs, num_chunks, *, temperature=1.0,
         success_threshold=1.0):
    batch = check_roots(root_states, root_obs)
    def body(i, c):
      best, steps, evals = c
      out = inner(params, env_params, jax.random.fold_in(key, i), root_states, root_obs,
                  temperature=temperature, success_threshold=success_threshold)
      return (jnp.maximum(best, out.total_reward), steps + out.env_steps,
              evals + out.policy_evals)
    zeros = jnp.zeros((batch,), jnp.int32)
    best, steps, evals = jax.lax.fori_loop(
        0, num_chunks, body, (jnp.full((batch,), NEG_INF), zeros, zeros))
    return StreamedOutput(best, best >= success_threshold, steps, evals)
  return fn


def log1mexp(x: Array) -> Array:
  """`log(1 - exp(x))` for x <= 0, accurate at both ends (-inf at x = 0)."""
  return jnp.where(x > -0.6931472, jnp.log(-jnp.expm1(x)), jnp.log1p(-jnp.exp(x)))


def truncated_gumbel(target: Array, g_max: Array, g: Array) -> Array:
  """Gumbels `g` (max `g_max`) shifted so that their max is `target`, their law
  conditioned on that max: `-log(exp(-target) - exp(-g_max) + exp(-g))`, in the stable
  form of arXiv:1903.06059 (appendix B.3). Entries with `g = -inf` stay -inf.

  Args: target, g_max broadcastable to g ([..., A]); returns g's shape.
  """
  ok = g > NEG_INF
  safe_g = jnp.where(ok, g, 0.0)
  v = target - safe_g + log1mexp(jnp.minimum(safe_g - jnp.where(ok, g_max, 0.0), 0.0))
  out = target - jax.nn.relu(v) - jnp.log1p(jnp.exp(-jnp.abs(v)))
  return jnp.where(ok, out, NEG_INF)


def state_hash(state: Any) -> Array:
  """[] uint32 hash of ONE environment state (every leaf's bits, position-weighted).

  Equal states hash equal; `_dedup` compares states exactly, the hash only groups them.
  """
  words = []
  for leaf in jax.tree.leaves(state):
    x = jnp.ravel(jnp.asarray(leaf))
    if jnp.issubdtype(x.dtype, jnp.floating):
      x = jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    else:
      x = x.astype(jnp.int32).view(jnp.uint32)
    words.append(x)
  x = jnp.concatenate(words) if words else jnp.zeros((1,), jnp.uint32)
  weights = jnp.cumprod(jnp.full(x.shape, 16777619, jnp.uint32), dtype=jnp.uint32)
  mixed = (x ^ jnp.uint32(0x9E3779B9)) * weights
  return jnp.sum(mixed, dtype=jnp.uint32) ^ jnp.uint32(x.shape[0])


def _dedup(states: Any, scores: Array) -> Array:
  """Scores [C] with every candidate whose state equals a better-scored one set to -inf.

  Candidates are sorted by (hash, score); an equal state then sits next to its better
  copy unless another state with the same hash sits between them (a 32-bit collision),
  in which case the copy is kept: dedup can only miss, never merge distinct states.
  """
  hashes = jax.vmap(state_hash)(states)
  order = jnp.lexsort((-scores, hashes))
  sorted_states = jax.tree.map(lambda x: x[order], states)
  same = hashes[order][1:] == hashes[order][:-1]
  for leaf in jax.tree.leaves(sorted_states):
    flat = leaf.reshape(leaf.shape[0], -1)
    same = same & jnp.all(flat[1:] == flat[:-1], axis=-1)
  dup_sorted = jnp.concatenate([jnp.zeros((1,), bool), same])
  dup = jnp.zeros_like(dup_sorted).at[order].set(dup_sorted)
  return jnp.where(dup, NEG_INF, scores)


class _Beam(NamedTuple):
  """One root's beam of W prefixes (a leading [W] on every field)."""
  state: Any           # pytree [W, ...], environment state after the prefix
  obs: Any             # pytree [W, ...]
  valid: Array         # [W] bool
  ended: Array         # [W] bool, ended by the environment
  log_prob: Array      # [W] float32, summed log-probabilities (phi)
  key: Array           # [W] float32, the selection key: phi, or its perturbed Gumbel (G)
  total: Array         # [W] float32, undiscounted reward so far
  actions: Array       # [W, T] int32


def _beam_runner(env, logits_fn, width, max_depth, mode, dedup):
  """`one_root(params, env_params, env_key, key, state, obs, temperature)` for a beam."""
  model = make_env_model(env, logits_fn, None, None, max_depth=max_depth, rollout="greedy",
                         rollout_depth=max_depth)
  num_actions = model.num_actions
  step_all = jax.vmap(model.step, (None, None, 0, 0))

  def one_root(params, env_params, env_key, key, state, obs, temperature):
    rep = lambda x: jnp.repeat(jnp.asarray(x)[None], width, axis=0)
    first = jnp.arange(width) == 0
    zeros = jnp.zeros((width,), jnp.float32)
    beam = _Beam(jax.tree.map(rep, state), jax.tree.map(rep, obs), first,
                 jnp.zeros((width,), bool), zeros, zeros, zeros,
                 jnp.zeros((width, max_depth), jnp.int32))

    def step(c, t):
      beam, steps, evals = c
      active = beam.valid & ~beam.ended
      logits = jax.vmap(model.masked_logits, (None, 0, 0))(params, beam.obs, beam.state)
      child_lp = jax.nn.log_softmax(logits / temperature)                       # [W, A]
      stay = (beam.valid & beam.ended)[:, None] & (jnp.arange(num_actions) == 0)
      child_lp = jnp.where(active[:, None], child_lp, jnp.where(stay, 0.0, NEG_INF))
      phi = beam.log_prob[:, None] + child_lp                                   # [W, A]
      if mode == "swor":
        g_hat = phi + jax.random.gumbel(jax.random.fold_in(key, t), phi.shape)
        score = truncated_gumbel(beam.key[:, None], g_hat.max(-1, keepdims=True), g_hat)
      else:
        score = phi
      env_k = jax.random.fold_in(env_key, t)
      acts = jnp.broadcast_to(jnp.arange(num_actions, dtype=jnp.int32), phi.shape)
      if dedup:  # step every child of every live prefix, then merge equal states
        flat = jax.tree.map(lambda x: jnp.repeat(x, num_actions, axis=0),
                            (beam.state, beam.obs))
        c_obs, c_state, c_rew, c_term, c_trunc, _ = step_all(env_params, env_k, flat[0],
                                                             acts.reshape(-1))
        moved = jnp.repeat(active, num_actions)
        c_state, c_obs = _where_tree(moved, (c_state, c_obs), (flat[0], flat[1]))
        score = _dedup(c_state, score.reshape(-1))
        steps = steps + num_actions * active.sum()
      top, idx = jax.lax.top_k(score.reshape(-1), width)
      parent, action = idx // num_actions, (idx % num_actions).astype(jnp.int32)
      valid = top > NEG_INF
      moved = active[parent] & valid
      if dedup:
        n_obs, n_state = jax.tree.map(lambda x: x[idx], (c_obs, c_state))
        reward, term, trunc = c_rew[idx], c_term[idx], c_trunc[idx]
      else:
        p_state, p_obs = jax.tree.map(lambda x: x[parent], (beam.state, beam.obs))
        n_obs, n_state, reward, term, trunc, _ = step_all(env_params, env_k, p_state, action)
        n_state, n_obs = _where_tree(moved, (n_state, n_obs), (p_state, p_obs))
        steps = steps + moved.sum()
      new = _Beam(
          n_state, n_obs, valid, beam.ended[parent] | (moved & (term | trunc)),
          phi.reshape(-1)[idx], top, beam.total[parent] + jnp.where(moved, reward, 0.0),
          beam.actions[parent].at[:, t].set(jnp.where(moved, action, 0)))
      return (new, steps, evals + active.sum()), None

    (beam, steps, evals), _ = jax.lax.scan(step, (beam, jnp.int32(0), jnp.int32(0)),
                                           jnp.arange(max_depth))
    return (beam.actions, jnp.where(beam.valid, beam.total, NEG_INF),
            jnp.where(beam.valid, beam.log_prob, NEG_INF), beam.ended, beam.valid, steps,
            evals)
  return one_root


def _beam_fn(env, logits_fn, width, max_depth, mode, dedup):
  one_root = _beam_runner(env, logits_fn, width, max_depth, mode, dedup)

  def fn(params, env_params, key, root_states, root_obs, *, temperature=1.0,
         success_threshold=1.0):
    batch = check_roots(root_states, root_obs)
    k_env, k_beam = jax.random.split(key)
    out = jax.vmap(one_root, (None, None, 0, 0, 0, 0, None))(
        params, env_params, jax.random.split(k_env, batch), jax.random.split(k_beam, batch),
        root_states, root_obs, jnp.asarray(temperature, jnp.float32))
    return _finish(*out, success_threshold)
  return fn


def make_sampling_without_replacement(env, logits_fn: LogitsFn, *, num_samples: int,
                                      max_depth: int):
  """M distinct action sequences per root, sampled without replacement from the policy
  at `temperature` (stochastic beam search, arXiv:1903.06059): a beam whose keys are
  Gumbel-perturbed sequence log-probabilities, each child's conditioned on its parent's.

  The kept set has the law of drawing sequences one by one without replacement, so it
  never repeats a sequence and holds min(M, number of sequences) of them. Returns
  `fn(params, env_params, key, root_states, root_obs, *, temperature=1.0,
  success_threshold=1.0) -> BaselineOutput` (M = num_samples).
  """
  return _beam_fn(env, logits_fn, _check("num_samples", num_samples),
                  _check("max_depth", max_depth), "swor", dedup=False)


def make_beam_search(env, logits_fn: LogitsFn, *, width: int, max_depth: int,
                     dedup: bool = False):
  """Beam search: keeps the `width` prefixes of highest summed log-probability (at
  `temperature`) at every depth; episodes that ended stay in the beam unchanged.

  `dedup=True` keeps only the best prefix per distinct environment state (exact
  equality of the state pytree), stepping all A children of every live prefix to get
  their states. With width >= A^T (no dedup) it enumerates every action sequence.
  Returns `fn(params, env_params, key, root_states, root_obs, *, temperature=1.0,
  success_threshold=1.0) -> BaselineOutput` (M = width); `key` only seeds env steps.
  """
  return _beam_fn(env, logits_fn, _check("width", width), _check("max_depth", max_depth),
                  "beam", bool(dedup))


__all__ = ["BaselineOutput", "log1mexp", "make_beam_search", "make_best_of_m",
           "make_best_of_m_streamed", "StreamedOutput",
           "make_greedy", "make_sampling_without_replacement", "state_hash",
           "truncated_gumbel"]
