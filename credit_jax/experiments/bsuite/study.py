"""Experiment: bsuite's umbrella_length, umbrella_distract, memory_len, memory_size and
discounting_chain, run with bsuite's settings and scored as bsuite scores them (per
seed), then pushed past bsuite's lengths.

  python3 scripts/bsuite.py --config=configs/bsuite.py:small --workdir=DIR
  python3 scripts/bsuite.py --config=configs/bsuite.py:full --workdir=DIR

Environments: credit_jax/envs/bsuite.py (bsuite's definitions on gymnax's JAX chains;
its docstring lists what differs from gymnax's versions and why). Settings (`:bsuite`):
bsuite's sweeps (23 chain / memory lengths and distractor counts 1..100; 17 context
sizes 1..40; mapping seeds 0..19) and its episodes per setting (10,000; 1,000 for
discounting_chain); `:full` adds lengths 300 and 1000 and a discounting chain with
horizons up to 1000 (`discounting_chain_long`). Methods: any of
credit_jax/experiments/bsuite/specs.py (PPO with an MLP or a GRU, GRPO, DQN, REINFORCE), all
through `credit_jax.algos.make_train` with the same episodes per update.

Cells (specs.py): for every method one per bucket of settings (`config.buckets`: lengths
1-10, 12-30, 40-100; the mapping seeds together), the bucket's settings x seeds vmapped
in one compiled program on a padded chain (runner.py says how each run gets its
setting); with `config.buckets = ()` one per setting. A finished cell writes
`cells/<method>/<cell>.json`; a rerun of the same command skips it (a killed run
resumes at the first unfinished cell), and `--config.methods` / `--config.experiments`
overrides run a study in pieces on one workdir; the summary covers every cell saved
there that belongs to the config.

Writes: summary.json / summary.md (per experiment and method the mean of the per-seed
bsuite scores, each seed scored as bsuite scores one run, with the pooled score
labelled beside it; per method the longest length with >= `level` right choices /
recalls and the discounting bonus-chain rate, with Wilson intervals; the umbrella
critic probe), results.csv / results.md, scores.png (bars), curves_<experiment>.png
(per-setting learning curves), critic_probe.png, bsuite_format/<method>.csv (rows
bsuite's own analysis can score, a `seed` column to score one seed at a time).
"""
from __future__ import annotations

import json
import os
from typing import Dict, List

import ml_collections

from credit_jax.config import ConfigError, require
from credit_jax.algos import validate_config as validate_recipe
from credit_jax.experiments import report
from credit_jax.experiments.bsuite import analysis, outputs, runner, scoring, specs

__all__ = ["default_config", "methods_of", "num_seeds", "run", "validate_config"]

MEMORY_EXPERIMENTS = ("memory_len", "memory_size")


