"""Token agents against the number of turns: warm start, then RL, on held-out prompts.

  python3 scripts/token_study.py --config=configs/token_study.py:small --workdir=DIR

For each number of turns k (`turns`), `seeds` seeds of the token-agent recipe
(`credit_jax/algos/token_agent.py`) on ToolArith-v0 (1-digit numbers by default) side by
side in one compiled program: the supervised warm start (in `init`), a measurement,
`num_updates` RL updates (compiled in chunks of `chunk_updates`, one log line each), a
measurement. A measurement is `eval_episodes` fresh episodes per seed of the held-out
half of the tasks (`split` 2; training uses split 1), greedy (argmax tokens) and sampled
(temperature 1). Success rates are pooled over seeds with a Wilson interval (95%) and
the spread over seeds is a t interval of the seed means. Every k uses the same recipe
settings, so the tokens per update grow with k (the horizon is the env's time limit).

`compare_turns`: at those k the estimators of `compare` (GRPO against PPO with GAE on
the LM's value head, by default) run with the same prompts x samples x horizon per
update and the same updates: equal rollout tokens.

Writes into the workdir: results.jsonl (one record per (estimator, k): per-seed counts,
training curves, wall and CPU seconds; a rerun skips finished records), summary.json,
summary.md and success_vs_turns.png.
"""
from __future__ import annotations

import json
import os
import time

import jax
import ml_collections
import numpy as np

from credit_jax.algos import token_agent
from credit_jax.config import ConfigError
from credit_jax.experiments import report

RESULTS = "results.jsonl"
__all__ = ["RESULTS", "default_config", "num_seeds", "run", "run_cell", "summarise",
           "validate_config"]


def default_config() -> ml_collections.ConfigDict:
  """The full study: k = 1, 2, 4, 8, 16, 5 seeds, GRPO vs PPO at k = 4."""
  c = ml_collections.ConfigDict()
  c.recipe = token_agent.default_config()   # the recipe's settings for every cell
  c.recipe.num_updates = 100     # RL updates per cell after the warm start
  # Warm-start steps: at 150 (the recipe's default, enough for k <= 2) the warm start
  # left k = 4 at 0.11 held-out greedy success (token accuracy 0.85); 600 took it to 0.68.
  c.recipe.sft_steps = 600
  c.turns = (1, 2, 4, 8, 16)     # numbers of calculator turns k (the horizon dial)
  c.estimator = "grpo"           # the estimator of the success-vs-turns curve
  c.compare = ("grpo", "ppo")    # estimators compared at equal tokens
  c.compare_turns = (4,)         # the k at which they are compared
  c.seeds = 5                    # seeds per cell, vmapped
  c.seed = 0                     # base RNG seed
  c.eval_episodes = 256          # held-out episodes per seed and measurement
  c.chunk_updates = 25           # RL updates per compiled call (one log line each)
  return c


def num_seeds(config) -> int:
  return int(config.seeds)


def validate_config(config) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  if not config.turns or any(int(k) < 1 for k in config.turns):
    raise ConfigError(f"config.turns: must be k >= 1 each, got {config.turns}")
  for f in ("seeds", "eval_episodes", "chunk_updates"):
    if int(config[f]) < 1:
      raise ConfigError(f"config.{f}: must be >= 1, got {config[f]}")
  if config.recipe.num_updates % config.chunk_updates:
    raise ConfigError(f"config.chunk_updates: {config.chunk_updates} must divide "
                      f"recipe.num_updates={config.recipe.num_updates}")
  for name in (config.estimator,) + tuple(config.compare):
    if name not in token_agent.ESTIMATORS:
      raise ConfigError(f"config.compare: {name!r} is not one of {token_agent.ESTIMATORS}")
  token_agent.validate_config(_recipe(config, int(config.turns[0]), config.estimator))


