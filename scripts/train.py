"""Trains one recipe from an ml_collections config file, resuming from its workdir.

  python3 scripts/train.py --config=configs/ppo_cartpole.py --workdir=/tmp/ppo
  python3 scripts/train.py --config=configs/grpo_keychain.py:small --workdir=/tmp/g \
      --config.seeds=8 --config.lr=1e-3

Writes into --workdir: metrics.jsonl, tensorboard/, checkpoints/ (with config.json),
learning_curve.png and summary.json. Running the same command again resumes from the
newest checkpoint. All logic lives in credit_jax.algos.runner.
"""
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from credit_jax.algos import ConfigError, runner

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Config file, optionally with a variant: configs/<name>.py[:variant].")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for checkpoints and metrics.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
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
