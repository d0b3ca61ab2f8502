"""Process setup for the test session: the XLA flags every entry point gets.

Tests run vmapped multi-seed programs in the pytest process itself, so they get the XLA
CPU setting of credit_jax/launch.py (the jaxlib 0.10 wedge, BUILD.md "Hang soak") like
scripts/train.py does, from the same table. launch.py is loaded by file path: importing
the credit_jax package imports gymnax, which starts a JAX backend, after which XLA_FLAGS
could no longer apply. Subprocesses started by tests inherit the setting.
"""
import importlib.util
import os

_PATH = os.path.join(os.path.dirname(__file__), os.pardir, "credit_jax", "launch.py")
_spec = importlib.util.spec_from_file_location("_credit_jax_launch_for_tests", _PATH)
_launch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_launch)
# Two or more seeds: the setting for multi-seed programs; no re-execution of pytest.
_launch.configure_process(num_seeds=2, reexec=False)