def _recipe(config, turns, estimator):
  c = ml_collections.ConfigDict(config.recipe.to_dict())
  c.env_kwargs.num_turns = int(turns)
  c.estimator = estimator
  return c


def _measure(c, episodes):
  greedy = token_agent.make_evaluate(c, num_episodes=episodes)
  sampled = token_agent.make_evaluate(c, greedy=False, num_episodes=episodes)

  def measure(params, key):
    g, s = greedy(params, key), sampled(params, jax.random.fold_in(key, 1))
    return {"greedy": g["success"], "sampled": s["success"],
            "call_accuracy": g["call_accuracy"], "calls": g["calls"]}
  return jax.vmap(measure)


def run_cell(config, turns, estimator, log):
  """One (estimator, k) cell over all seeds; returns its record."""
  c = _recipe(config, turns, estimator)
  train = token_agent.make_train(c)
  measure = _measure(c, int(config.eval_episodes))
  keys = jax.random.split(jax.random.key(int(config.seed)), int(config.seeds))
  eval_keys = jax.random.split(jax.random.key(int(config.seed) + 1), int(config.seeds))
  wall, cpu = time.perf_counter(), time.process_time()
  init = jax.jit(jax.vmap(train.init))
  chunk = jax.jit(jax.vmap(lambda s: train.run(s, None, int(config.chunk_updates))))
  evaluate = jax.jit(measure)
  state = init(keys)
  before = jax.device_get(evaluate(state.params, eval_keys))
  log(f"{estimator} k={turns}: warm start done (sft accuracy "
      f"{np.asarray(state.aux['sft_accuracy']).mean():.3f}), held-out greedy success "
      f"{before['greedy'].mean():.3f} ({time.perf_counter() - wall:.0f} s)")
  curves = []
  for i in range(c.num_updates // int(config.chunk_updates)):
    state, m = chunk(state)
    m = jax.device_get(m)
    curves.append({k: np.asarray(m[k]).mean(0) for k in ("success", "call_accuracy")})
    log(f"{estimator} k={turns}: update {(i + 1) * int(config.chunk_updates)}/"
        f"{c.num_updates}, sampled train success {m['success'][:, -1].mean():.3f} "
        f"({time.perf_counter() - wall:.0f} s)")
  after = jax.device_get(evaluate(state.params, eval_keys))
  n = int(config.eval_episodes)
  record = {
      "estimator": estimator, "turns": int(turns), "seeds": int(config.seeds),
      "episodes_per_seed": n, "horizon": train.env_steps_per_update
      // (c.num_tasks * c.group_size), "tokens_per_update": train.env_steps_per_update,
      "num_updates": c.num_updates, "sft_steps": c.sft_steps,
      "sft_accuracy": np.asarray(state.aux["sft_accuracy"]).tolist(),
      "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
      "train_success": np.concatenate([x["success"] for x in curves]).tolist(),
      "train_call_accuracy": np.concatenate([x["call_accuracy"] for x in curves]).tolist()}
  for when, res in (("before", before), ("after", after)):
    for kind in ("greedy", "sampled"):
      record[f"{when}_{kind}"] = np.round(np.asarray(res[kind]) * n).astype(int).tolist()
    record[f"{when}_call_accuracy"] = np.asarray(res["call_accuracy"]).tolist()
    record[f"{when}_calls"] = np.asarray(res["calls"]).tolist()   # per episode, greedy
  return record


def _read(path):
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def _rate(counts, n):
  counts = np.asarray(counts)
  low, high = report.wilson_interval(int(counts.sum()), n * len(counts))
  mean, half = report.t_interval(counts / n)
  return {"rate": counts.sum() / (n * len(counts)), "wilson": (low, high),
          "seed_mean": mean, "seed_half": half}


def run(config, workdir: str, log=print):
  validate_config(config)
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, RESULTS)
  watch = report.Stopwatch()
  cells = [(config.estimator, int(k)) for k in config.turns]
  cells += [(e, int(k)) for k in config.compare_turns for e in config.compare
            if (e, int(k)) not in cells]
  done = {(r["estimator"], r["turns"]) for r in _read(path)}
  for estimator, turns in cells:
    if (estimator, turns) in done:
      log(f"{estimator} k={turns}: already in {RESULTS}, skipped")
      continue
    record = run_cell(config, turns, estimator, log)
    with open(path, "a") as f:
      f.write(json.dumps(record) + "\n")
  return summarise(config, workdir, _read(path), watch.seconds())


