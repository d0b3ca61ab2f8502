"""The XLA CPU workaround for multi-seed runs, in one place, without importing jax.

jaxlib 0.10's XLA CPU runtime was seen to wedge for good (every thread idle, the result
never ready) running vmapped multi-seed training programs scheduled by its
concurrency-optimised scheduler (16 vmapped PPO seeds, second call of the compiled
program). Turning that scheduler off avoids it. XLA parses `XLA_FLAGS` when jax starts
its first backend and aborts the whole process on a flag it does not know, so the flag is
only added for jaxlib versions known to accept it, and the version is read from the
installed package's metadata: importing jax here could start a backend too early.

  import xla_cpu_flags                        # before anything imports jax
  xla_cpu_flags.disable_concurrency_scheduler(num_seeds)

Used by scripts/train.py and scripts/bench_ppo.py.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
from typing import MutableMapping, Optional, Tuple

FLAG_NAME = "xla_cpu_enable_concurrency_optimized_scheduler"
FLAG = f"--{FLAG_NAME}=false"
# (major, minor) jaxlib releases seen to accept FLAG (and to need it). Others are left
# alone: an unknown flag aborts the process.
KNOWN_JAXLIB = ((0, 10),)


def jaxlib_version() -> Optional[Tuple[int, int]]:
  """(major, minor) of the installed jaxlib, or None if it is missing or unparsable."""
  try:
    version = importlib.metadata.version("jaxlib")
  except importlib.metadata.PackageNotFoundError:
    return None
  match = re.match(r"(\d+)\.(\d+)", version)
  return (int(match.group(1)), int(match.group(2))) if match else None


def disable_concurrency_scheduler(num_seeds: int,
                                  environ: Optional[MutableMapping[str, str]] = None,
                                  version: Optional[Tuple[int, int]] = None) -> bool:
  """Appends FLAG to `environ["XLA_FLAGS"]` for a multi-seed run; True if it did.

  Args:
    num_seeds: seeds the run vmaps (the hang was only seen with more than one; the
      flag costs time at one seed, so one-seed runs keep the default scheduler).
    environ: the environment to edit (default `os.environ`); call before jax starts.
    version: jaxlib (major, minor) (default: the installed one).

  Leaves XLA_FLAGS alone when it already sets the scheduler either way, or when the
  jaxlib version is not in `KNOWN_JAXLIB`.
  """
  if not isinstance(num_seeds, int) or num_seeds < 1:
    raise ValueError(f"num_seeds must be an int >= 1, got {num_seeds!r}")
  environ = os.environ if environ is None else environ
  version = jaxlib_version() if version is None else version
  flags = environ.get("XLA_FLAGS", "")
  if num_seeds <= 1 or FLAG_NAME in flags or version not in KNOWN_JAXLIB:
    return False
  environ["XLA_FLAGS"] = (flags + " " + FLAG).strip()
  return True
