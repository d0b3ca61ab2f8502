"""Trains one recipe from an ml_collections config file, resuming from its workdir.

  python3 scripts/train.py --config=configs/ppo_cartpole.py --workdir=/tmp/ppo
  python3 scripts/train.py --config=configs/grpo_keychain.py:small --workdir=/tmp/g \
      --config.seeds=8 --config.lr=1e-3

Writes into --workdir: metrics.jsonl, tensorboard/, checkpoints/ (with config.json),
learning_curve.png and summary.json. Running the same command again resumes from the
newest checkpoint. With several local devices the seeds are split over them (on a CPU:
`JAX_NUM_CPU_DEVICES=2 python3 scripts/train.py ... --config.seeds=8`). Over several
processes or hosts, run the same command in each with `--distributed` (SLURM, Open MPI,
Cloud TPU) or `--coordinator_address=HOST:PORT --num_processes=N --process_id=I` and a
--workdir they share; process 0 writes the metrics, plots and summary. All logic lives
in credit_jax.algos.runner.
"""
import re
import sys

import cpu_affinity
import distributed  # before credit_jax is imported: see that module for why
import xla_cpu_flags  # before jax starts: see that module for why

# Multi-seed runs turn off XLA CPU's concurrency-optimised scheduler (a jaxlib 0.10 hang);
# the seed count is read from the command line because the flag must be set before jax
# starts, long before absl parses the config.
_SEEDS = re.search(r"--config\.seeds[= ](\d+)", " ".join(sys.argv))
xla_cpu_flags.disable_concurrency_scheduler(int(_SEEDS.group(1)) if _SEEDS else 1)
# Several processes (hosts) when the command line asks for them (--distributed, or
# --coordinator_address with --num_processes and --process_id).
try:
  distributed.initialize_from_argv(sys.argv)
except ValueError as _e:
  print(f"error: {_e}", file=sys.stderr)
  sys.exit(2)

from absl import app, flags, logging  # pylint: disable=g-import-not-at-top,g-bad-import-order
from ml_collections import config_flags

from credit_jax import fast_paths
from credit_jax.algos import ConfigError, runner

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, optionally with a variant: configs/<name>.py[:variant].")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints and metrics.")
_FAST_PATHS = flags.DEFINE_bool(
    "fast_paths", None, "credit_jax.fast_paths, CPU speed-ups (see that module); default "
    "on when no accelerator is present, --nofast_paths turns them off.")
flags.mark_flags_as_required(["config", "workdir"])
distributed.define_flags(flags)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  fast = _FAST_PATHS.value
  fast_paths.set_enabled(not cpu_affinity.accelerator_present() if fast is None else fast)
  try:
    runner.train_and_evaluate(_CONFIG.value, _WORKDIR.value, log=print)
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  except runner.NonFiniteLossError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(3)


if __name__ == "__main__":
  app.run(main)
