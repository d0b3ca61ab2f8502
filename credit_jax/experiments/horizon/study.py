"""Experiment: the horizon study. Train every method on KeyChain from T = 10 upward and
measure where each stops learning.

  python3 scripts/horizon_study.py --config=configs/horizon_study.py:small --workdir=DIR

Task: KeyChain-v0 (credit_jax/envs/keychain.py), k pivotal steps among T, A actions,
cues shown at the pivotal step, one reward at the end (1 iff every pivotal action was
right; a policy that ignores the cues succeeds with (1/A)^k). The methods are recipes of
credit_jax/algos/ built by `horizon_methods.recipe_config` with the same number of
episodes per update (`episodes`), so an update costs `episodes * T` env steps for all.

Cells: one per (method, T), its `seeds` seeds vmapped in one compiled program, run in
chunks of `chunk_updates` updates (a progress line each) for at most `budget_updates`
updates and `budget_env_steps` env steps per seed (the budget, stated in env steps). With
`stop_when_solved` a cell stops once every seed's success has stayed >= `level` for
`hold` updates (the updates it would still have taken change nothing it reports but the
final success, which is then the success at the stop). A finished cell writes
`cells/<method>_T<T>.json`; a rerun of the same command skips those (a killed run
resumes at the first unfinished cell; a cell is not resumed mid-way). With
`skip_after_failure`, once no seed of a method reached the level at some T its larger T
are not run (listed under "not run" in the summary). `new_cells=False` trains nothing
but the transfer part and tabulates the cells saved so far (the rest listed as missing).

Success is the sampled policy's success on the update's own fresh episodes (the
recipes' `success` metric: `episodes` episodes per seed and update). The update at which
a seed reaches the level is the first u with the mean success of updates
u - smooth + 1 .. u >= level; a seed that never does is *censored* at the budget: its
updates-to-level is the budget (a lower bound), flagged, and counted in the tables.

Learning rate: each family's rate is picked once by a small sweep at `lr_sweep.horizon`
(lrs vmapped with the seeds, the rate with the fewest mean censored updates to level),
then fixed for every T (`lr_sweep.families` empty: the rates in `lrs` are used as they
are). The choice is written to `lr_choice.json` and the summary.

Remedy (`transfer`): the simplest horizon curriculum, two fixed stages: a method trained
at a short `transfer.train_horizon` until solved, then its policy run unchanged at each
`transfer.targets` T (`transfer.eval_episodes` fresh episodes per seed). Its env-step
cost is the short stage's; the table sets it beside one update of direct training at
the target.

Writes results.csv (one row per method, T and seed), results.md, summary.json,
summary.md, success_vs_steps.png (success against env steps, a panel per T) and
steps_to_level.png (updates and env steps to the level against T, log-log).
"""
from __future__ import annotations

import csv
import json
import os
import time
from typing import Callable, Dict, List

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax.addons import gae_probe
from credit_jax import nets, rollout
from credit_jax.algos import ConfigError, train as train_lib, make_train
from credit_jax.algos import validate_config as validate_recipe
from credit_jax.experiments import methods as horizon_methods, report
from credit_jax.experiments.horizon import report as horizon_report
from credit_jax.experiments.report import updates_to_level

__all__ = [
    "cell_budget", "cell_result", "choose_lrs", "default_config", "evaluate_at",
    "num_seeds", "run", "run_transfer", "train_cell", "updates_to_level",
    "validate_config",
]


