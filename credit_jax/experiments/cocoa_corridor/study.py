"""Experiment: COCOA's corridor experiment, reproduced at a reduced protocol.

Meulemans et al., "Would I have gotten that reward? Long-term credit assignment by
counterfactual contribution analysis" (NeurIPS 2023, arXiv 2306.16803), the experiment of
their repository's `configs/canonical_conveyorlength_performance.py` and
`sweeps/performance_asymptotic_learnt.yaml` (seijin-kobayashi/cocoa; read, not copied):
on `ConveyorTreasure-v0` (their corridor, credit_jax/envs/conveyor_treasure.py) at lengths
L, every method is REINFORCE (credit_jax/algos/reinforce.py) with their settings:

  8 episodes per update; an MLP 64-64 with ReLU; AdamW (weight decay 1e-4, no gradient
  clip); epsilon 0.05 exploration while training (the policy acts and learns as
  (1 - eps) pi + eps / A, `explore_epsilon`), none at evaluation; entropy bonus
  0.03 (20 / (L - 3))^0.683 (0.03 at L = 23, 0.01 at L = 103); undiscounted returns.

Methods (`METHODS`), each a configuration of that recipe and its registry features:
  "reinforce"   returns-to-go, no baseline, lr 3e-4;
  "advantage"   returns-to-go minus a learned value (their "Advantage"), lr 1e-3;
  "hca_return"  return-conditioned HCA (`config.hca`), not their HCA+ (which conditions
                on later states: not built here);
  "cocoa"       COCOA-reward (`config.cocoa`): the outcome of a step is the class of its
                reward (the two apple values and the treasure).
  "cocoa_exact" the same credit with the exact coefficients (`exact_credit.py`, an
                ablation: what the learned model costs), policy lr as "cocoa".
  Both hindsight models are their gated hypernetwork (`model = "gated"`, width 256),
  trained with AdamW at 3e-3, one full-batch step per update on the batch *before* it is
  credited (`fit_first`, their order), no clip; policy lr 3e-4.

Metric (theirs): a run's treasure fraction averaged over all its evaluations (at update 0,
every `eval_every` updates and at the end; `eval_episodes` fresh episodes each, no
exploration): an area under the learning curve. Reported as the mean +- s.e.m. over seeds.

Cells (method, L) are trained `seeds` at a time, vmapped in one compile, in chunks of
`eval_every` updates; after each chunk the state and the curve so far are saved under
`workdir/cells/`, so a killed run resumes where it stopped; a finished cell is read back.

The gradient part (`config.probe`, `probe.py`): first-state SNR, bias and variance of each
estimator against the exact DP gradient (credit_jax/exact.py) in their "shadow" mode.
"""
from __future__ import annotations

import json
import os
import pickle
import time
from typing import Callable, Dict

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax import nets, rollout
from credit_jax.algos import reinforce, train as train_lib
from credit_jax.experiments import report
from credit_jax.experiments.cocoa_corridor import exact_credit, probe
from credit_jax.experiments.cocoa_corridor.methods import (LABELS, METHODS, cell_config,
                                                         entropy_coef)

__all__ = ["METHODS", "cell_config", "combine", "default_config", "entropy_coef",
           "evaluate_fn", "num_seeds", "run", "run_cell", "validate_config"]

