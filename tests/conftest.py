"""Process setup for the test session: the XLA flags every entry point gets, XLA's CPU
backend at optimisation level 0, and one persistent compilation cache for the whole run.

Tests run vmapped multi-seed programs in the pytest process itself, so they get the XLA
CPU setting of credit_jax/runtime/launch.py (the jaxlib 0.10 wedge, BUILD.md "Hang soak") like
scripts/train.py does, from the same table. launch.py is loaded by file path, before any
test module imports a credit_jax module that imports gymnax (which starts a JAX backend,
after which XLA_FLAGS could no longer apply). Subprocesses started by tests inherit the
setting (tests/test_no_hang.py removes it, to test the scripts' own call).

Optimisation level 0: the suite's time is mostly XLA compiles of small programs that then
run for a fraction of a second, so `--xla_backend_optimization_level=0` is appended to
XLA_FLAGS (after any flags already there, which are kept; not when XLA_FLAGS already names
that flag). It halves the compile time, makes runs about 2.5x slower, and cut the whole
suite's user CPU by 37-45% (BUILD.md, "CPU"). Tests whose numbers depend on the level
state bounds that hold at both levels. This is test infrastructure only: the library and
its entry points never set it. Opt out (XLA's default level) with
`CREDIT_JAX_TEST_XLA_LEVEL0=0 python3 -m pytest ...`.

The compilation cache (BUILD.md "Where the suite's time goes"): a test that starts the same
program in several processes (a run, its killed twin and the resume; the two processes of a
distributed run) compiles it once. Opt out with `CREDIT_JAX_TEST_COMPILATION_CACHE=0`.
"""
import importlib.util
import os
import shutil
import sys
import tempfile

_PATH = os.path.join(os.path.dirname(__file__), os.pardir, "credit_jax", "runtime",
                     "launch.py")
_spec = importlib.util.spec_from_file_location("_credit_jax_launch_for_tests", _PATH)
_launch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_launch)
# Two or more seeds: the setting for multi-seed programs.
_launch.configure_process(num_seeds=2)

_LEVEL_FLAG = "--xla_backend_optimization_level"
if (os.environ.get("CREDIT_JAX_TEST_XLA_LEVEL0", "1") != "0"
    and _LEVEL_FLAG not in os.environ.get("XLA_FLAGS", "")):
  os.environ["XLA_FLAGS"] = " ".join(
      [os.environ.get("XLA_FLAGS", ""), _LEVEL_FLAG + "=0"]).strip()

# The session's persistent compilation cache: one fresh directory per pytest run, created
# by the first process that loads this file (the xdist controller, before it starts its
# workers) and passed on through the environment, so the workers and every subprocess a
# test starts (scripts/*.py, README blocks) read and write the same one; removed at the
# end by the process that made it. Set before any test module imports jax (jax reads
# these variables when it is imported). A user's own JAX_COMPILATION_CACHE_DIR is kept.
_CACHE_VAR = "JAX_COMPILATION_CACHE_DIR"
_CACHE_MADE_HERE = None
# jax writes an entry without a lock unless the cache has a size limit and `filelock` is
# installed (jax/_src/lru_cache.py): a process reading an entry while another writes it
# would print "Error reading persistent compilation cache entry" and fail the tests that
# require a silent stderr. So the cache is on only with filelock, under a 16 GiB limit.
if (os.environ.get("CREDIT_JAX_TEST_COMPILATION_CACHE", "1") != "0"
    and not os.environ.get(_CACHE_VAR)
    and importlib.util.find_spec("filelock") is not None):
  _CACHE_MADE_HERE = tempfile.mkdtemp(prefix="credit_jax_test_xla_cache_")
  os.environ[_CACHE_VAR] = _CACHE_MADE_HERE
  # Every program, however quick its compile (jax's default keeps only those over 1 s).
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
  os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(16 << 30))
  if "jax" in sys.modules:   # imported already (by a plugin): set its config directly
    import jax  # pylint: disable=g-import-not-at-top
    jax.config.update("jax_compilation_cache_dir", _CACHE_MADE_HERE)
    jax.config.update("jax_persistent_cache_min_compile_time_secs",
                      float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))
    jax.config.update("jax_compilation_cache_max_size",
                      int(os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"]))


def pytest_unconfigure(config):
  del config
  if _CACHE_MADE_HERE is not None:
    shutil.rmtree(_CACHE_MADE_HERE, ignore_errors=True)
