"""The absl main every experiment script shares: flags, config, workdir, process setup.

scripts/<name>.py is

    from credit_jax.experiments import cli, <name>
    if __name__ == "__main__":
      cli.main(<name>)

and runs as `python3 scripts/<name>.py --config=configs/<name>.py[:variant]
--workdir=DIR [--config.<field>=VALUE ...]`. A config that cannot run stops before any
computation with `error: config.<field>: ...` and exit status 2; every other failure is
one line too, with the exit status of scripts/train.py (credit_jax/runtime/cli.py;
`--debug`: the traceback).

Like scripts/train.py, the main turns `credit_jax.fast_paths` on when JAX runs on a CPU
(`--nofast_paths`: off; the figures in the README were made with them on), and arms a
watchdog (credit_jax/runtime/watchdog.py): an experiment logs a line after each compiled cell,
and if no line comes for `--watchdog_first_s` seconds at the start, or later for the
larger of `--watchdog_floor_s` and 10x the longest gap so far, the process prints every
thread's stack and the XLA setting to try, and exits with status 4 instead of hanging.
"""
from __future__ import annotations

from types import ModuleType

from absl import app, flags
from ml_collections import config_flags

from credit_jax.runtime import cli, launch, watchdog, workdir

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
  fast_flag = flags.DEFINE_bool(
      "fast_paths", None, "credit_jax.fast_paths, CPU speed-ups (see that module); default "
      "on when JAX runs on a CPU, --nofast_paths: off.")
  watchdog_options = watchdog.define_flags(flags, "logged line", floor_s=900.0)
  flags.mark_flags_as_required(["config", "workdir"])

  def _main(argv):
    if len(argv) > 1:
      cli.fail(f"unexpected arguments: {argv[1:]}", cli.EXIT_USAGE)
    config = cli.config_value(config_flag, "config")
    # Before any JAX computation: XLA reads its flags when the backend starts.
    cli.guard(lambda: launch.configure_process(num_seeds=experiment.num_seeds(config)))
    cli.quiet_library_logs()
    import jax  # pylint: disable=g-import-not-at-top
    from credit_jax import fast_paths
    fast = fast_flag.value
    fast_paths.set_enabled(jax.default_backend() == "cpu" if fast is None else fast)
    dog = watchdog.Watchdog(
        watchdog_options(),
        describe=lambda: (f"{name} in {workdir_flag.value}: rerun the same command; it "
                          f"resumes from what the workdir holds (finished cells, and the "
                          f"chunks of a cell where the study saves them)."),
        advice=launch.hang_advice)
    log = watchdog.heartbeat_log(dog, lambda line: print(line, flush=True))

    def body():
      workdir.prepare(workdir_flag.value)   # a file, or not writable: exit 2
      with dog:
        experiment.run(config, workdir_flag.value, log=log)   # validates first
    cli.guard(body)

  app.run(_main, flags_parser=cli.parse_flags)
