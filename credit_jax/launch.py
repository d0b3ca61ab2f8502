"""Process setup for entry points, from the parsed config, in one place.

Library modules never touch process-wide settings (see docs/ARCHITECTURE.md). Entry
points (scripts/train.py, the experiment scripts, the sweep runner, benchmarks) call
`configure_process` at the top of their `main`, after absl has parsed the flags and the
config and before anything runs a JAX computation:

    def main(argv):
      config = _CONFIG.value
      launch.configure_process(num_seeds=int(config.seeds))
      ...

What it sets, and why: jaxlib 0.10's XLA CPU runtime was seen to wedge for good (every
thread parked, the result never ready) on vmapped multi-seed programs. `xla_flags_for`
returns the XLA flags that avoid it on the installed jaxlib, and nothing for jaxlib
versions not known to accept them (XLA aborts the whole process on a flag it does not
know). XLA reads `XLA_FLAGS` once, when JAX creates its first backend; when a backend
already exists and the flags are missing, the process re-executes itself with them (the
same argv), so the setting never silently fails to apply.

This module imports no JAX at import time; it only reads jaxlib's version from the
installed package metadata.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
import sys
from typing import List, MutableMapping, Optional, Sequence, Tuple

# (flag name, value) pairs applied on CPU for multi-seed programs, per jaxlib (major, minor).
# A flag already named in XLA_FLAGS (either way) is left as the user set it.
# jaxlib 0.10: both the concurrency-optimised thunk scheduler and Eigen's intra-op thread
# pool off. The wedge was seen once each in scripts/hindsight.py part b (GRPO cell) and
# with 16 vmapped PPO seeds; reruns with one of the two off finished (issue 23; other
# projects saw eigen=false remove it: 12 passes / 0 hangs against 2 / 14). Our soak
# (scripts/soak.py, BUILD.md "Hang soak", jaxlib 0.10.2, 2 cores) saw 0 wedges in 11
# default runs, so it cannot say which flag is needed; with both off, 20 of 20 runs of
# hindsight.py part b and 20 of 20 16-seed PPO runs finished, none hung. CPU time per
# run was the same with and without them (within the noise).
_CPU_FLAGS = {
    (0, 10): (("xla_cpu_enable_concurrency_optimized_scheduler", "false"),
              ("xla_cpu_multi_thread_eigen", "false")),
}
# Set in the re-executed child so that it never re-executes again.
_REEXEC_MARK = "CREDIT_JAX_LAUNCH_REEXEC"


def jaxlib_version() -> Optional[Tuple[int, int]]:
  """(major, minor) of the installed jaxlib, or None if it is missing or unparsable."""
  try:
    version = importlib.metadata.version("jaxlib")
  except importlib.metadata.PackageNotFoundError:
    return None
  match = re.match(r"(\d+)\.(\d+)", version)
  return (int(match.group(1)), int(match.group(2))) if match else None


def xla_flags_for(num_seeds: int, version: Optional[Tuple[int, int]] = None,
                  existing: str = "") -> List[str]:
  """The `--name=value` XLA flags to add for a run of `num_seeds` vmapped seeds.

  Args:
    num_seeds: seeds (or cells) the program vmaps; one-seed runs get no flag (the wedge
      was only seen with more than one, and the flags cost time at one).
    version: jaxlib (major, minor); default the installed one.
    existing: the current XLA_FLAGS; flags it already names are not added again.
  """
  if not isinstance(num_seeds, int) or isinstance(num_seeds, bool) or num_seeds < 1:
    raise ValueError(f"num_seeds must be an int >= 1, got {num_seeds!r}")
  version = jaxlib_version() if version is None else version
  if num_seeds <= 1:
    return []
  return [f"--{name}={value}" for name, value in _CPU_FLAGS.get(version, ())
          if name not in existing]


def _backend_started() -> bool:
  """True when JAX has already created a backend (XLA_FLAGS can no longer change)."""
  if "jax" not in sys.modules:
    return False
  try:
    from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
    return bool(xla_bridge.backends_are_initialized())
  except (ImportError, AttributeError):   # a jax without this private helper: assume yes
    return True


def configure_process(num_seeds: int = 1, *,
                      environ: Optional[MutableMapping[str, str]] = None,
                      version: Optional[Tuple[int, int]] = None,
                      argv: Optional[Sequence[str]] = None,
                      reexec: bool = True) -> List[str]:
  """Adds the XLA flags for `num_seeds` vmapped seeds to XLA_FLAGS; returns those added.

  Call before any JAX computation. If a JAX backend already exists and flags had to be
  added, the process re-executes itself with `argv` (default `sys.argv`) and the new
  environment, unless `reexec` is False, in which case it raises RuntimeError.
  """
  environ = os.environ if environ is None else environ
  existing = environ.get("XLA_FLAGS", "")
  added = xla_flags_for(num_seeds, version, existing)
  if not added:
    return []
  environ["XLA_FLAGS"] = " ".join([existing] + added).strip()
  if environ is os.environ and _backend_started():
    if not reexec or os.environ.get(_REEXEC_MARK):
      raise RuntimeError(
          f"JAX started its backend before credit_jax.launch.configure_process could set "
          f"XLA_FLAGS={environ['XLA_FLAGS']!r}; call it before any JAX computation, or "
          f"start Python with that XLA_FLAGS")
    os.environ[_REEXEC_MARK] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    args = list(sys.argv if argv is None else argv)
    os.execv(sys.executable, [sys.executable] + args)
  return added
