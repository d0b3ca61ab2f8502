"""Restricting a process to a few CPU cores before jax starts, without importing jax.

Why: XLA's CPU runtime runs the independent operations of a program on a thread pool as
large as the set of cores the process may use, and it sizes that pool once, when jax
creates its CPU client. A program made of many tiny operations, such as tree search
(every simulation is a few dozen gathers and scatters on a tree of a few MB), loses
by being spread out: each operation's data moves between the cores' private L2 caches,
and the idle pool threads spin. On the 2-core development machine, bench_search.py's
value-leaf search (128 roots, machine otherwise idle) took 4.4 / 14.8 ms at 64 / 256
simulations on one core and 6.6 / 26.6 ms (12.5 / 51.6 ms of CPU time) on both.

  import cpu_affinity                    # before anything imports jax
  cpu_affinity.restrict_to_cores(1)

Linux only (`os.sched_setaffinity`); elsewhere it warns and leaves the process alone.
Used by benchmarks/bench_search.py and benchmarks/bench_ppo.py.
"""
from __future__ import annotations

import glob
import os
import re
import sys
from typing import Callable, Optional, Sequence, Set

# Device files of the accelerators jax can use (NVIDIA, AMD, TPU). With one present the
# host side only feeds the device, and pinning it would only slow that down.
_ACCELERATOR_FILES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/accel[0-9]*", "/dev/vfio/[0-9]*")


def accelerator_present() -> bool:
  """True if `JAX_PLATFORMS` asks for a non-CPU platform or an accelerator device exists."""
  platforms = os.environ.get("JAX_PLATFORMS", "")
  if platforms:
    return any(p.strip() not in ("", "cpu") for p in platforms.split(","))
  return any(glob.glob(pattern) for pattern in _ACCELERATOR_FILES)


def restrict_to_cores(num_cores: int,
                      get_affinity: Optional[Callable[[int], Set[int]]] = None,
                      set_affinity: Optional[Callable[[int, Set[int]], None]] = None
                      ) -> Optional[Set[int]]:
  """Restricts this process to the first `num_cores` cores it may use now.

  Args:
    num_cores: cores to keep; 0 keeps them all (a no-op).
    get_affinity, set_affinity: `os.sched_getaffinity` / `os.sched_setaffinity` (swapped
      in tests).

  Returns:
    The cores the process is now restricted to, or None when nothing changed (0 asked,
    already within `num_cores`, or no affinity API on this platform).
  """
  if not isinstance(num_cores, int) or num_cores < 0:
    raise ValueError(f"num_cores must be an int >= 0, got {num_cores!r}")
  get_affinity = get_affinity or getattr(os, "sched_getaffinity", None)
  set_affinity = set_affinity or getattr(os, "sched_setaffinity", None)
  if num_cores == 0:
    return None
  if get_affinity is None or set_affinity is None:
    print("cpu_affinity: this platform cannot restrict cores; using all of them",
          file=sys.stderr)
    return None
  allowed = sorted(get_affinity(0))
  if len(allowed) <= num_cores:
    return None
  keep = set(allowed[:num_cores])
  set_affinity(0, keep)
  return keep


def restrict_from_argv(argv: Sequence[str], default: int) -> Optional[Set[int]]:
  """Applies a script's `--cpu_cores=N` (or `--cpu_cores N`; `default` when absent) before
  absl parses flags, unless an accelerator is present. Returns what `restrict_to_cores`
  returns. The script must still define the `cpu_cores` flag for absl."""
  match = re.search(r"--cpu_cores[= ](\d+)", " ".join(argv))
  if accelerator_present():
    return None
  return restrict_to_cores(int(match.group(1)) if match else default)
