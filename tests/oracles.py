"""Importing the independent references (bsuite, rlax, mctx) that tests compare against.

`import_oracle(name)` skips the test when the oracle's distribution is not installed, as
`pytest.importorskip` does, but when it IS installed a failing import is an error: a
skip would then hide a broken environment (a directory on sys.path that shadows the
package, as scripts/bsuite.py once shadowed bsuite) and the oracle would silently never
run.
"""
import importlib
import importlib.metadata

import pytest


def import_oracle(module: str):
  """The module `module` (dotted), or a skip if its top-level distribution is missing."""
  top = module.split(".")[0]
  try:
    importlib.metadata.distribution(top)
  except importlib.metadata.PackageNotFoundError:
    return pytest.importorskip(module)
  return importlib.import_module(module)