def default_config() -> ml_collections.ConfigDict:
  """The `:small` study (configs/horizon_study.py); every field documented here."""
  c = ml_collections.ConfigDict()
  c.seeds = 4                   # seeds per cell (vmapped)
  c.seed = 0                    # base RNG seed
  c.num_pivotal = 3             # KeyChain pivotal steps k
  c.num_actions = 4             # KeyChain actions A (random success (1/A)^k)
  c.episodes = 64               # episodes per update and seed, every method
  c.hidden_sizes = (64, 64)     # MLP widths (GRU: its input encoder)
  c.horizons = (10, 30, 100, 300)  # episode lengths T
  c.methods = ("reinforce", "grpo_k8", "grpo_k32", "ppo_mlp_g1_l1",
               "ppo_mlp_g0.99_l0.95")  # see horizon_methods
  c.level = 0.9                 # success level ("solved")
  c.smooth = 3                  # updates averaged when testing the level
  c.hold = 3                    # stop_when_solved: updates every seed must hold the level
  c.stop_when_solved = True     # stop a cell once every seed holds the level
  c.budget_updates = 150        # at most this many updates per seed and cell
  c.budget_env_steps = 20_000_000  # and at most this many env steps per seed and cell
  c.chunk_updates = 10          # updates per compiled call (one progress line each)
  c.skip_after_failure = True   # skip a method's larger T once no seed reached the level
  c.new_cells = True            # False: train no (method, T) cell, tabulate the saved ones
  c.gae_gradient_every = 0      # >0: PPO with an MLP actor measures its GAE gradient's
                                # bias and cosine vs KeyChain's exact gradient every N
                                # updates (credit_jax/gae_probe.py); a divisor of chunk_updates
  c.lrs = ml_collections.ConfigDict(
      {"reinforce": 1e-2, "grpo": 3e-3, "ppo": 3e-3})  # lr per family (if not swept)
  c.lr_sweep = ml_collections.ConfigDict()
  c.lr_sweep.families = ()      # families whose lr is swept (:full: reinforce, grpo, ppo)
  c.lr_sweep.methods = ()       # the method swept per family (:full: reinforce, grpo_k8, ppo_mlp_g1_l1)
  c.lr_sweep.horizon = 100      # the T of the sweep
  c.lr_sweep.candidates = (1e-3, 3e-3, 1e-2)  # candidate rates
  c.lr_sweep.budget_updates = 60  # updates per sweep run
  c.transfer = ml_collections.ConfigDict()
  c.transfer.method = "grpo_k8"  # method of the short stage ("" : no transfer part)
  c.transfer.train_horizon = 30  # T of the short stage
  c.transfer.targets = (1000, 10_000)  # T it is evaluated at
  c.transfer.eval_episodes = 64  # fresh episodes per seed and target
  return c


def num_seeds(config) -> int:
  return int(config.seeds)


def validate_config(config) -> None:
  """Raises ConfigError naming the first field of the study config that cannot run."""
  for f in ("seeds", "episodes", "smooth", "hold", "budget_updates", "chunk_updates",
            "budget_env_steps", "num_pivotal"):
    if int(config[f]) < 1:
      raise ConfigError(f"config.{f}: must be >= 1, got {config[f]}")
  if int(config.num_actions) < 2:
    raise ConfigError(f"config.num_actions: must be >= 2, got {config.num_actions}")
  if not 0.0 < float(config.level) <= 1.0:
    raise ConfigError(f"config.level: must lie in (0, 1], got {config.level}")
  if not config.horizons or any(int(t) < int(config.num_pivotal) for t in config.horizons):
    raise ConfigError(f"config.horizons: need >= 1 horizon, each >= num_pivotal, got "
                      f"{tuple(config.horizons)}")
  if len(set(config.methods)) != len(config.methods):
    raise ConfigError("config.methods: a method is listed twice")
  for m in config.methods:
    family, _ = horizon_methods.parse(m)
    if family not in config.lrs and family not in config.lr_sweep.families:
      raise ConfigError(f"config.lrs: no learning rate for family {family!r} ({m})")
  sweep = config.lr_sweep
  if len(sweep.methods) != len(sweep.families):
    raise ConfigError("config.lr_sweep.methods: one method per family in lr_sweep.families")
  for fam, m in zip(sweep.families, sweep.methods):
    if horizon_methods.parse(m)[0] != fam:
      raise ConfigError(f"config.lr_sweep.methods: {m!r} is not of family {fam!r}")
  if sweep.families and (not sweep.candidates or any(float(v) <= 0 for v in sweep.candidates)):
    raise ConfigError("config.lr_sweep.candidates: need positive candidate rates")
  every = int(config.gae_gradient_every)
  if every < 0 or (every and int(config.chunk_updates) % every):
    raise ConfigError(f"config.gae_gradient_every: must be 0 or a divisor of "
                      f"chunk_updates={config.chunk_updates}, got {every}")
  if config.transfer.method:
    horizon_methods.parse(config.transfer.method)
    if not config.transfer.targets or int(config.transfer.eval_episodes) < 1:
      raise ConfigError("config.transfer: need targets and eval_episodes >= 1")
  for m in config.methods:   # every cell's recipe config must validate before anything runs
    for t in config.horizons:
      try:
        validate_recipe(horizon_methods.recipe_config(m, int(t), config, 1e-3, 1))
      except ConfigError as e:
        raise ConfigError(f"config.methods: {m} at T={t}: {e}") from e


