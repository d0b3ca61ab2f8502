"""Process setup for the test session: the XLA flags every entry point gets, XLA's CPU
backend at and optimisation level 0.

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
"""
import importlib.util
import os

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

# Scripts the tests start import this checkout's credit_jax, not whatever the
# environment's install points at (an editable install of another checkout, or a stale
# one, made such tests fail for reasons outside the code: stop 53's note).
_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