def default_config() -> ml_collections.ConfigDict:
  """The reproduction of docs/results/learned_credit.md; every field commented."""
  c = ml_collections.ConfigDict()
  c.methods = METHODS[:4]         # see the module doc ("cocoa_exact": an ablation)
  c.lengths = (23, 103)           # corridor lengths L (theirs: 23, 43, 63, 83, 103)
  c.seeds = 10                    # seeds per cell, vmapped (theirs: 30)
  c.seed = 0                      # base RNG seed (seed i: split i of it)
  c.updates = 3000                # updates per run (theirs: 10,000)
  c.episodes = 8                  # episodes per update (theirs)
  c.eval_every = 200              # updates between evaluations (theirs: 100)
  c.eval_episodes = 256           # episodes per evaluation (theirs: 512)
  c.hidden_sizes = (64, 64)       # the policy's MLP (theirs), ReLU
  c.value_sizes = ()              # Advantage's value torso ((): hidden_sizes, ours); their
                                  # critic: (256,), one hidden layer (an ablation)
  c.policy = "mlp"                # mlp (theirs) | tabular: a table over the observed cell
                                  # content and key (nets/tabular.py; no time feature)
  c.table_groups = ()             # tabular: the observation's one-hot groups it reads
                                  # (0: the cell's content, 1: the key held; (): both)
  c.min_prob = 0.0                # tabular: each action's least probability (an entropy
                                  # floor; 0: none); a saturated table row gets no
                                  # gradient from COCOA's all-action loss
  c.model = "gated"               # COCOA's model: gated (theirs) | tabular (a table over
                                  # those rows and the reward classes); HCA's stays gated
  c.epsilon = 0.05                # exploration while training (theirs)
  c.weight_decay = 1e-4           # AdamW's (optax's default, which they use)
  c.lrs = ml_collections.ConfigDict({"reinforce": 3e-4, "advantage": 1e-3,
                                     "hca_return": 3e-4, "cocoa": 3e-4,
                                     "cocoa_exact": 3e-4})  # policy lrs
  c.model_lr = 3e-3               # the hindsight models' AdamW rate (theirs)
  c.table_lr = 3e-2               # the tabular model's (Adam moves an entry ~lr per step)
  c.model_width = 256             # the gated hypernetwork's hidden units (theirs)
  c.fit_first = True              # the models' order: fit, then credit (theirs)
  c.progress_s = 60.0             # seconds between progress lines inside a cell (0: each chunk)
  c.probe = ml_collections.ConfigDict()
  c.probe.lengths = ()            # L of the shadow-mode gradient part ( (): skip it)
  c.probe.updates = 300           # shadow-mode updates (policy by the exact gradient)
  c.probe.every = 100             # updates between measurements
  c.probe.episodes = 8            # the batch each estimate is built from (theirs)
  c.probe.draws = 256             # batches of `episodes` per measurement
  c.probe.lr = 3e-4               # the shadow policy's rate
  c.probe.seeds = 3               # shadow runs per L, vmapped
  return c


def num_seeds(config) -> int:
  return int(config.seeds)


def validate_config(config) -> None:
  if config.policy not in ("mlp", "tabular"):
    raise ValueError(f"config.policy: must be mlp or tabular, got {config.policy!r}")
  if config.model not in ("gated", "tabular"):
    raise ValueError(f"config.model: must be gated or tabular, got {config.model!r}")
  if tuple(config.value_sizes) and config.policy != "mlp":
    raise ValueError(f"config.value_sizes: Advantage's own critic widths are an MLP-policy "
                     f"option, got policy {config.policy!r}")
  unknown = [m for m in config.methods if m not in METHODS]
  if unknown:
    raise ValueError(f"config.methods: unknown {unknown}; known: {METHODS}")
  for length in tuple(config.lengths) + tuple(config.probe.lengths):
    if int(length) < 4:
      raise ValueError(f"config.lengths: a corridor needs L >= 4, got {length}")
  if int(config.updates) % int(config.eval_every):
    raise ValueError(f"config.updates ({config.updates}) must be a multiple of "
                     f"config.eval_every ({config.eval_every})")


