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
Each study is a package `experiments/<study>/` whose `__init__` re-exports its `study.py`.
Files are written through `report`; `scripts/<name>.py` is `cli.main(<module>)`.

Importing these modules imports jax and numpy and nothing else: matplotlib is imported
when a figure is drawn, and no global state (plot backend, XLA flags) is touched.
"""
import importlib

# The registry and its look-up, the shared pieces (`report`: files and figures, `cli`:
# the scripts' entry point) and one package per study. Importing this package imports
# none of them: `from credit_jax.experiments import prm` loads the one it names.
__all__ = [
    "EXPERIMENTS", "bsuite", "cli", "critique", "curriculum", "grpo_degradation",
    "horizon", "learned_credit", "module", "prm", "probes", "relabel", "report",
    "step_credit", "token_study", "tree_search", "variance_scaling",
]

# Script / config name -> the module that runs it (configs/<name>.py, scripts/<name>.py).
EXPERIMENTS = {
    "variance_scaling": "credit_jax.experiments.variance_scaling",
    "grpo_degradation": "credit_jax.experiments.grpo_degradation",
    "tree_search": "credit_jax.experiments.tree_search",
    "relabel": "credit_jax.experiments.relabel",
    "critique": "credit_jax.experiments.critique",
    "prm": "credit_jax.experiments.prm",
    "curriculum": "credit_jax.experiments.curriculum",
    "horizon_study": "credit_jax.experiments.horizon",
    "horizon_remedies": "credit_jax.experiments.horizon.remedies",
    "bsuite": "credit_jax.experiments.bsuite",
    "probes": "credit_jax.experiments.probes",
    "token_study": "credit_jax.experiments.token_study",
    "learned_credit": "credit_jax.experiments.learned_credit",
}


def module(name: str):
  """The module of experiment `name` (a key of EXPERIMENTS, or a module under
  credit_jax.experiments); raises ImportError when there is none."""
  return importlib.import_module(EXPERIMENTS.get(name, f"credit_jax.experiments.{name}"))