def default_config() -> ml_collections.ConfigDict:
  """The `:small` study (configs/bsuite.py: `:bsuite` is bsuite's sweep, `:full` adds
  lengths 300 and 1000); every field documented here."""
  c = ml_collections.ConfigDict()
  c.seeds = 3                   # seeds per setting (vmapped with the cell's settings)
  c.seed = 0                    # base RNG seed
  c.methods = ("ppo_mlp_g0.99_l0.95",
               "grpo_k5")       # method names, see specs.py ("dqn", "reinforce",
                                # ...), run on every experiment
  c.memory_methods = ("ppo_gru_g0.99_l0.95",)  # run on memory_len and memory_size
                                # only (the recurrent policies, as the plan)
  c.experiments = ("umbrella_length", "umbrella_distract", "memory_len", "memory_size",
                   "discounting_chain")  # any of specs.EXPERIMENTS
  c.umbrella_lengths = (1, 3, 10, 30)  # chain lengths (bsuite: 23 of them, 1..100)
  c.umbrella_distractors = (1, 10, 30, 100)  # umbrella_distract's n_distractor (bsuite:
                                       # the same 23 values; chain_length 20)
  c.memory_lengths = (1, 3, 10, 30)    # memory lengths (bsuite: the same 23)
  c.memory_bits = (1, 3, 10, 40)       # memory_size's num_bits (bsuite: 17 of them,
                                       # 1..40; memory_length 2)
  c.buckets = (10, 30, 100)            # settings in (b[i-1], b[i]] run in
                                       # one padded program, each past the last alone;
                                       # () = one program per setting
  c.discounting_mapping_seeds = scoring.MAPPING_SEEDS  # bsuite's 0..19
  c.discounting_long_horizons = (1, 3, 10, 30, 100, 300, 1000)  # discounting_chain_long
  c.episodes = ml_collections.ConfigDict(
      {"umbrella_length": 2_000, "umbrella_distract": 2_000, "memory_len": 2_000,
       "memory_size": 2_000, "discounting_chain": 500,
       "discounting_chain_long": 1_000})  # episodes per setting (bsuite: 10k; 1k for
                                          # discounting_chain)
  c.episodes_per_update = 20    # whole episodes per update, every method (divides
                                # each experiment's episodes)
  c.lrs = ml_collections.ConfigDict({"ppo": 1e-3, "grpo": 3e-3, "reinforce": 3e-3,
                                     "dqn": 1e-3})
  c.dqn = ml_collections.ConfigDict(  # method "dqn" (specs.dqn_config; bsuite's DQN:
      {"batch_size": 32,              # batch 32, replay 10,000, epsilon 0.05,
       "buffer_size": 10_000,         # gamma 0.99, a gradient step every env step,
       "epsilon": 0.05,               # a target copy every 4 of them)
       "gamma": 0.99,
       "steps_per_grad": 4,           # env steps (padding included) per gradient step
       "target_tau": 1.0})            # Polyak step per cycle (1: a hard copy)
  c.ppo_ent_coef = 0.01         # PPO's entropy bonus
  c.hidden_sizes = (64, 64)     # MLP widths (GRU: its input encoder)
  c.gru_size = 64               # GRU width
  c.level = 0.9                 # right-choice level for "longest length at level"
  c.final_fraction = 0.1        # final window: the last 10% of a run's updates
  c.chunk_updates = 10          # updates per compiled call (gcd with a run's updates;
                                # the critic probe is taken after each)
  c.curve_smooth = 10           # updates averaged per point of a learning curve
  c.new_cells = True            # False: train nothing, summarise the saved cells
  return c


def num_seeds(config) -> int:
  """Runs one compiled program vmaps at most (seeds x settings sharing a cell)."""
  widest = 1
  for x in config.experiments:
    for m in methods_of(x, config):
      widest = max(widest, max(len(c.settings) for c in specs.cells_of(x, config, m)))
  return int(config.seeds) * widest


def methods_of(experiment: str, config) -> tuple:
  """The methods run on `experiment`: `config.methods`, and `config.memory_methods` on
  the memory experiments."""
  extra = tuple(config.memory_methods) if experiment in MEMORY_EXPERIMENTS else ()
  return tuple(config.methods) + extra


def validate_config(config) -> None:
  """Raises ConfigError naming the first field of the study config that cannot run."""
  for f in ("seeds", "episodes_per_update", "chunk_updates", "curve_smooth"):
    require(int(config[f]) >= 1, f, f"must be >= 1, got {config[f]}")
  for f in ("level", "final_fraction"):
    require(0.0 < float(config[f]) <= 1.0, f, f"must lie in (0, 1], got {config[f]}")
  if not config.experiments or len(set(config.experiments)) != len(config.experiments):
    raise ConfigError("config.experiments: need >= 1 experiment, none twice")
  every = tuple(config.methods) + tuple(config.memory_methods)
  if not config.methods or len(set(every)) != len(every):
    raise ConfigError("config.methods: need >= 1 method, none twice (with "
                      "config.memory_methods)")
  for x in config.experiments:
    if x not in specs.EXPERIMENTS:
      raise ConfigError(f"config.experiments: unknown {x!r}; known: {specs.EXPERIMENTS}")
    settings = specs.settings_of(x, config)
    if not settings or min(settings) < (0 if x.startswith("discounting") else 1):
      raise ConfigError(f"config: {x} needs settings >= 1 (lengths) / >= 0 (mapping "
                        f"seeds), got {settings}")
    if x not in config.episodes:
      raise ConfigError(f"config.episodes: no episode count for {x}")
    n, per = int(config.episodes[x]), int(config.episodes_per_update)
    if n < per or n % per:
      raise ConfigError(f"config.episodes_per_update: {per} must divide "
                        f"config.episodes.{x} = {n}")
  require(int(config.dqn.steps_per_grad) >= 1, "dqn.steps_per_grad",
          f"must be >= 1, got {config.dqn.steps_per_grad}")
  if any(int(b) < 1 for b in config.buckets):
    raise ConfigError(f"config.buckets: bounds must be >= 1, got {tuple(config.buckets)}")
  for m in every:
    family = specs.family_of(m)
    if family not in config.lrs:
      raise ConfigError(f"config.lrs: no learning rate for family {family!r} ({m})")
    for x in [x for x in config.experiments if m in methods_of(x, config)]:
      cell = specs.cells_of(x, config, m)[-1]
      try:
        validate_recipe(specs.recipe_config(m, cell, config))
      except ConfigError as e:
        raise ConfigError(f"config.methods: {m} on {cell.name}: {e}") from e


