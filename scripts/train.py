"""Trains one recipe from an ml_collections config file, resuming from its workdir.

  python3 scripts/train.py --config=configs/ppo_cartpole.py --workdir=/tmp/ppo
  python3 scripts/train.py --config=configs/grpo_keychain.py:small --workdir=/tmp/g \
      --config.seeds=8 --config.lr=1e-3
  python3 scripts/train.py --config=configs/ppo_cartpole.py --workdir=/tmp/u \
      --config.env_name=UmbrellaChain-bsuite --config.env_kwargs.chain_length=30

Writes into --workdir: metrics.jsonl, tensorboard/, checkpoints/ (with config.json),
learning_curve.png and summary.json. Running the same command again resumes from the
newest checkpoint that restores. `--config.env_kwargs.NAME=VALUE` sets any option
`cj.envs.make` accepts for the configured env. With several local devices the seeds are
split over them (on a CPU: `JAX_NUM_CPU_DEVICES=2 python3 scripts/train.py ...
--config.seeds=8`). Over several processes or hosts, run the same command in each with
`--distributed` (SLURM, Open MPI, Cloud TPU) or `--coordinator_address=HOST:PORT
--num_processes=N --process_id=I` and a --workdir they share; process 0 writes the
metrics, plots and summary. All logic lives in credit_jax/runtime/run.py.

Exit codes: 0 done; 2 bad config or command line, or the workdir is in use by another run;
3 non-finite loss, or no checkpoint restores; 4 the watchdog found the run hung;
128 + N stopped by signal N (SIGINT 130, SIGTERM 143) after saving a checkpoint.
"""
import os
import sys

import cpu_affinity
import distributed  # before credit_jax is imported: see that module for why

# Several processes (hosts) when the command line asks for them (--distributed, or
# --coordinator_address with --num_processes and --process_id).
distributed.initialize_or_exit(sys.argv)

from absl import app, flags, logging  # pylint: disable=g-import-not-at-top,g-bad-import-order
from ml_collections import config_flags

from credit_jax.runtime import checkpoint, launch, run, watchdog, workdir
from credit_jax import fast_paths
from credit_jax.algos import ConfigError

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
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  config = _CONFIG.value
  # Process-wide XLA options from the parsed config. Importing credit_jax (gymnax) has
  # started JAX, so when options must be added this re-executes the process with them.
  # (A bad seed count is named by the config check below.)
  launch.configure_process(num_seeds=max(1, int(config.seeds)))
  logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  fast = _FAST_PATHS.value
  fast_paths.set_enabled(not cpu_affinity.accelerator_present() if fast is None else fast)
  try:
    config = launch.apply_env_overrides(config)
    run.train_and_evaluate(
        config, _WORKDIR.value, log=print,
        watchdog=_WATCHDOG())
  except (ConfigError, workdir.WorkdirBusyError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  except (run.NonFiniteLossError, checkpoint.CheckpointError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(3)
  except run.Interrupted as e:
    print(f"stopped: {e}", file=sys.stderr)
    if e.abandoned:   # its chunk still runs in a thread: leave without Python's shutdown
      sys.stdout.flush()
      sys.stderr.flush()
      os._exit(128 + e.signum)  # pylint: disable=protected-access
    sys.exit(128 + e.signum)


if __name__ == "__main__":
  app.run(main, flags_parser=launch.make_flags_parser("config"))
