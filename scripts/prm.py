"""Process reward models: dense PRM shaping, gaming, and mitigations (issue 19).

  python3 scripts/prm.py --config=configs/prm.py:small --workdir=/tmp/prm_s

Writes prm_training.png, prm_labels.png, prm_compounding.png, summary.json and
summary.md into --workdir. All logic lives in credit_jax/experiments/prm.py. (The shared
experiment main, credit_jax/experiments/cli.py, is not on this branch; this is its minimum.)
"""
import sys

from absl import app, flags
from ml_collections import config_flags

from credit_jax import launch
from credit_jax.algos import ConfigError
from credit_jax.experiments import prm

_CONFIG = config_flags.DEFINE_config_file("config", None, "configs/prm.py[:variant]")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for figures and summaries.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  launch.configure_process(num_seeds=prm.num_seeds(_CONFIG.value))
  try:
    prm.run(_CONFIG.value, _WORKDIR.value, log=print)
  except ConfigError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
  app.run(main)