def _chunk_programs(train, chunk: int):
  init = jax.jit(jax.vmap(train.init))
  run = jax.jit(jax.vmap(lambda s, h: train.run(s, h, chunk)))
  return init, run


def train_cell(cfg, lrs, config, max_updates: int, log: Callable, tag: str,
               stop_when_solved: bool) -> dict:
  """Trains `len(lrs) x seeds` runs of recipe config `cfg` side by side.

  Returns `{"success": [U, R*S], "lr": [R*S], "env_steps_per_update", "compile_s",
  "run_s", "params"}` (runs ordered lr-major; `params` the final policy parameters).
  """
  chunk, seeds = int(config.chunk_updates), int(config.seeds)
  max_updates = max(chunk, (int(max_updates) // chunk) * chunk)
  train = make_train(cfg)
  lr = np.repeat(np.asarray(lrs, np.float32), seeds)
  n = lr.shape[0]
  keys = jnp.concatenate([jax.random.split(jax.random.PRNGKey(int(config.seed)), seeds)]
                         * len(lrs))
  hp = {k: jnp.full((n,), v, jnp.float32) for k, v in train.default_hparams.items()}
  hp["lr"] = jnp.asarray(lr)
  init, run = _chunk_programs(train, chunk)
  t0 = time.perf_counter()
  state = init(keys, hp)
  program = run.lower(state, hp).compile()
  compile_s = time.perf_counter() - t0
  per_update = train.env_steps_per_update
  success, run_s, level = [], 0.0, float(config.level)
  measured = {}   # gae_grad_<name>: [(update, [n] values)] at the measured updates
  while len(success) < max_updates:
    t0 = time.perf_counter()
    state, m = program(state, hp)
    m = jax.device_get(m)
    s = np.asarray(m["success"], np.float64)                              # [n, chunk]
    flag = gae_probe.METRIC_PREFIX + "measured"   # 1.0 at the updates measured
    if flag in m:
      cols = np.flatnonzero(np.asarray(m[flag], np.float64).max(axis=0) > 0)  # [chunk]
      for name, v in m.items():
        if name.startswith(gae_probe.METRIC_PREFIX) and name != flag:
          v = np.asarray(v, np.float64)                                   # [n, chunk]
          for j in cols:
            measured.setdefault(name, []).append((len(success) + int(j), v[:, j].tolist()))
    dt = time.perf_counter() - t0
    run_s += dt
    success.extend(s.T)
    done = len(success)
    recent = np.asarray(success[-int(config.hold):])
    log(f"{tag}: update {done}/{max_updates} | success {s[:, -1].mean():.2f} "
        f"(min seed {recent[-1].min():.2f}) | {chunk * per_update * n / dt:,.0f} env "
        f"steps/s | {compile_s + run_s:.0f}s")
    if stop_when_solved and len(recent) >= int(config.hold) and np.all(recent >= level):
      break
  return {"success": np.stack(success), "lr": lr, "env_steps_per_update": per_update,
          "compile_s": compile_s, "run_s": run_s, "params": state.params,
          "gae_grad": measured}


def cell_budget(config, horizon: int) -> int:
  """Updates per seed a cell at `horizon` may take (budget_updates, budget_env_steps)."""
  per_update = int(config.episodes) * int(horizon)
  return max(1, min(int(config.budget_updates), int(config.budget_env_steps) // per_update))


def cell_result(method: str, horizon: int, out: dict, config, budget: int) -> dict:
  """The saved record of one cell: curves, per-seed updates/env steps to level."""
  updates, censored = updates_to_level(out["success"], config.level, config.smooth)
  ran = out["success"].shape[0]
  # A cell stopped once solved ran fewer updates than its budget; a seed that did not
  # reach the level is censored at the budget, not at the stop.
  updates = np.where(censored, budget, updates)
  per = int(out["env_steps_per_update"])
  return {"method": method, "horizon": int(horizon), "lr": float(out["lr"][0]),
          "budget_updates": int(budget), "budget_env_steps": int(budget * per),
          "env_steps_per_update": per, "updates_run": int(ran),
          "success": out["success"].tolist(),
          "updates_to_level": updates.tolist(), "censored": censored.tolist(),
          "env_steps_to_level": (updates * per).tolist(),
          "final_success": np.mean(out["success"][-int(config.smooth):], axis=0).tolist(),
          "compile_s": out["compile_s"], "run_s": out["run_s"],
          "gae_grad": out.get("gae_grad", {})}


def _read(path):
  with open(path) as f:
    return json.load(f)


def _write(path, obj):
  tmp = f"{path}.tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f)
  os.replace(tmp, path)


def choose_lrs(config, workdir: str, log) -> Dict[str, float]:
  """The learning rate per family: swept at lr_sweep.horizon where asked, else `lrs`."""
  path = os.path.join(workdir, "lr_choice.json")
  if os.path.exists(path):
    saved = _read(path)
    log(f"learning rates from {path}: {saved['chosen']}")
    return saved
  chosen = {k: float(v) for k, v in config.lrs.items()}
  sweep, table = config.lr_sweep, {}
  values = [float(v) for v in sweep.candidates]
  partial = os.path.join(workdir, "lr_sweep_partial.json")   # families swept so far
  if os.path.exists(partial):
    table = _read(partial)
  for fam, method in zip(sweep.families, sweep.methods):
    if fam in table and table[fam]["lrs"] == values and table[fam]["method"] == method:
      chosen[fam] = table[fam]["chosen"]
      log(f"lr sweep {method}: done before, lr {chosen[fam]:g}")
      continue
    t = int(sweep.horizon)
    cfg = horizon_methods.recipe_config(method, t, config, values[0], 1)
    out = train_cell(cfg, values, config, int(sweep.budget_updates), log,
                     f"lr sweep {method} T={t}", stop_when_solved=False)
    upd, _ = updates_to_level(out["success"], config.level, config.smooth)
    per_lr = upd.reshape(len(values), int(config.seeds)).mean(axis=1)
    final = out["success"][-int(config.smooth):].mean(axis=0).reshape(len(values), -1)
    # Fewest mean (censored) updates to the level; ties broken by final success.
    best = min(range(len(values)), key=lambda i: (per_lr[i], -final[i].mean()))
    chosen[fam] = values[best]
    table[fam] = {"method": method, "horizon": t, "lrs": values,
                  "mean_updates_to_level": per_lr.tolist(),
                  "final_success": final.mean(axis=1).tolist(), "chosen": values[best]}
    log(f"lr sweep {method} T={t}: mean updates to {config.level:.0%} "
        f"{dict(zip(values, per_lr.round(1).tolist()))} -> lr {values[best]:g}")
    _write(partial, table)
  saved = {"chosen": chosen, "sweep": table}
  _write(path, saved)
  return saved


def evaluate_at(cfg, params, horizon: int, episodes: int, key) -> np.ndarray:
  """[S] sampled-policy success of the per-seed `params` on KeyChain at `horizon`."""
  cfg = cfg.copy_and_resolve_references()
  cfg.env_kwargs.horizon, cfg.horizon = int(horizon), int(horizon)
  env, env_params = train_lib.make_env(cfg)
  network, _ = train_lib.make_network(cfg, env, env_params, value_head=False)
  policy_fn = nets.make_policy_fn(network, value=False)

  def one(p, k):
    traj = rollout.collect_episodes(env, env_params, policy_fn, p, k, episodes, horizon)
    ret = jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), axis=0)
    return jnp.mean((ret > 0).astype(jnp.float32))
  n = jax.tree.leaves(params)[0].shape[0]
  return np.asarray(jax.jit(jax.vmap(one))(params, jax.random.split(key, n)))


def run_transfer(config, lrs, workdir: str, log) -> dict:
  """The two-stage curriculum: train at transfer.train_horizon, run at each target."""
  path = os.path.join(workdir, "cells", "transfer.json")
  if os.path.exists(path):
    return _read(path)
  tr = config.transfer
  method, t = str(tr.method), int(tr.train_horizon)
  budget = cell_budget(config, t)
  cfg = horizon_methods.recipe_config(method, t, config, 1.0, budget)
  fam = horizon_methods.parse(method)[0]
  wall = time.perf_counter()
  out = train_cell(cfg, [lrs[fam]], config, budget, log, f"transfer {method} T={t}", True)
  train_s = time.perf_counter() - wall
  res = cell_result(method, t, out, config, budget)
  res["targets"] = {}
  for j, target in enumerate(tr.targets):
    t0 = time.perf_counter()
    s = evaluate_at(cfg, out["params"], int(target), int(tr.eval_episodes),
                    jax.random.PRNGKey(10_000 + j))
    res["targets"][str(int(target))] = {
        "success": s.tolist(), "eval_s": time.perf_counter() - t0,
        "direct_update_env_steps": int(config.episodes) * int(target)}
    log(f"transfer {method} T={t} -> T={target}: success {s.mean():.3f} "
        f"(min seed {s.min():.3f}) on {tr.eval_episodes} episodes/seed")
  res["train_wall_s"] = train_s
  res["train_env_steps"] = int(out["success"].shape[0] * out["env_steps_per_update"])
  _write(path, res)
  return res


def run(config, workdir: str, log=print) -> dict:
  """Runs (resuming) every cell, writes results and figures; returns the summary."""
  validate_config(config)
  workdir = os.path.abspath(workdir)
  os.makedirs(os.path.join(workdir, "cells"), exist_ok=True)
  watch = report.Stopwatch()
  lr_info = choose_lrs(config, workdir, log)
  lrs = lr_info["chosen"]
  cells: List[dict] = []
  skipped: Dict[str, dict] = {}
  failed_at: Dict[str, int] = {}
  missing: List[dict] = []
  todo = [(m, int(t)) for t in sorted(int(h) for h in config.horizons)
          for m in config.methods]
  for i, (method, t) in enumerate(todo):
    path = os.path.join(workdir, "cells", f"{method}_T{t}.json")
    if method in failed_at and config.skip_after_failure:
      skipped.setdefault(method, {"failed_at": failed_at[method], "horizons": []})
      skipped[method]["horizons"].append(t)
      log(f"cell {i + 1}/{len(todo)} {method} T={t}: not run, no seed reached "
          f"{config.level:.0%} at T={failed_at[method]}")
      continue
    budget = cell_budget(config, t)
    fam = horizon_methods.parse(method)[0]
    if os.path.exists(path):
      saved = _read(path)
      same = (saved["budget_updates"] == budget and len(saved["censored"]) == config.seeds
              and np.isclose(saved["lr"], lrs[fam], rtol=1e-6)
              and saved["env_steps_per_update"] == int(config.episodes) * t)
      if same:
        log(f"cell {i + 1}/{len(todo)} {method} T={t}: finished before, skipped")
        cells.append(saved)
        if all(saved["censored"]):
          failed_at[method] = t
        continue
      log(f"cell {i + 1}/{len(todo)} {method} T={t}: the saved cell has another budget, "
          f"lr, seed count or batch; run again")
    if not config.new_cells:
      missing.append({"method": method, "horizon": t})
      log(f"cell {i + 1}/{len(todo)} {method} T={t}: not run (new_cells=False)")
      continue
    cfg = horizon_methods.recipe_config(method, t, config, lrs[fam], budget)
    if int(config.gae_gradient_every) and horizon_methods.measures_gae(method):
      cfg.gae_gradient_every = int(config.gae_gradient_every)
    out = train_cell(cfg, [lrs[fam]], config, budget, log,
                     f"cell {i + 1}/{len(todo)} {method} T={t}", bool(config.stop_when_solved))
    res = cell_result(method, t, out, config, budget)
    _write(path, res)
    cells.append(res)
    if all(res["censored"]):
      failed_at[method] = t
    log(f"cell {i + 1}/{len(todo)} {method} T={t} done: {sum(not c for c in res['censored'])}"
        f"/{config.seeds} seeds at {config.level:.0%}, final success "
        f"{np.mean(res['final_success']):.2f} | study {watch.seconds():.0f}s")
  transfer = run_transfer(config, lrs, workdir, log) if config.transfer.method else None
  summary = horizon_report.summarize(cells, transfer, lr_info, config)
  summary["not_run"] = skipped
  summary["missing"] = missing
  summary["wall_seconds"] = watch.seconds()
  summary["cells_wall_seconds"] = float(sum(c["compile_s"] + c["run_s"] for c in cells))
  summary["load_average"] = list(os.getloadavg())
  horizon_report.write_results(cells, config, workdir)
  if cells:   # (a run with new_cells=False on a fresh workdir: the lr sweep alone)
    horizon_report.figures(cells, config, workdir)
  summary["gae_figure"] = horizon_report.gae_figure(cells, workdir) is not None
  return report.write_summary(workdir, summary, horizon_report.markdown(summary, config))
