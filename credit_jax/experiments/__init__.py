"""Experiments: each one module with `default_config()` and `run(config, workdir, log)`.

    from credit_jax.experiments import variance_scaling
    config = variance_scaling.default_config()
    config.horizons = (10, 30)
    summary = variance_scaling.run(config, "/tmp/vs")   # also in /tmp/vs/summary.json

An experiment module exports:
  default_config()          the full-size config, every field commented; configs/<name>.py
                            starts from it and adds variants ("small", "smoke", "gpu");
  validate_config(config)   raises `credit_jax.algos.ConfigError` naming the field;
  num_seeds(config)         the seeds (or cells) it vmaps, for `launch.configure_process`;
  run(config, workdir, log=print) -> summary
                            runs it, writes metrics.jsonl (where it has per-point records),
                            PNG figures, summary.json (the returned dict) and summary.md;
and the pieces worth importing on their own (a measurement, a record builder, a plot).
Files are written through `report`; `scripts/<name>.py` is `cli.main(<module>)`.

Importing these modules imports jax and numpy and nothing else: matplotlib is imported
when a figure is drawn, and no global state (plot backend, XLA flags) is touched.
"""
EXPERIMENTS = ("variance_scaling", "grpo_degradation", "tree_search", "hindsight",
               "critique", "prm", "curriculum", "horizon_study", "horizon_remedies",
               "bsuite")
