"""Running recipes as programs: the chunked, checkpointed, resumable run loop and what
it leans on.

  run         `train_and_evaluate(config, workdir)`: compiled chunks, progress, resume
  launch      process setup for entry points (XLA flags, flag parsing, env overrides)
  checkpoint  orbax CheckpointManager save / restore with the config beside it
  metrics     metrics.jsonl, TensorBoard events, progress lines, learning curves
  watchdog    ends a chunk that stops making progress, with advice
  interrupts  SIGINT / SIGTERM as a clean stop after the current chunk
  workdir     the run directory: lock, config, fault checks
  parallel    seeds sharded over devices and hosts
"""
