"""credit_jax: long-horizon credit assignment as pure, jit-compiled JAX functions.

The public API is flat: `cj.gae`, `cj.lambda_returns`, `cj.group_advantages`,
`cj.envs.make`, ... Submodules hold the implementations.

Importing credit_jax (or any of its modules) changes nothing outside it: it registers no
lowering, sets no environment variable or XLA flag and runs no JAX computation. The CPU
fast paths are opt-in: `cj.fast_paths.enable()` (see credit_jax/fast_paths.py).
"""
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
from credit_jax import diagnostics
from credit_jax import search
from credit_jax.search import (SearchOutput, SearchStats, SearchTree, make_mctx_search,
                               make_search)
from credit_jax import fast_paths, networks, sequence_networks, algos, parallel
from credit_jax.algos import make_train

__version__ = "0.1.0"
