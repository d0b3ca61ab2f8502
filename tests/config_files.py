"""Loading `configs/<name>.py` in tests: configs/ is a folder of files, not a package, so
each file is loaded by path (as scripts/*.py's `--config=` flag does)."""
import importlib.util
import os

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "configs")


def load_config_module(name: str):
  """`configs/<name>.py` as a module (for files with more than `get_config`)."""
  spec = importlib.util.spec_from_file_location(
      f"configs_{name}", os.path.join(CONFIG_DIR, name + ".py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def load_config(name: str, variant=None):
  """`configs/<name>.py`'s `get_config(variant)` (a ConfigDict)."""
  return load_config_module(name).get_config(variant)
