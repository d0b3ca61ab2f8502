"""The absl main every experiment script shares: flags, config, workdir, process setup.

scripts/<name>.py is

    from credit_jax.experiments import cli, <name>
    if __name__ == "__main__":
      cli.main(<name>)

and runs as `python3 scripts/<name>.py --config=configs/<name>.py[:variant]
--workdir=DIR [--config.<field>=VALUE ...]`. A config that cannot run stops before any
computation with `error: config.<field>: ...` and exit status 2.
"""
from __future__ import annotations

import sys
from types import ModuleType

from absl import app, flags
from ml_collections import config_flags

from credit_jax import launch
from credit_jax.algos import ConfigError


def main(experiment: ModuleType) -> None:
  """Defines --config and --workdir, parses them and runs `experiment`; exits when done.

  Args:
    experiment: a module of credit_jax.experiments (`num_seeds`, `run`).
  """
  name = experiment.__name__.rsplit(".", 1)[-1]
  config_flag = config_flags.DEFINE_config_file(
      "config", None, f"Config file with a variant: configs/{name}.py[:variant].")
  workdir_flag = flags.DEFINE_string(
      "workdir", None, "Directory for metrics, figures, summary.json and summary.md.")
  flags.mark_flags_as_required(["config", "workdir"])

  def _main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = config_flag.value
    # Before any JAX computation: XLA reads its flags when the backend starts.
    launch.configure_process(num_seeds=experiment.num_seeds(config))
    try:
      experiment.run(config, workdir_flag.value, log=print)   # validates first
    except ConfigError as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(2)

  app.run(_main)