def evaluate_fn(cfg, episodes: int) -> Callable:
  """`(params [S, ...], key) -> (treasure [S], return [S])`: each seed's fraction of
  `episodes` fresh episodes that reached the treasure, and their mean return, acting with
  the plain policy (no exploration)."""
  env, env_params = train_lib.make_env(cfg)
  network, _ = train_lib.make_network(cfg, env, env_params,
                                      value_head=reinforce.needs_value(cfg))
  policy = nets.make_policy_fn(network, value=False)
  horizon = int(env.horizon)

  def one(params, key):
    traj = rollout.collect_episodes(env, env_params, policy, params, key, int(episodes),
                                    horizon)
    hit = jnp.any(traj.info["success"] & traj.valid, axis=0).astype(jnp.float32)
    ret = jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), axis=0)
    return hit.mean(), ret.mean()

  return jax.jit(lambda params, key: jax.vmap(one)(
      params, jax.random.split(key, jax.tree.leaves(params)[0].shape[0])))


def _cell_path(workdir: str, method: str, length: int, suffix: str) -> str:
  return os.path.join(workdir, "cells", f"{method}_L{length}.{suffix}")


def features_of(method: str, config) -> tuple:
  """The feature objects `method`'s recipe is given beside its config (registry)
  features: COCOA with exact coefficients (`exact_credit.ExactCocoa`)."""
  return (exact_credit.ExactCocoa(float(config.epsilon)),) if method == "cocoa_exact" else ()


def run_cell(method: str, length: int, config, workdir: str, log: Callable) -> Dict:
  """Trains one cell (or finishes / reads it back from `workdir/cells/`); returns its row:
  `curve` [E, S] treasure fraction at the updates `evals` [E], `auc` [S] each seed's
  mean over the evaluations, `train_success` [E - 1, S] (with exploration), wall times."""
  done_path = _cell_path(workdir, method, length, "json")
  if os.path.exists(done_path):
    return _read(done_path)
  cfg = cell_config(method, length, config)
  train = reinforce.make_train(cfg, features=features_of(method, config))
  every, n_chunks = int(config.eval_every), int(config.updates) // int(config.eval_every)
  evaluate = evaluate_fn(cfg, int(config.eval_episodes))
  chunk = jax.jit(jax.vmap(lambda s: train.run(s, None, every)))
  eval_key = jax.random.key(int(config.seed) + 7919 * int(length) + 1)
  part = _cell_path(workdir, method, length, "partial.pkl")
  t0 = time.time()
  if os.path.exists(part):
    with open(part, "rb") as f:
      saved = pickle.load(f)
    state, rows = jax.tree.map(jnp.asarray, saved["state"]), saved["rows"]
    log(f"{method} L={length}: resuming at update {len(rows['evals']) and rows['evals'][-1]}")
  else:
    keys = jax.random.split(jax.random.key(int(config.seed)), int(config.seeds))
    state = jax.jit(jax.vmap(train.init))(keys)
    hit, ret = evaluate(state.params, jax.random.fold_in(eval_key, 0))
    rows = {"evals": [0], "curve": [np.asarray(hit).tolist()],
            "returns": [np.asarray(ret).tolist()], "train_success": [], "wall_s": 0.0}
  progress = report.throttled(log, float(config.progress_s))
  for i in range(len(rows["evals"]), n_chunks + 1):
    tc = time.time()
    state, metrics = chunk(state)
    hit, ret = evaluate(state.params, jax.random.fold_in(eval_key, i))
    rows["evals"].append(i * every)
    rows["curve"].append(np.asarray(hit).tolist())
    rows["returns"].append(np.asarray(ret).tolist())
    rows["train_success"].append(np.asarray(metrics["success"]).mean(axis=1).tolist())
    rows["wall_s"] += time.time() - tc
    os.makedirs(os.path.dirname(part), exist_ok=True)
    with open(part + ".tmp", "wb") as f:
      pickle.dump({"state": jax.device_get(state), "rows": rows}, f)
    os.replace(part + ".tmp", part)
    progress(f"{method} L={length}: update {i * every}/{int(config.updates)}, treasure "
             f"{np.mean(hit):.3f} (seed mean), {rows['wall_s']:.0f} s")
  curve = np.asarray(rows["curve"])                                     # [E, S]
  out = {"method": method, "length": int(length), **rows,
         "auc": curve.mean(axis=0).tolist(), "final": curve[-1].tolist(),
         "seeds": int(config.seeds), "updates": int(config.updates),
         "env_steps_per_seed": int(config.updates) * int(config.episodes) * int(length),
         "session_wall_s": round(time.time() - t0, 1)}
  auc = np.asarray(out["auc"])
  log(f"{method} L={length}: run-averaged treasure {auc.mean():.3f} +- "
      f"{auc.std(ddof=1) / np.sqrt(auc.size) if auc.size > 1 else 0:.3f}, final "
      f"{np.mean(out['final']):.3f}, reached (final >= 0.5) "
      f"{int(np.sum(np.asarray(out['final']) >= 0.5))}/{auc.size}, {rows['wall_s']:.0f} s")
  _write(done_path, out)
  if os.path.exists(part):
    os.remove(part)
  return out


