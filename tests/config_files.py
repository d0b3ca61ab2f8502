"""Loading `configs/<name>.py`, `scripts/<name>.py` and `benchmarks/<name>.py` in tests: no folder is a
package, so each file is loaded by path (as scripts/*.py's `--config=` flag does)."""
import importlib.util
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
CONFIG_DIR = os.path.join(ROOT, "configs")
SCRIPT_DIR = os.path.join(ROOT, "scripts")
BENCH_DIR = os.path.join(ROOT, "benchmarks")


def load_file(path: str, module_name: str):
  """The Python file at `path`, executed as a module named `module_name`."""
  spec = importlib.util.spec_from_file_location(module_name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def load_script(name: str):
  """`scripts/<name>.py` as a module (its `main` is not run)."""
  return load_file(os.path.join(SCRIPT_DIR, name + ".py"), f"scripts_{name}")


def load_benchmark(name: str):
  """`benchmarks/<name>.py` as a module (its `main` is not run)."""
  return load_file(os.path.join(BENCH_DIR, name + ".py"), f"benchmarks_{name}")


def load_config_module(name: str):
  """`configs/<name>.py` as a module (for files with more than `get_config`)."""
  return load_file(os.path.join(CONFIG_DIR, name + ".py"), f"configs_{name}")


def load_config(name: str, variant=None):
  """`configs/<name>.py`'s `get_config(variant)` (a ConfigDict)."""
  return load_config_module(name).get_config(variant)
