"""Batched tree search over true JAX environments, with best-trajectory extraction.

Why: when K sampled episodes of a task all fail, a search that exploits the policy as a
prior can still find a success, and training on it concentrates the gradient. Our
environments are pure JAX, so a search node can hold the environment state itself and
restoring a node costs nothing: no learned model, no re-simulation from the root.

  search_fn = cj.search.make_search(env, logits_fn, num_simulations=256, max_depth=T,
                                    selection="puct")      # or "ucb1", "gumbel", a function
  out = search_fn(params, env_params, key, root_states, root_obs)   # roots [B, ...]
  out.trajectory                                           # [T, B] replay of the best episode

The package, one job per module (mctx splits the same job the same way):
  tree.py         `SearchTree` (node arrays `[B, N, ...]`, statistics on edges),
                  `SearchStats`, `SearchOutput`; creating the roots and adding nodes.
  model.py        the environment as the model: one step without auto-reset, masked
                  policy logits, leaf rollouts (shared with the mctx adapter).
  selection.py    selection rules (`puct`, `ucb1`, `gumbel`, or your own function with
                  the same signature) and the per-root descent that applies one.
  backup.py       adding a leaf's value to the edges on its path to the root.
  extract.py      tracking the best simulated episode and replaying it as a `Trajectory`.
  search.py       `make_search`, composing them.
  mctx_adapter.py `make_mctx_search`: mctx's `gumbel_muzero_policy` on the same model
                  (mctx imported only when a search is built).
  (what a search must beat at matched compute, greedy, best-of-M, sampling without
  replacement and beam search, serves the tree-search study only and lives in it:
  `credit_jax/experiments/tree_search/decoding.py`.)

On CPU, run search-heavy programs on one core (`taskset -c 0 python3 ...`, or
scripts/cpu_affinity.py before jax starts): XLA's CPU runtime spreads the independent
operations of a simulation over a thread pool as large as the cores the process may use,
and operations this small then cost more, their data moving between the cores' caches
(1.5-1.8x slower on both cores of the 2-core development machine; see BENCHMARKS.md).
"""
from credit_jax.search.backup import backup
from credit_jax.search.extract import (BestEpisode, best_trajectory, path_actions,
                                       replay_episode)
from credit_jax.search.mctx_adapter import make_mctx_search
from credit_jax.search.model import (ActionMaskFn, EnvModel, LogitsFn, ValueFn,
                                     make_env_model)
from credit_jax.search.search import make_search
from credit_jax.search.selection import RULES, SelectionRule, gumbel, gumbel_rule, puct, ucb1
from credit_jax.search.tree import SearchOutput, SearchStats, SearchTree

__all__ = [
    "ActionMaskFn", "BestEpisode", "EnvModel", "LogitsFn", "RULES", "SearchOutput",
    "SearchStats", "SearchTree", "SelectionRule", "ValueFn", "backup", "best_trajectory",
    "gumbel", "gumbel_rule", "make_env_model", "make_mctx_search", "make_search",
    "path_actions", "puct", "replay_episode", "ucb1",
]
