"""The mctx adapter: the same environments searched with mctx's `gumbel_muzero_policy`.

Why: for comparison with `make_search` (benchmarks, agreement tests), and for users who
prefer mctx's Gumbel MuZero action selection. The environment is the model: the
embedding is the environment state, `recurrent_fn` steps it with `env.step_env` (no
auto-reset, as in our search), and a new node is valued by the same policy rollout /
`value_fn` our search uses. mctx is an optional dependency, imported when a search is built.

mctx has no notion of a terminal node, so an ended episode becomes absorbing: steps from
it pay 0 with discount 1 and keep the value the node had when it ended (0 when
terminated, the bootstrap when truncated), which leaves the node's mean value unchanged.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp

from credit_jax.search.model import (ActionMaskFn, LogitsFn, ValueFn, check_roots,
                                     make_env_model)


class _Embedding(NamedTuple):
  state: Any          # env state pytree, [B, ...] at the mctx boundary
  ended: jax.Array    # [B] bool, the episode is over (absorbing)
  end_value: jax.Array  # [B] float32, value an ended node keeps
  depth: jax.Array    # [B] int32, steps from the root


def _import_mctx():
  try:
    import mctx  # pylint: disable=g-import-not-at-top
  except ImportError as err:
    raise ImportError("credit_jax.search.make_mctx_search needs mctx: `pip install mctx` "
                      "(or `pip install -e .[test]`)") from err
  return mctx


def make_mctx_search(env, logits_fn: LogitsFn, *, num_simulations: int, max_depth: int,
                     value_fn: Optional[ValueFn] = None,
                     action_mask_fn: Optional[ActionMaskFn] = None,
                     rollout: str = "greedy", rollout_depth: int = 0,
                     max_num_considered_actions: int = 16):
  """Builds `search_fn` running mctx.gumbel_muzero_policy with `env` as the model.

  Args mirror `make_search` (`credit_jax/search/search.py`); leaves are valued by a rollout of
  `rollout_depth` steps (default 0: `value_fn` alone, MuZero-style) bootstrapped with
  `value_fn`. `max_depth` bounds mctx's tree and the rollouts.

  Returns:
    `search_fn(params, env_params, key, root_states, root_obs, *, discount=1.0,
    gumbel_scale=1.0) -> mctx.PolicyOutput` with root_states, root_obs pytrees of
    `[B, ...]`; `.action` is `[B]`, `.action_weights` `[B, A]`.
  """
  mctx = _import_mctx()
  model = make_env_model(env, logits_fn, value_fn, action_mask_fn, max_depth=max_depth,
                          rollout=rollout, rollout_depth=rollout_depth)

  def evaluate(params, env_params, key, state, obs, depth, ended, terminated, discount):
    k_env, k_roll = jax.random.split(key)
    value, _, _, _ = model.rollout(params, env_params, k_env, k_roll, state, obs, depth, ended,
                                   terminated, discount)
    return model.masked_logits(params, obs, state), value

  def step_one(params, env_params, discount, key, action, emb):
    k_step, k_eval = jax.random.split(key)
    obs, state, reward, term, trunc, _ = model.step(env_params, k_step, emb.state, action)
    depth = emb.depth + 1
    ended = term | trunc
    logits, value = evaluate(params, env_params, k_eval, state, obs, depth, ended, term,
                             discount)
    was_ended = emb.ended
    out = mctx.RecurrentFnOutput(
        reward=jnp.where(was_ended, 0.0, reward),
        discount=jnp.where(was_ended, 1.0, jnp.where(term, 0.0, discount)),
        prior_logits=logits,
        value=jnp.where(was_ended, emb.end_value, value))
    keep = lambda old, new: jnp.where(was_ended, old, new)  # noqa: E731
    new_emb = _Embedding(
        state=jax.tree.map(keep, emb.state, state), ended=was_ended | ended,
        end_value=jnp.where(was_ended, emb.end_value, value), depth=depth)
    return out, new_emb

  def recurrent_fn(p, rng, action, embedding):
    params, env_params, discount = p
    keys = jax.random.split(rng, action.shape[0])
    return jax.vmap(step_one, (None, None, None, 0, 0, 0))(
        params, env_params, discount, keys, action, embedding)

  def search_fn(params, env_params, key, root_states, root_obs, *, discount=1.0,
                gumbel_scale=1.0):
    batch = check_roots(root_states, root_obs)
    k_root, k_search = jax.random.split(key)
    discount = jnp.asarray(discount, jnp.float32)
    no = jnp.zeros((batch,), bool)
    depth = jnp.zeros((batch,), jnp.int32)
    logits, value = jax.vmap(evaluate, (None, None, 0, 0, 0, 0, 0, 0, None))(
        params, env_params, jax.random.split(k_root, batch), root_states, root_obs, depth, no,
        no, discount)
    invalid = None
    if action_mask_fn is not None:
      invalid = ~jax.vmap(action_mask_fn)(root_states)
    root = mctx.RootFnOutput(prior_logits=logits, value=value,
                             embedding=_Embedding(root_states, no, jnp.zeros((batch,)), depth))
    return mctx.gumbel_muzero_policy(
        params=(params, env_params, discount), rng_key=k_search, root=root,
        recurrent_fn=recurrent_fn, num_simulations=num_simulations, invalid_actions=invalid,
        max_depth=max_depth, max_num_considered_actions=max_num_considered_actions,
        gumbel_scale=gumbel_scale)

  return search_fn
