"""Runs a grid of configs (a sweep) in as few compiles as possible, resuming from --workdir.

  python3 scripts/sweep.py --config=configs/sweeps/ppo_cartpole_lr.py:small --workdir=/tmp/sw
  python3 scripts/sweep.py --config=configs/sweeps/grpo_keychain_group.py --workdir=... \
      --shard=0/4          # this job runs every 4th compiled call (a SLURM array task)

The sweep config names a base config and axes (configs/sweeps/); traced hyperparameters
are vmapped with the seeds in one compiled call, every other field compiles its own.
Writes into --workdir: results.csv, results.md, <metric>_vs_<axis>.png, and per cell its
metrics.jsonl and TensorBoard events; the same command again resumes (finished cells are
skipped, a half-finished call continues from its checkpoint). Over several processes, run
the same command in each with `--distributed` or `--coordinator_address=HOST:PORT
--num_processes=N --process_id=I` (a shared --workdir): each call's runs are split over
all their devices. All logic lives in credit_jax/sweep/. A failure is one line and the
exit status of scripts/train.py (credit_jax/runtime/cli.py; `--debug`: the traceback).
"""
import importlib.util
import os
import re
import sys

import cpu_affinity
import distributed  # before credit_jax is imported: see that module for why

distributed.initialize_or_exit(sys.argv)

from absl import app, flags  # pylint: disable=g-import-not-at-top,g-bad-import-order
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Sweep config file: configs/sweeps/<name>.py[:variant].")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints and results.")
_FAST_PATHS = flags.DEFINE_bool(
    "fast_paths", None, "credit_jax.fast_paths, CPU speed-ups (see that module); default "
    "on when no accelerator is present (as scripts/train.py), --nofast_paths: off.")
_SHARD = flags.DEFINE_string("shard", "0/1", "i/n: run only the compiled calls with "
                             "index % n == i (independent jobs sharing --workdir).")
flags.mark_flags_as_required(["config", "workdir"])
distributed.define_flags(flags)


def _standalone(name: str):
  """credit_jax/runtime/<name>.py loaded on its own (launch.py, watchdog.py, cli.py: none
  imports the package): importing the credit_jax package runs a JAX computation (gymnax, at import),
  which would start the backend before configure_process could set XLA_FLAGS."""
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "credit_jax",
                      "runtime", f"{name}.py")
  spec = importlib.util.spec_from_file_location(f"_credit_jax_{name}", path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module   # dataclasses look their module up there
  spec.loader.exec_module(module)
  return module


_watchdog = _standalone("watchdog")
_cli = _standalone("cli")
_WATCHDOG = _watchdog.define_flags(flags, "progress line", floor_s=900.0)


def _runs_upper_bound(node) -> int:
  """The product of every axis's length (the most cells one compiled call vmaps)."""
  count = 1
  for key in node.keys():
    value = node[key]
    count *= (_runs_upper_bound(value) if hasattr(value, "keys")
              else max(1, len(value) if isinstance(value, (tuple, list)) else 1))
  return count


def main(argv):
  if len(argv) > 1:
    _cli.fail(f"unexpected arguments: {argv[1:]}", _cli.EXIT_USAGE)
  config = _cli.config_value(_CONFIG, "config")
  match = re.fullmatch(r"(\d+)/(\d+)", _SHARD.value)
  if not match:
    _cli.fail(f"--shard must be i/n, got {_SHARD.value!r}", _cli.EXIT_USAGE)
  # Before JAX starts its backend (importing credit_jax below): it logs at INFO.
  _cli.quiet_library_logs()
  launch = _standalone("launch")
  launch.configure_process(
      num_seeds=int(config.seeds) * _runs_upper_bound(config.get("axes") or {}))
  from credit_jax import sweep  # pylint: disable=g-import-not-at-top
  from credit_jax import fast_paths
  fast = _FAST_PATHS.value
  fast_paths.set_enabled(not cpu_affinity.accelerator_present() if fast is None else fast)
  # The sweep logs a line per compiled chunk and per call: each line tells the watchdog
  # the run is alive; a silence past the limit dumps every thread's stack and exits 4.
  dog = _watchdog.Watchdog(
      _WATCHDOG(),
      describe=lambda: (f"sweep in {_WORKDIR.value}: rerun the same command; finished "
                        f"cells are skipped and a half-finished call resumes from its "
                        f"checkpoint."),
      advice=launch.hang_advice)
  log = _watchdog.heartbeat_log(dog, lambda line: print(line, flush=True))

  from credit_jax.runtime import workdir  # pylint: disable=g-import-not-at-top

  def body():
    workdir.prepare(_WORKDIR.value)   # a file, or not writable: one line, exit 2
    with dog:
      sweep.run_sweep(config, _WORKDIR.value, shard=(int(match[1]), int(match[2])),
                      log=log)
  _cli.guard(body)   # one line and the exit status of credit_jax/runtime/cli.py


if __name__ == "__main__":
  app.run(main, flags_parser=_cli.parse_flags)
