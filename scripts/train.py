"""Trains one recipe from an ml_collections config file, resuming from its workdir.

  python3 scripts/train.py --config=configs/ppo_cartpole.py --workdir=/tmp/ppo
  python3 scripts/train.py --config=configs/grpo_keychain.py:small --workdir=/tmp/g \
      --config.seeds=8 --config.lr=1e-3
  python3 scripts/train.py --config=configs/ppo_cartpole.py --workdir=/tmp/u \
      --config.env_name=bsuite/UmbrellaChain-v0 --config.env_kwargs.chain_length=30

Writes into --workdir: metrics.jsonl, tensorboard/, checkpoints/ (with config.json),
learning_curve.png and summary.json. Running the same command again resumes from the
newest checkpoint that restores. `--config.env_kwargs.NAME=VALUE` sets any option
`cj.envs.make` accepts for the configured env. With several local devices the seeds are
split over them (on a CPU: `JAX_NUM_CPU_DEVICES=2 python3 scripts/train.py ...
--config.seeds=8`). Over several processes or hosts, run the same command in each with
`--distributed` (SLURM, Open MPI, Cloud TPU) or `--coordinator_address=HOST:PORT
--num_processes=N --process_id=I` and a --workdir they share; process 0 writes the
metrics, plots and summary. All logic lives in credit_jax/runtime/run.py.

A finished run trains longer when the same command raises `--config.num_updates` (or
`--config.total_timesteps`): it continues from its last checkpoint, exactly as one longer
run would (refused where the longer run compiles differently, e.g. `anneal_lr=True`).
Besides the newest checkpoints, the one with the best `config.best_metric` (default the
recipe's first headline metric, e.g. success) is kept in checkpoints_best/ for
scripts/evaluate.py --checkpoint=best. A warning line says when the entropy or gradient
norm has been 0 for 5 updates or the loss exploded.

Every failure is one line on stderr (`--debug`: the traceback) and an exit status:
0 done; 1 an unexpected error (a bug); 2 bad command line, config or workdir (a typo'd
field, a bad variant, a missing config file, a workdir that is a file, not writable, or in
use by another run); 3 non-finite loss, or no checkpoint restores; 4 the watchdog found
the run hung; 5 a checkpoint or metrics write failed (disk full): rerun to resume;
128 + N stopped by signal N (SIGINT 130, SIGTERM 143) after saving a checkpoint
(credit_jax/runtime/cli.py).
"""
import os
import sys

import cpu_affinity
import distributed  # before credit_jax is imported: see that module for why

# Several processes (hosts) when the command line asks for them (--distributed, or
# --coordinator_address with --num_processes and --process_id).
distributed.initialize_or_exit(sys.argv)

from absl import app, flags  # pylint: disable=g-import-not-at-top,g-bad-import-order
from ml_collections import config_flags

from credit_jax.runtime import cli, launch, watchdog   # none of them runs JAX

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, optionally with a variant: configs/<name>.py[:variant].")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints and metrics.")
_FAST_PATHS = flags.DEFINE_bool(
    "fast_paths", None, "credit_jax.fast_paths, CPU speed-ups (see that module); default "
    "on when no accelerator is present, --nofast_paths turns them off.")
_WATCHDOG = watchdog.define_flags(flags, "chunk", floor_s=300.0)
flags.mark_flags_as_required(["config", "workdir"])
distributed.define_flags(flags)


def main(argv):
  if len(argv) > 1:
    cli.fail(f"unexpected arguments: {argv[1:]}", cli.EXIT_USAGE)
  config = cli.config_value(_CONFIG, "config")
  # The optional XLA CPU setting for the config's seed count (credit_jax/runtime/launch.py);
  # it applies only if the config file started no JAX backend. A bad seed count is named
  # by the config check below.
  launch.configure_process(num_seeds=max(1, int(config.get("seeds", 1))))
  cli.quiet_library_logs()  # orbax logs every save at INFO, and its errors at length
  from credit_jax import fast_paths  # pylint: disable=g-import-not-at-top
  from credit_jax.runtime import run  # pylint: disable=g-import-not-at-top
  fast = _FAST_PATHS.value
  fast_paths.set_enabled(not cpu_affinity.accelerator_present() if fast is None else fast)
  try:
    cli.guard(lambda: run.train_and_evaluate(
        launch.apply_env_overrides(config), _WORKDIR.value, log=print,
        watchdog=_WATCHDOG()), passthrough=(run.Interrupted,))
  except run.Interrupted as e:
    print(f"stopped: {e}", file=sys.stderr)
    if e.abandoned:   # its chunk still runs in a thread: leave without Python's shutdown
      sys.stdout.flush()
      sys.stderr.flush()
      os._exit(128 + e.signum)  # pylint: disable=protected-access
    sys.exit(128 + e.signum)


if __name__ == "__main__":
  app.run(main, flags_parser=launch.make_flags_parser("config"))
