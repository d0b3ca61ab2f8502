"""One opt-in switch for credit_jax's CPU fast paths; off by default.

    from credit_jax import fast_paths
    fast_paths.enable()            # or: with fast_paths.use(True): ...
    train = cj.make_train(config)  # traced (compiled) from here on with the fast paths

With the switch off (the default) the library is plain JAX and flax: `nn.Dense` layers,
`jax.random.permutation` for minibatch shuffles, and jax's own lowering of its random
numbers. With it on, three rewrites that each saved a few percent of a 16-seed PPO update
on a 2-core CPU (BENCHMARKS.md) are used:

- `threefry_cpu`: jax's Threefry hash lowered on CPU without its loop. The same random
  bits. Process-wide (a lowering registered with jax), so it also changes the compiled
  code, not the results, of any other JAX program in the process lowered while on.
- `networks.RowDense` for MLP layers with <= 8 inputs and `networks.ColumnDense` for
  policy heads of <= 8 actions: `nn.Dense` with the same parameters, computed another way
  (the same values and gradients up to float rounding).
- `common.shuffle_indices` for minibatch shuffles: a keyed Feistel bijection without a
  sort. A true permutation but a different one from `jax.random.permutation`'s for the
  same key, and pseudo-random rather than exactly uniform over all orders, so a run's
  numbers differ from the run with the switch off (its statistics are tested in
  tests/test_algos.py).

The GRU of `credit_jax/nets/sequence.py` has fast paths of its own, equal up to float
rounding: written-out tanh/sigmoid and a hand-written backward (`credit_jax/nets/gru.py`), and
GRU PPO's GAE reading the values its rollout computed instead of replaying the window
(`credit_jax/algos/ppo_agent.py`).

The switch is read when a function is traced. Functions already traced or compiled (a
`jax.jit` wrapper called before, a `.compile()`d executable) keep what they were traced
with; call `make_train` and `jax.jit` again after flipping it. Nothing here runs at import.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from credit_jax import threefry_cpu

_enabled = False


def enabled() -> bool:
  """Whether the fast paths are on (read by the library at trace time)."""
  return _enabled


def enable() -> None:
  """Turns the fast paths on for functions traced from now on, in this process."""
  global _enabled
  threefry_cpu.register()   # False on a jax without the public hooks: jax's lowering stays
  _enabled = True


def disable() -> bool:
  """Turns the fast paths off for functions traced from now on. Returns whether jax's own
  threefry lowering is back in force (False only on a jax whose lowering table could not
  be read: the unrolled lowering then stays, with the same random bits)."""
  global _enabled
  _enabled = False
  return threefry_cpu.unregister()


def set_enabled(on: bool) -> None:
  """`enable()` if `on` else `disable()`."""
  if on:
    enable()
  else:
    disable()


@contextlib.contextmanager
def use(on: bool = True) -> Iterator[None]:
  """Within the block the fast paths are `on`; afterwards they are as they were."""
  before = _enabled
  set_enabled(on)
  try:
    yield
  finally:
    set_enabled(before)
