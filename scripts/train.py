"""Trains one recipe from an ml_collections config file, resuming from its workdir.

  python3 scripts/train.py --config=configs/ppo_cartpole.py --workdir=/tmp/ppo
  python3 scripts/train.py --config=configs/grpo_keychain.py:small --workdir=/tmp/g \
      --config.seeds=8 --config.lr=1e-3

Writes into --workdir: metrics.jsonl, tensorboard/, checkpoints/ (with config.json),
learning_curve.png and summary.json. Running the same command again resumes from the
newest checkpoint. All logic lives in credit_jax.algos.runner.
"""
import os
import re
import sys

# jaxlib 0.10's XLA CPU runtime was seen to wedge for good (every thread idle, the result
# never ready) running vmapped multi-seed training programs scheduled by its
# concurrency-optimised scheduler (16 vmapped PPO seeds, second call). Turning that
# scheduler off avoids it but costs ~1.5x at one seed, so it is turned off only for
# multi-seed runs asked for on the command line. It must happen before jax starts.
_SEEDS = re.search(r"--config\.seeds[= ](\d+)", " ".join(sys.argv))
if (_SEEDS and int(_SEEDS.group(1)) > 1
    and "concurrency_optimized_scheduler" not in os.environ.get("XLA_FLAGS", "")):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " "
                             "--xla_cpu_enable_concurrency_optimized_scheduler=false")

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
