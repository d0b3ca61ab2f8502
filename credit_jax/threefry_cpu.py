"""An unrolled CPU lowering of jax's Threefry-2x32 hash: the same bits, without a loop.

On CPU, jax lowers `threefry2x32` (the hash behind `jax.random` with its default
implementation) as a loop of five iterations of four rounds (smaller programs to compile,
presumably the reason). XLA runs such a loop as a `while` with its own
loop-carried copies, several per iteration. In credit_jax's compiled training loops, where
every update draws its rollout's noise and resets in bulk and splits a few keys, those
loops were ~3% of a 16-seed PPO update on CartPole (in-process A/B, CPU time per update,
32.8 -> 31.6 ms, bit-identical results).

`register()` makes jax lower `threefry2x32` on CPU to the twenty rounds written out, as it
already does on GPU. The hash is the same function (tested against Random123's
known-answer vectors and against jax's own lowering), so every random draw is unchanged;
only the compiled code differs. Nothing here runs at import: `credit_jax.fast_paths.enable()`
calls `register()` and `fast_paths.disable()` calls `unregister()`, which puts jax's own
CPU lowering back. A lowering is process-wide and applies to programs lowered after the
call; programs compiled before keep the code they were compiled with.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

# Threefry-2x32's rotation constants (Salmon et al. 2011), four per round group, and the
# key schedule's parity constant.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)
_ROUND_GROUPS = 5   # 20 rounds

_registered = False


def _rotl(x, r: int):
  return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32_unrolled(key1, key2, x1, x2):
  """Threefry-2x32 with 20 rounds on uint32 arrays: `(key1, key2, x1, x2) -> (y1, y2)`.

  All four are uint32 arrays of one shape (`register`'s rule broadcasts them first).
  """
  shapes = {jnp.shape(a) for a in (key1, key2, x1, x2)}
  dtypes = {jnp.result_type(a) for a in (key1, key2, x1, x2)}
  if len(shapes) != 1 or dtypes != {jnp.dtype(jnp.uint32)}:
    raise ValueError(f"key1, key2, x1, x2 must be uint32 arrays of one shape, got "
                     f"shapes {sorted(shapes)} and dtypes {sorted(map(str, dtypes))}")
  ks = (key1, key2, key1 ^ key2 ^ _PARITY)
  a, b = x1 + ks[0], x2 + ks[1]
  for group in range(_ROUND_GROUPS):
    for r in _ROTATIONS[group % 2]:
      a = a + b
      b = _rotl(b, r) ^ a
    # Key injection after every four rounds: key words rotate, plus the group count.
    a = a + ks[(group + 1) % 3]
    b = b + ks[(group + 2) % 3] + np.uint32(group + 1)
  return a, b


# jax's own CPU lowering rule for threefry2x32 (None: jax had none specific to CPU), saved
# by `register` for `unregister`; `_UNKNOWN` when jax's table could not be read.
_UNKNOWN = object()
_saved_cpu_rule = _UNKNOWN


def _cpu_lowerings():
  """jax's table of CPU-specific lowering rules (a private dict), or None if this jax has
  none where expected."""
  try:
    from jax._src.interpreters import mlir as mlir_internal  # pylint: disable=g-import-not-at-top
    table = mlir_internal._platform_specific_lowerings  # pylint: disable=protected-access
    return table["cpu"] if hasattr(table, "__getitem__") else None
  except (ImportError, AttributeError, KeyError, TypeError):
    return None


def register() -> bool:
  """Lowers jax's `threefry2x32` on CPU to `threefry2x32_unrolled` from now on, in this
  process; returns whether it did (False when this jax lacks the public hooks).
  Idempotent."""
  global _registered, _saved_cpu_rule
  if _registered:
    return True
  try:
    from jax.extend.random import threefry2x32_p  # pylint: disable=g-import-not-at-top
    from jax.interpreters import mlir  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False

  def lower(*args):
    # The primitive broadcasts its operands (keys against counts); do so explicitly, so a
    # process with `jax_numpy_rank_promotion="raise"` lowers it too.
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    return threefry2x32_unrolled(*(jnp.broadcast_to(a, shape) for a in args))

  table = _cpu_lowerings()
  _saved_cpu_rule = _UNKNOWN if table is None else table.get(threefry2x32_p)
  mlir.register_lowering(threefry2x32_p, mlir.lower_fun(lower, multiple_results=True),
                         platform="cpu")
  _registered = True
  return True


def registered() -> bool:
  """Whether the unrolled lowering is in force (registered and not undone)."""
  return _registered


def unregister() -> bool:
  """Puts jax's own CPU lowering of `threefry2x32` back (for programs lowered from now on);
  returns whether jax's lowering is in force afterwards.

  It needs jax's rule saved by `register`, read from a private table of jax's
  (`jax._src.interpreters.mlir._platform_specific_lowerings`). Where that table is
  missing the unrolled lowering stays in force (the same bits; only the compiled code
  differs) and this returns False. A no-op returning True when nothing is registered.
  """
  global _registered, _saved_cpu_rule
  if not _registered:
    return True
  table = _cpu_lowerings()
  if _saved_cpu_rule is _UNKNOWN or table is None:
    return False
  from jax.extend.random import threefry2x32_p  # pylint: disable=g-import-not-at-top
  if _saved_cpu_rule is None:
    table.pop(threefry2x32_p, None)   # back to jax's rule for every platform
  else:
    table[threefry2x32_p] = _saved_cpu_rule
  _registered, _saved_cpu_rule = False, _UNKNOWN
  return True
