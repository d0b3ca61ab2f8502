"""The suite's shared compilation cache (tests/conftest.py) locks its entries.

Without jax's file lock, a process reading an entry another is writing prints jax's "Error
reading persistent compilation cache entry" and fails the tests that require a silent
stderr (tests/test_readme.py, tests/test_no_hang.py); conftest turns the cache on only with
`filelock` and a size limit, the two conditions under which jax locks (jax/_src/lru_cache.py).
"""
import os

import jax
import jax.numpy as jnp
import pytest


def test_the_shared_cache_is_locked_or_off():
  cache_dir = os.environ.get("JAX_COMPILATION_CACHE_DIR")
  if not cache_dir:
    pytest.skip("the suite's compilation cache is off (no filelock, or opted out)")
  assert int(os.environ.get("JAX_COMPILATION_CACHE_MAX_SIZE", "-1")) > 0
  jax.jit(lambda x: jnp.sin(x) * 3.0 + 0.5)(jnp.ones(3)).block_until_ready()
  assert os.path.exists(os.path.join(cache_dir, ".lockfile")), sorted(os.listdir(cache_dir))
