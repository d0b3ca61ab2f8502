"""credit_jax: long-horizon credit assignment as pure, jit-compiled JAX functions.

The public API is flat: `cj.gae`, `cj.lambda_returns`, `cj.group_advantages`,
`cj.envs.make`, ... Submodules hold the implementations.
"""
from credit_jax import threefry_cpu
threefry_cpu.register()   # same random bits, no loop on CPU; see the module
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
from credit_jax import search, search_mctx
from credit_jax.search import SearchOutput, SearchStats, SearchTree, make_search
from credit_jax.search_mctx import make_mctx_search
from credit_jax import networks, sequence_networks, algos, parallel
from credit_jax.algos import make_train

__version__ = "0.1.0"