def summarise(config, workdir, records, seconds):
  """summary.json, summary.md and success_vs_turns.png from the records."""
  rows, summary = [], {"cells": []}
  for r in sorted(records, key=lambda r: (r["estimator"], r["turns"])):
    n = r["episodes_per_seed"]
    cell = {k: r[k] for k in ("estimator", "turns", "horizon", "tokens_per_update",
                              "num_updates", "wall_s", "cpu_s")}
    for when in ("before", "after"):
      for kind in ("greedy", "sampled"):
        cell[f"{when}_{kind}"] = _rate(r[f"{when}_{kind}"], n)
    summary["cells"].append(cell)

    def fmt(x):
      return (f"{x['rate']:.3f} [{x['wilson'][0]:.3f}, {x['wilson'][1]:.3f}] "
              f"(seeds {x['seed_mean']:.2f} +- {x['seed_half']:.2f})")
    rows.append([r["estimator"], r["turns"], r["horizon"],
                 f"{r['tokens_per_update'] * r['num_updates']:.3g}",
                 fmt(cell["before_greedy"]), fmt(cell["after_greedy"]),
                 fmt(cell["after_sampled"]), f"{r['wall_s']:.0f} / {r['cpu_s']:.0f}"])
  lines = ["# Token agents: held-out success against the number of turns", "",
           f"ToolArith-v0 ({config.recipe.env_kwargs.num_digits}-digit numbers), "
           f"{config.seeds} seeds x {config.eval_episodes} held-out episodes per "
           f"measurement; rate [Wilson 95%] (seed mean +- t 95%).", ""]
  lines += report.table(["estimator", "turns k", "horizon (tokens)", "RL tokens",
                         "warm start, greedy", "after RL, greedy", "after RL, sampled",
                         "wall / CPU s"], rows)
  lines += ["", report.wall_time(seconds)]
  _figure(summary["cells"], config, workdir)
  return report.write_summary(workdir, summary, "\n".join(lines))


def _figure(cells, config, workdir):
  fig, axes = report.figure(1, 1, figsize=(6.0, 4.0))
  ax = axes[0, 0]
  curves = [(config.estimator, "before_greedy", "warm start (greedy)", "o--")]
  curves += [(e, "after_greedy", f"warm start + {e} (greedy)", "s-")
             for e in dict.fromkeys((config.estimator,) + tuple(config.compare))]
  for estimator, field, label, style in curves:
    pts = sorted((c["turns"], c[field]) for c in cells if c["estimator"] == estimator)
    if not pts:
      continue
    ks = np.array([k for k, _ in pts])
    rate = np.array([x["rate"] for _, x in pts])
    low = np.array([x["wilson"][0] for _, x in pts])
    high = np.array([x["wilson"][1] for _, x in pts])
    ax.errorbar(ks, rate, yerr=[rate - low, high - rate], fmt=style, capsize=3,
                label=label)
  guess = 10.0 ** -int(config.recipe.env_kwargs.num_digits)
  ax.axhline(guess, color="0.5", ls=":", lw=1,
             label=f"answering a random number ({guess:g})")
  ax.set_xscale("log", base=2)
  ax.set_xlabel("calculator turns k")
  ax.set_ylabel("held-out success")
  ax.set_ylim(-0.02, 1.02)
  ax.legend(fontsize=8)
  report.save_figure(fig, workdir, "success_vs_turns.png")