def _read(path):
  with open(path) as f:
    return json.load(f)


def _write(path, obj):
  with open(path + ".tmp", "w") as f:
    json.dump(obj, f)
  os.replace(path + ".tmp", path)


def sem(x) -> float:
  x = np.asarray(x, np.float64)
  return float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 else float("nan")


def _markdown(summary) -> str:
  lines = ["| L | method | run-averaged treasure (mean +- s.e.m.) | final treasure | seeds "
           "reaching it (final >= 0.5) | updates x episodes | wall s |",
           "|---|---|---|---|---|---|---|"]
  for r in summary["cells"]:
    auc, final = np.asarray(r["auc"]), np.asarray(r["final"])
    lines.append(f"| {r['length']} | {LABELS[r['method']]} | {auc.mean():.3f} +- "
                 f"{sem(auc):.3f} | {final.mean():.3f} | {int((final >= 0.5).sum())}/"
                 f"{final.size} | {r['updates']} x 8 | {r['wall_s']:.0f} |")
  for p in summary.get("probe", []):
    lines += ["", f"Shadow mode at L = {p['length']} (first state, dB):", "",
              "| estimator | SNR | bias | bias floor | variance |", "|---|---|---|---|---|"]
    for k, v in p["rows"].items():
      lines.append(f"| {k} | {v['snr_db']:.1f} | {v['bias_db']:.1f} | "
                   f"{v['bias_floor_db']:.1f} | {v['variance_db']:.1f} |")
    mass = p["rows"]["cocoa"]
    if "distractor_error" in mass:
      lines += ["", f"Learned COCOA's credit error per episode (reward units): distractor "
                f"steps {mass['distractor_error']:.4f}, pivotal steps "
                f"{mass['pivotal_error']:.4f}, against the exact pivotal credit "
                f"{mass['pivotal_credit']:.4f}"]
  return "\n".join(lines) + "\n"


