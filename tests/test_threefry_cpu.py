"""The unrolled CPU lowering of jax's Threefry-2x32 (credit_jax.threefry_cpu)."""
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
from jax.extend.random import threefry_2x32
import numpy as np
import pytest

from credit_jax import fast_paths, threefry_cpu

# Random123's known-answer vectors for Threefry-2x32 with 20 rounds: (key, counter, out).
KAT = [((0x0, 0x0), (0x0, 0x0), (0x6B200159, 0x99BA4EFE)),
       ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
       ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]

# Draws through jax.random's public API, printed by a child process with jax's own
# lowering ("jax") or with the fast paths on ("ours").
DRAWS = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np
import credit_jax
if sys.argv[1] == "ours":
  credit_jax.fast_paths.enable()
def draws():
  out = {}
  for i in range(3):
    k = jax.random.PRNGKey(i)
    out[f"bits{i}"] = jax.random.bits(k, (7, 5))
    out[f"split{i}"] = jax.random.split(k, 3)
    out[f"normal{i}"] = jax.random.normal(jax.random.fold_in(k, 9), (11,))
    out[f"perm{i}"] = jax.random.permutation(k, 20)
    out[f"vmap{i}"] = jax.jit(jax.vmap(lambda kk: jax.random.uniform(kk, (4,))))(
        jax.random.split(k, 6))
  return {n: np.asarray(v).tolist() for n, v in out.items()}
print(json.dumps(draws()))
"""


def _lowered_text(fn, *args):
  # A fresh jit wrapper each time: a wrapper called before keeps its compiled code.
  return jax.jit(lambda *a: fn(*a)).lower(*args).as_text()


@pytest.mark.parametrize("fast", [False, True])
def test_known_answer_vectors_direct_and_through_jax(fast):
  with fast_paths.use(fast):
    for key, ctr, out in KAT:
      as_u32 = lambda t: [jnp.asarray(v, jnp.uint32) for v in t]
      got = threefry_cpu.threefry2x32_unrolled(*as_u32(key), *as_u32(ctr))
      assert [int(v) for v in got] == list(out)
      via_jax = jax.jit(lambda k, c: threefry_2x32(k, c))(
          jnp.asarray(key, jnp.uint32), jnp.asarray(ctr, jnp.uint32))
      assert [int(v) for v in np.asarray(via_jax)] == list(out)


def test_unrolled_rejects_mixed_shapes_and_dtypes():
  u32 = lambda *shape: jnp.zeros(shape, jnp.uint32)
  with pytest.raises(ValueError, match="one shape"):
    threefry_cpu.threefry2x32_unrolled(u32(2), u32(2), u32(3), u32(3))
  with pytest.raises(ValueError, match="uint32"):
    threefry_cpu.threefry2x32_unrolled(u32(2), u32(2), u32(2), jnp.zeros(2, jnp.int32))


def test_registered_by_the_switch_and_undone():
  bits = lambda k: jax.random.bits(k, (3,))
  key = jax.random.PRNGKey(0)
  assert not fast_paths.enabled() and not threefry_cpu.registered()
  plain = _lowered_text(bits, key)
  with fast_paths.use(True):
    assert fast_paths.enabled() and threefry_cpu.registered()
    assert threefry_cpu.register()   # idempotent; True once registered
    ours = _lowered_text(bits, key)
  assert not fast_paths.enabled()
  if jax.default_backend() == "cpu":
    assert "while" in plain and "while" not in ours
  # jax's own lowering is back where its lowering table can be read (a private dict of
  # jax's, there in jax 0.10); otherwise the unrolled one stays and says so.
  restorable = threefry_cpu._cpu_lowerings() is not None  # pylint: disable=protected-access
  assert threefry_cpu.registered() != restorable
  assert (_lowered_text(bits, key) == plain) == restorable
  if restorable:
    assert threefry_cpu.unregister()   # a no-op when nothing is registered


def _draws(which: str):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", DRAWS, which], capture_output=True,
                       text=True, env=env, check=True, timeout=300)
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_same_draws_as_jax_own_lowering():
  ours, theirs = _draws("ours"), _draws("jax")
  assert ours.keys() == theirs.keys()
  for name in ours:
    np.testing.assert_array_equal(np.asarray(ours[name]), np.asarray(theirs[name]),
                                  err_msg=name)