def _read(path: str) -> dict:
  with open(path) as f:
    return json.load(f)


def _write(path: str, obj) -> None:
  tmp = f"{path}.tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f)
  os.replace(tmp, path)


def _matches(saved: dict, cell: specs.Cell, config) -> bool:
  """Whether a saved record is this cell's run under this config."""
  seeds = int(config.seeds)
  return (saved.get("settings") == [s for s in cell.settings for _ in range(seeds)]
          and len(saved["episodes"][0]) == specs.num_updates(cell.experiment, config)
          and saved.get("episode_len") == cell.episode_len
          and saved.get("padded", False) == (cell.field is not None)
          and saved.get("config_key") == _config_key(saved["method"], config))


def _config_key(method: str, config) -> str:
  """What a saved cell must share with the config to be reused (besides its settings)."""
  fam = specs.family_of(method)
  key = {"lr": float(config.lrs[fam]), "seed": int(config.seed),
         "per_update": int(config.episodes_per_update),
         "ent": float(config.ppo_ent_coef),
         "hidden": list(config.hidden_sizes), "gru": int(config.gru_size)}
  if fam == "dqn":
    key["dqn"] = config.dqn.to_dict()
  return json.dumps(key, sort_keys=True)


def run(config, workdir: str, log=print) -> dict:
  """Runs (resuming) every cell, writes the results and figures; returns the summary."""
  validate_config(config)
  workdir = os.path.abspath(workdir)
  watch = report.Stopwatch()
  records: Dict[str, Dict[str, List[dict]]] = {}
  missing = []
  todo = [(x, cell, m) for x in config.experiments for m in methods_of(x, config)
          for cell in specs.cells_of(x, config, m)]
  for i, (x, cell, method) in enumerate(todo):
    folder = os.path.join(workdir, "cells", method)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{cell.name}.json")
    tag = f"cell {i + 1}/{len(todo)} {method} {cell.name}"
    rec = None
    if os.path.exists(path):
      saved = _read(path)
      if _matches(saved, cell, config):
        rec = saved
        log(f"{tag}: finished before, skipped")
      else:
        log(f"{tag}: the saved cell has other settings; run again")
    if rec is None and not config.new_cells:
      missing.append({"method": method, "cell": cell.name})
      log(f"{tag}: not run (new_cells=False)")
      continue
    if rec is None:
      rec = runner.train_cell(method, cell, config, log, tag)
      rec["config_key"] = _config_key(method, config)
      _write(path, rec)
      last = (sum(r[-1] for r in rec["successes"])
              / max(sum(r[-1] for r in rec["episodes"]), 1))
      log(f"{tag} done: final-update success {last:.2f} | compile {rec['compile_s']:.0f}s run {rec['run_s']:.0f}s | study "
          f"{watch.seconds():.0f}s")
    records.setdefault(method, {}).setdefault(x, []).append(rec)
  summary = {"methods": analysis.summarize(records, config), "missing": missing,
             "config": config.to_dict(), "wall_seconds": watch.seconds(),
             "load_average": list(os.getloadavg()),
             "random_agent_scores": scoring.RANDOM_SCORES}
  if records:
    outputs.write_results(summary["methods"], workdir)
    outputs.write_bsuite_format(records, workdir)
    outputs.score_figure(summary["methods"], workdir)
    outputs.probe_figure(summary["methods"], workdir)
    outputs.curve_figures(records, config, workdir)
  return report.write_summary(workdir, summary, _markdown(summary))


def _markdown(summary: dict) -> str:
  lines = ["# bsuite: " + ", ".join(summary["config"]["experiments"]), ""]
  lines += outputs.markdown_tables(summary["methods"]) if summary["methods"] else []
  if summary["missing"]:
    lines += ["", f"Not run: {len(summary['missing'])} cells (new_cells=False)."]
  lines += ["", report.wall_time(summary["wall_seconds"])]
  return "\n".join(lines)