def probe_figure(summary, workdir: str) -> None:
  """shadow_vs_length.png: each estimator's first-state SNR, bias and variance (dB) against
  L, and learned COCOA's distractor credit error beside the exact pivotal credit."""
  probes = sorted(summary.get("probe", []), key=lambda p: p["length"])
  if not probes:
    return
  ls = [p["length"] for p in probes]
  fig, axes = report.figure(1, 4, figsize=(17.0, 4.0))
  for ax, key in zip(axes[0], ("snr_db", "bias_db", "variance_db")):
    for name in probe.ESTIMATORS:
      ax.plot(ls, [p["rows"][name][key] for p in probes], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("corridor length L")
    ax.set_ylabel(key.replace("_db", " (dB re |g*|^2)"))
  axes[0, 0].legend(fontsize=7)
  ax = axes[0, 3]
  if all("distractor_error" in p["rows"]["cocoa"] for p in probes):
    for key in probe.MASS_KEYS:
      ax.plot(ls, [p["rows"]["cocoa"][key] for p in probes], marker="o", label=key)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("corridor length L")
    ax.set_ylabel("per episode, reward units")
    ax.set_title("learned COCOA's credit error")
    ax.legend(fontsize=7)
  report.save_figure(fig, workdir, "shadow_vs_length.png")


def figures(summary, workdir: str) -> None:
  """treasure_vs_length.png (the paper-style figure), curves_L<max>.png and, with shadow
  rows, shadow_vs_length.png."""
  probe_figure(summary, workdir)
  cells = summary["cells"]
  if not cells:
    return
  fig, axes = report.figure()
  ax = axes[0, 0]
  for m in dict.fromkeys(r["method"] for r in cells):
    rs = sorted((r for r in cells if r["method"] == m), key=lambda r: r["length"])
    ls = [r["length"] for r in rs]
    mu = [np.mean(r["auc"]) for r in rs]
    se = [sem(r["auc"]) if len(r["auc"]) > 1 else 0.0 for r in rs]
    ax.errorbar(ls, mu, yerr=se, marker="o", capsize=3, label=LABELS[m])
  ax.set_xlabel("corridor length L")
  ax.set_ylabel("run-averaged treasure fraction")
  ax.set_ylim(-0.02, 1.02)
  ax.legend()
  report.save_figure(fig, workdir, "treasure_vs_length.png")
  longest = max(r["length"] for r in cells)
  fig, axes = report.figure()
  ax = axes[0, 0]
  for r in (r for r in cells if r["length"] == longest):
    curve = np.asarray(r["curve"])
    mu = curve.mean(axis=1)
    se = curve.std(axis=1, ddof=1) / np.sqrt(curve.shape[1]) if curve.shape[1] > 1 else 0
    ax.plot(r["evals"], mu, label=LABELS[r["method"]])
    ax.fill_between(r["evals"], mu - se, mu + se, alpha=0.2)
  ax.set_xlabel("update")
  ax.set_ylabel("treasure fraction (evaluation)")
  ax.set_title(f"L = {longest}")
  ax.legend()
  report.save_figure(fig, workdir, f"curves_L{longest}.png")


def combine(workdirs, out: str) -> dict:
  """Writes one summary.json / summary.md and the figures into `out` from the finished
  cells (`cells/*.json`) and shadow rows of several runs' `workdirs` (runs of different
  variants: L = 23 and L = 103 at their own budgets). Returns the summary."""
  summary = {"cells": [], "probe": []}
  for w in workdirs:
    cells = os.path.join(w, "cells")
    for name in sorted(os.listdir(cells)) if os.path.isdir(cells) else ():
      if name.endswith(".json"):
        summary["cells"].append(_read(os.path.join(cells, name)))
    if os.path.exists(os.path.join(w, "summary.json")):
      summary["probe"] += [dict(p, rows=probe.rows_of(p["points"]))
                           for p in report.read_summary(w).get("probe", [])]
  order = {m: i for i, m in enumerate(METHODS)}
  summary["cells"].sort(key=lambda r: (r["length"], order[r["method"]]))
  summary["probe"].sort(key=lambda p: p["length"])
  os.makedirs(out, exist_ok=True)
  report.write_summary(out, summary, _markdown(summary))
  figures(summary, out)
  return summary


def run(config, workdir: str, log=print) -> dict:
  """Runs every cell, then the gradient part; writes summary.json, summary.md and the
  figures into `workdir` after each."""
  validate_config(config)
  summary = {"cells": [], "probe": []}
  for length in config.lengths:
    for method in config.methods:
      summary["cells"].append(run_cell(method, int(length), config, workdir, log))
      report.write_summary(workdir, summary, _markdown(summary))
      figures(summary, workdir)
  if tuple(config.probe.lengths):
    for length in config.probe.lengths:
      summary["probe"].append(probe.shadow(int(length), config, log))
      report.write_summary(workdir, summary, _markdown(summary))
      probe_figure(summary, workdir)
  return summary
