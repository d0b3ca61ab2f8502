"""credit_jax: long-horizon credit assignment as pure, jit-compiled JAX functions.

The public API is flat: `cj.gae`, `cj.lambda_returns`, `cj.group_advantages`,
`cj.envs.make`, ... Submodules hold the implementations.
"""
from credit_jax.types import PolicyFn, Trajectory, to_batch_major

__version__ = "0.1.0"
