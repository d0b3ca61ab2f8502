"""Running recipes as programs: the chunked, checkpointed, resumable run loop and what
it leans on.

  run         `train_and_evaluate(config, workdir)`: compiled chunks, progress, resume
  extend      a finished run trained longer: which config changes may resume
  divergence  warnings for a collapsed or exploding run
  evaluate    `evaluate_run(workdir)`: a checkpoint's policy on fresh episodes
  cli         one-line errors and exit statuses of every entry point
  launch      process setup for entry points (XLA flags, flag parsing, env overrides)
  checkpoint  orbax CheckpointManager save / restore with the config beside it, and the
              best checkpoint by a metric
  metrics     metrics.jsonl, TensorBoard events, progress lines, learning curves
  watchdog    ends a chunk that stops making progress, with advice
  interrupts  SIGINT / SIGTERM as a clean stop after the current chunk
  workdir     the run directory: lock, writability, fault checks
  parallel    seeds sharded over devices and hosts
"""

# The public names are the submodules above (importing this package imports none of
# them: `from credit_jax.runtime import run` loads the one it names).
__all__ = [
    "checkpoint", "cli", "divergence", "evaluate", "extend", "interrupts", "launch",
    "metrics", "parallel", "run", "watchdog", "workdir",
]
