"""Starting JAX's multi-process runtime from a script's command line, before jax runs.

`jax.distributed.initialize` must run before any JAX computation, and importing
credit_jax runs one (gymnax computes a constant at import). So a script calls this first,
with the process's argv, and defines the same flags for absl (`define_flags`):

  import distributed                      # before anything imports credit_jax
  distributed.initialize_from_argv(sys.argv)

  --distributed                      detect the cluster (SLURM, Open MPI, Cloud TPU, ...)
  --coordinator_address=HOST:PORT    process 0's address and a free port, with
  --num_processes=N --process_id=I   for every process (e.g. I = 0 .. N-1 by hand)

Every process runs the same command (same config, same --workdir on a shared file
system). On CPUs the processes talk through gloo (`jax_cpu_collectives_implementation`),
set here before the runtime starts.

The XLA options of credit_jax/runtime/launch.py for multi-seed runs are set here too, before jax
starts: a multi-process run always splits several seeds, and the options apply only if
set before the backend starts. launch.py is loaded from its file, because importing the
credit_jax package starts JAX.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import re
from typing import Optional, Sequence

FLAG_NAMES = ("distributed", "coordinator_address", "num_processes", "process_id")


def _value(argv: Sequence[str], name: str) -> Optional[str]:
  """`--name=V` / `--name V` from argv (the last one wins), or None."""
  found = None
  for i, arg in enumerate(argv):
    match = re.fullmatch(rf"--{name}(?:=(.*))?", arg)
    if match:
      if match.group(1) is not None:
        found = match.group(1)
      elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
        found = argv[i + 1]
      else:
        found = ""
  return found


def parse_argv(argv: Sequence[str]) -> Optional[dict]:
  """The `jax.distributed.initialize` arguments that argv asks for, or None (one process).

  Raises ValueError for an incomplete explicit set (all of --coordinator_address,
  --num_processes and --process_id, or none of them).
  """
  auto = _value(argv, "distributed")
  explicit = {k: _value(argv, k) for k in FLAG_NAMES[1:]}
  given = {k: v for k, v in explicit.items() if v is not None}
  if given and len(given) != len(explicit):
    missing = sorted(set(explicit) - set(given))
    raise ValueError(f"--coordinator_address, --num_processes and --process_id go "
                     f"together; missing {', '.join('--' + m for m in missing)}")
  if given:
    try:
      return {"coordinator_address": given["coordinator_address"],
              "num_processes": int(given["num_processes"]),
              "process_id": int(given["process_id"])}
    except ValueError:
      raise ValueError(f"--num_processes and --process_id must be integers, got "
                       f"{given['num_processes']!r} and {given['process_id']!r}") from None
  if auto is not None and auto.lower() not in ("false", "0", "no"):
    return {}
  return None


def _launch_module():
  """credit_jax/runtime/launch.py, loaded without importing the credit_jax package."""
  package = importlib.util.find_spec("credit_jax")
  path = os.path.join(package.submodule_search_locations[0], "runtime", "launch.py")
  spec = importlib.util.spec_from_file_location("_credit_jax_launch_standalone", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def initialize_from_argv(argv: Sequence[str]) -> bool:
  """Starts `jax.distributed` if argv asks for it; True if it did. Call before jax runs."""
  kwargs = parse_argv(argv)
  if kwargs is None:
    return False
  # At least two seeds: one or more on each device of each process.
  _launch_module().configure_process(num_seeds=max(2, kwargs.get("num_processes", 2)))
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(**kwargs)
  return True


def initialize_or_exit(argv: Sequence[str]) -> bool:
  """`initialize_from_argv`, ending the process with status 2 and a one-line error when
  the distributed flags are inconsistent (what every entry point does with them)."""
  try:
    return initialize_from_argv(argv)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


def define_flags(flags_module) -> None:
  """Defines the flags above on absl's `flags` so it accepts them (already acted on)."""
  flags_module.DEFINE_bool("distributed", False, "Start jax.distributed, detecting the "
                           "cluster (SLURM, Open MPI, Cloud TPU).")
  flags_module.DEFINE_string("coordinator_address", None, "host:port of process 0, for "
                             "jax.distributed without cluster detection.")
  flags_module.DEFINE_integer("num_processes", None, "Processes in the run (with "
                              "--coordinator_address).")
  flags_module.DEFINE_integer("process_id", None, "This process's index, 0 .. "
                              "num_processes - 1 (with --coordinator_address).")
