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
