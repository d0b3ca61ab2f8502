"""credit_jax: long-horizon credit assignment as pure, jit-compiled JAX functions.

The public API is flat: `cj.gae`, `cj.lambda_returns`, `cj.group_advantages`,
`cj.envs.make`, ... The package is layered, each layer importing only from itself and
those below it (docs/ARCHITECTURE.md draws it):

  envs/                environments with ground truth for credit (gymnax 1.0 API)
  core modules         types, config, returns, baselines, hindsight, replay, episodes,
                       rollout, diagnostics, stats, fast_paths; step-level credit from
                       restored states: vine (VinePPO), anchors (GiGPO), tree_rollouts
  nets/                flax networks: MLP, GRU, transformer, PRM
  search/              batched tree search over true environments
  addons/              features a recipe accepts: curriculum, PRM shaping, critique, probes
  algos/               the recipes, one training program each, and the Train contract
  runtime/             the run loop: checkpoints, metrics, watchdog, launch
  sweep/, experiments/ grids of runs, and one package per study

Importing credit_jax (or any of its modules) changes nothing outside it: it registers no
lowering, sets no environment variable or XLA flag and runs no JAX computation. The CPU
fast paths are opt-in: `cj.fast_paths.enable()` (see credit_jax/fast_paths.py).
"""
import importlib as _importlib
import warnings as _warnings

from credit_jax.types import (PolicyFn, PolicyState, PresampledPolicy, SequencePolicy,
                              Trajectory, to_batch_major)
from credit_jax import returns
from credit_jax.returns import discounted_returns, gae, lambda_returns, td_errors
from credit_jax import baselines
from credit_jax.baselines import (RunningBaseline, group_advantages,
                                  running_baseline_advantages, running_baseline_init,
                                  running_baseline_update)
from credit_jax import envs, rollout
from credit_jax import hindsight, replay
from credit_jax import anchors, tree_rollouts, vine
from credit_jax import diagnostics
from credit_jax import search
from credit_jax.search import (SearchOutput, SearchStats, SearchTree, make_mctx_search,
                               make_search)
from credit_jax import fast_paths, nets, algos
from credit_jax.algos import make_train

__version__ = "0.1.0"

# Module names of the flat layout before the layer folders, kept for one release so
# research forks that wrote `cj.networks.ActorCritic` keep working (with a warning).
_MOVED = {
    "networks": "credit_jax.nets.mlp",
    "sequence_networks": "credit_jax.nets.sequence",
    "gru": "credit_jax.nets.gru",
    "prm_model": "credit_jax.nets.prm",
    "curriculum": "credit_jax.addons.curriculum",
    "prm": "credit_jax.addons.prm",
    "prm_labels": "credit_jax.addons.prm_labels",
    "critique": "credit_jax.addons.critique",
    "memory": "credit_jax.addons.memory",
    "gae_gradient": "credit_jax.addons.gae_probe",
    "run": "credit_jax.runtime.run",
    "launch": "credit_jax.runtime.launch",
    "checkpoint": "credit_jax.runtime.checkpoint",
    "metrics": "credit_jax.runtime.metrics",
    "watchdog": "credit_jax.runtime.watchdog",
    "interrupts": "credit_jax.runtime.interrupts",
    "workdir": "credit_jax.runtime.workdir",
    "parallel": "credit_jax.runtime.parallel",
}


def __getattr__(name):
  if name in _MOVED:
    _warnings.warn(f"credit_jax.{name} moved to {_MOVED[name]}; the old name goes in the "
                   f"next release", DeprecationWarning, stacklevel=2)
    return _importlib.import_module(_MOVED[name])
  raise AttributeError(f"module 'credit_jax' has no attribute {name!r}")


__all__ = [
    "PolicyFn", "PolicyState", "PresampledPolicy", "RunningBaseline", "SearchOutput",
    "SearchStats", "SearchTree", "SequencePolicy", "Trajectory", "algos", "anchors",
    "baselines", "diagnostics", "discounted_returns", "envs", "fast_paths", "gae", "group_advantages",
    "hindsight", "lambda_returns", "make_mctx_search", "make_search", "make_train", "nets",
    "replay", "returns", "rollout", "running_baseline_advantages", "running_baseline_init",
    "running_baseline_update", "search", "td_errors", "to_batch_major", "tree_rollouts",
    "vine",
]
