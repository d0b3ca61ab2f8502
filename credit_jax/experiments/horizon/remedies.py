"""Experiment: the remedies on the horizon axis , each against GRPO.

  python3 scripts/horizon_remedies.py --config=configs/horizon_remedies.py:small --workdir=DIR

Three parts, each a set of arms trained side by side at every horizon T of the part, seeds
vmapped; every arm is compared with plain GRPO at equal env steps and at equal updates.

  relabel     GRPO + hindsight relabeling (credit_jax/algos/grpo_relabel.py) against
              plain GRPO (the same recipe with relabel weight 0: both modes are traced
              hparams of ONE compiled program) on GoalGrid-v0 grown with T: a
              `T // cells_per_step` square grid, every cell a goal, T steps (the env's own
              3-steps-per-side limit at cells_per_step = 3), coordinate observations
              (`observation="coords"`, so the policy's input does not grow with the grid).
              Relabeled episodes cost no env steps (the verifier recomputes the reward),
              so equal env steps is equal K here.
  search      search-then-train (credit_jax/algos/search_then_train.py) on KeyChain-v0
              (k pivotal steps, A actions, as in the horizon study) against the same
              recipe with `search_every = 0` (plain GRPO, no search compiled) at the same
              K and at a larger K ("grpo_k<K'>", K' = K + search_tasks * simulations /
              num_tasks: the sampled env steps one search update adds). The search's
              simulated env steps (`search_env_steps`, every transition its simulations
              and rollouts computed) are counted as env steps.
  curriculum  the horizon curriculum, by the curriculum experiment's own code path
              (credit_jax/experiments/curriculum/study.py `grpo_config` and `train_curves`):
              GRPO "direct" at T against "gated" (and any of fixed / plr) over
              `stages` (fractions of T), success of the sampled policy on fresh
              episodes at T every `eval_every` updates, env steps as taken (short
              episodes cost less).

PRM shaping is not on this axis; summary.md says why (`remedies_report.PRM_NOTE`).

Measures (per part, T, arm; 95% t-intervals over seeds, `report.t_interval`): success
against env steps and against updates (figures `<part>.png`: a column per T, env steps
above, updates below); env steps and updates to `level` (the first point whose trailing
mean over `smooth` points reaches it, `report.updates_to_level`; a seed that never gets
there is censored at what it ran, a lower bound marked ">="); success at equal env steps
(the smallest final env-step count of any arm and seed of that T) and at equal updates
(the fewest updates any arm of that T ran). Success is the sampled policy's on each
update's own episodes (relabel, search: trailing mean over `smooth` updates) or on
`eval_episodes` fresh episodes (curriculum, as its experiment measures it).

A finished (part, T) cell is saved as `cells/<part>_T<T>.json`; a rerun of the same
command skips cells saved with the same settings. Writes summary.json, summary.md and
relabel.png, search.png, curriculum.png.
"""
from __future__ import annotations

import json
import os
import time
from typing import Callable, Dict, List

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax.algos import ConfigError, grpo_relabel, make_train, search_then_train
from credit_jax.algos import validate_config as validate_recipe
from credit_jax.experiments import curriculum as curriculum_exp
from credit_jax.experiments import horizon, report
from credit_jax.experiments import methods as horizon_methods
from credit_jax.experiments.horizon import remedies_report as rep

PARTS = ("relabel", "search", "curriculum")


def default_config() -> ml_collections.ConfigDict:
  """The `:small` run (configs/horizon_remedies.py); every field documented here."""
  c = ml_collections.ConfigDict()
  c.parts = PARTS               # parts run, in order
  c.seeds = 5                   # seeds per arm (vmapped)
  c.seed = 0                    # base RNG seed
  c.level = 0.9                 # success level ("solved")
  c.smooth = 3                  # points averaged when testing the level
  c.hold = 3                    # a program stops once all its runs held the level this long
  c.stop_when_solved = True     # (relabel, search) stop a program once all runs are solved
  c.chunk_updates = 10          # updates per compiled call (one progress line each)

  c.relabel = ml_collections.ConfigDict()
  c.relabel.horizons = (100, 300)  # episode lengths T (grid side T // cells_per_step)
  c.relabel.cells_per_step = 3  # T / grid side (3: GoalGrid's own limit, 3 * side)
  c.relabel.modes = ("none", "plain")  # grpo_relabel modes: none = plain GRPO
  c.relabel.strategy = "final"  # relabeled goal: final | episode (credit_jax/relabel.py)
  c.relabel.num_tasks = 8       # tasks per update
  c.relabel.group_size = 8      # rollouts per task (K)
  c.relabel.lr = 3e-3           # learning rate (the relabeling experiment's sweep, GoalGrid)
  c.relabel.hidden_sizes = (64, 64)  # MLP widths
  c.relabel.num_updates = 50    # updates per arm (at most)

  c.search = ml_collections.ConfigDict()
  c.search.horizons = (100,)    # KeyChain episode lengths T
  c.search.num_pivotal = 3      # pivotal steps k
  c.search.num_actions = 4      # actions A (random success (1/A)^k)
  c.search.num_tasks = 8        # tasks per update
  c.search.group_size = 8       # rollouts per task (K) of search and of the same-K GRPO
  c.search.search_tasks = 4     # all-failed tasks searched per update
  c.search.simulations = 16     # simulations per searched task
  c.search.search_weight = 0.5  # weight of a searched episode's steps
  c.search.lr = 1e-2            # learning rate (the horizon study's GRPO sweep at T = 100)
  c.search.hidden_sizes = (64, 64)  # MLP widths
  c.search.num_updates = 60     # updates per arm (at most)

  c.curriculum = ml_collections.ConfigDict()
  c.curriculum.horizons = (100,)  # KeyChain target lengths T
  c.curriculum.num_pivotal = 3  # pivotal steps k (A = 4)
  c.curriculum.stage_fractions = (0.1, 0.3, 1.0)  # stages as fractions of T (last 1.0)
  c.curriculum.methods = ("direct", "gated")  # curriculum experiment methods
  c.curriculum.num_updates = 40  # updates per method
  c.curriculum.eval_every = 5   # updates between evaluations at the target
  c.curriculum.eval_episodes = 32  # fresh episodes per seed and evaluation
  c.curriculum.threshold = 0.9  # gated: promotion threshold on training success
  c.curriculum.window = 2       # gated: updates the promotion rule averages
  c.curriculum.fixed_share = 0.5  # fixed: share of the updates on the shorter stages
  c.curriculum.num_tasks = 8    # tasks per update
  c.curriculum.group_size = 8   # rollouts per task
  c.curriculum.lr = 1e-2        # learning rate (as the search part's GRPO)
  c.curriculum.hidden_sizes = (64, 64)  # MLP widths
  return c


def num_seeds(config) -> int:
  return int(config.seeds)


def equal_budget_group(s) -> int:
  """K of the plain-GRPO arm that samples what one search update adds (rounded up)."""
  extra = int(s.search_tasks) * int(s.simulations)
  return int(s.group_size) + -(-extra // int(s.num_tasks))


def relabel_config(config, horizon_t: int, updates: int) -> ml_collections.ConfigDict:
  """grpo_relabel on GoalGrid-v0 grown with T (coordinate observations)."""
  r = config.relabel
  c = grpo_relabel.default_config()
  side = max(2, int(horizon_t) // int(r.cells_per_step))
  c.env_kwargs = ml_collections.ConfigDict(
      {"size": side, "targets": "all", "observation": "coords",
       "max_steps_in_episode": int(horizon_t)})
  c.horizon, c.num_updates = int(horizon_t), int(updates)
  c.num_tasks, c.group_size, c.lr = int(r.num_tasks), int(r.group_size), float(r.lr)
  c.num_minibatches = 2 if int(r.num_tasks) % 2 == 0 else 1
  c.relabel, c.relabel_strategy = "plain", str(r.strategy)
  c.network.hidden_sizes = tuple(r.hidden_sizes)
  c.seeds, c.seed, c.chunk_updates = int(config.seeds), int(config.seed), int(config.chunk_updates)
  return c


def search_config(config, horizon_t: int, arm: str, updates: int) -> ml_collections.ConfigDict:
  """search_then_train on KeyChain; `arm` "search" or "grpo_k<K>" (search_every = 0)."""
  s = config.search
  spec = ml_collections.ConfigDict(
      {"episodes": int(s.num_tasks) * int(s.group_size), "num_pivotal": int(s.num_pivotal),
       "num_actions": int(s.num_actions), "hidden_sizes": tuple(s.hidden_sizes),
       "seeds": int(config.seeds), "seed": int(config.seed),
       "chunk_updates": int(config.chunk_updates)})
  # The horizon study's GRPO cell (same env, network, epochs, minibatches) ...
  g = horizon_methods.recipe_config(f"grpo_k{int(s.group_size)}", int(horizon_t), spec,
                                    float(s.lr), int(updates))
  c = search_then_train.default_config()   # ... in the search recipe
  for f in ("env_name", "env_kwargs", "horizon", "num_tasks", "group_size",
            "num_minibatches", "update_epochs", "num_updates", "lr", "seeds", "seed",
            "chunk_updates", "checkpoint_every"):
    c[f] = g[f]
  c.network.hidden_sizes = tuple(s.hidden_sizes)
  if arm == "search":
    c.search_every, c.search_tasks = 1, int(s.search_tasks)
    c.search_simulations, c.search_weight = int(s.simulations), float(s.search_weight)
  else:
    c.search_every, c.search_tasks = 0, 1
    c.group_size = int(arm.split("_k")[1])
  return c


def search_arms(config) -> tuple:
  k = int(config.search.group_size)
  return (f"grpo_k{k}", "search", f"grpo_k{equal_budget_group(config.search)}")


def validate_config(config) -> None:
  """Raises ConfigError naming the first field that cannot run."""
  for f in ("seeds", "smooth", "hold", "chunk_updates"):
    if int(config[f]) < 1:
      raise ConfigError(f"config.{f}: must be >= 1, got {config[f]}")
  if not 0.0 < float(config.level) <= 1.0:
    raise ConfigError(f"config.level: must lie in (0, 1], got {config.level}")
  for p in config.parts:
    if p not in PARTS:
      raise ConfigError(f"config.parts: {p!r} is not one of {PARTS}")
  cur = config.curriculum
  if tuple(cur.stage_fractions)[-1] != 1.0 or any(
      not 0.0 < float(f) <= 1.0 for f in cur.stage_fractions):
    raise ConfigError("config.curriculum.stage_fractions: fractions in (0, 1], the last 1.0")
  for m in cur.methods:
    if m not in curriculum_exp.METHODS:
      raise ConfigError(f"config.curriculum.methods: {m!r} not in {curriculum_exp.METHODS}")
  if int(cur.num_updates) < int(cur.eval_every):
    raise ConfigError("config.curriculum.num_updates: must be >= eval_every")
  for m in config.relabel.modes:
    if m not in grpo_relabel.MODES:
      raise ConfigError(f"config.relabel.modes: {m!r} not in {grpo_relabel.MODES}")
  for t in config.relabel.horizons:   # every recipe config must validate before anything runs
    _check(relabel_config(config, int(t), 1), f"config.relabel.horizons: T={t}")
  for t in config.search.horizons:
    for arm in search_arms(config):
      _check(search_config(config, int(t), arm, 1), f"config.search: {arm} at T={t}")


def _check(cfg, where):
  try:
    validate_recipe(cfg)
  except (ConfigError, ValueError) as e:
    raise ConfigError(f"{where}: {e}") from e


def train_program(cfg, hparam_rows: List[dict], config, metric_names, log: Callable,
                  tag: str) -> dict:
  """Trains `len(hparam_rows) x seeds` runs of recipe config `cfg` in one program.

  Args:
    hparam_rows: per row, hparams overriding the recipe's defaults (rows vmapped with
      the seeds, row-major).
    metric_names: per-update metrics kept.
  Returns:
    `{name: [U, R*S]}` for each kept metric, and `compile_s`, `run_s`.
  """
  chunk, seeds = int(config.chunk_updates), int(config.seeds)
  train = make_train(cfg)
  n = len(hparam_rows) * seeds
  keys = jnp.concatenate([jax.random.split(jax.random.PRNGKey(int(config.seed)), seeds)]
                         * len(hparam_rows))
  hp = {k: jnp.asarray(np.repeat([float(r.get(k, v)) for r in hparam_rows], seeds),
                       jnp.float32) for k, v in train.default_hparams.items()}
  t0 = time.perf_counter()
  state = jax.jit(jax.vmap(train.init))(keys, hp)
  program = jax.jit(jax.vmap(lambda s, h: train.run(s, h, chunk))).lower(state, hp).compile()
  compile_s, run_s = time.perf_counter() - t0, 0.0
  out = {m: [] for m in metric_names}
  max_updates = max(chunk, (int(cfg.num_updates) // chunk) * chunk)
  while len(out["success"]) < max_updates:
    t0 = time.perf_counter()
    state, m = program(state, hp)
    m = jax.device_get(m)
    run_s += time.perf_counter() - t0
    for name in metric_names:
      out[name].extend(np.asarray(m[name], np.float64).T)                # chunk x [n]
    recent = np.asarray(out["success"][-int(config.hold):])
    log(f"{tag}: update {len(out['success'])}/{max_updates} | success "
        f"{recent[-1].mean():.2f} (min run {recent[-1].min():.2f}) | "
        f"{compile_s + run_s:.0f}s")
    if (config.stop_when_solved and len(recent) >= int(config.hold)
        and np.all(recent >= float(config.level))):
      break
  res = {name: np.stack(v) for name, v in out.items()}
  res.update(compile_s=compile_s, run_s=run_s)
  return res


def _arm_curve(success, env_steps_per_update, smooth: int) -> dict:
  """A curve from per-update success and env steps [U, S]: cumulative env steps."""
  u = success.shape[0]
  return {"updates": list(range(1, u + 1)), "success": success.tolist(),
          "env_steps": np.cumsum(env_steps_per_update, axis=0).tolist(), "smooth": smooth}


def run_relabel(config, t: int, log) -> dict:
  cfg = relabel_config(config, t, int(config.relabel.num_updates))
  modes = tuple(config.relabel.modes)
  rows = [grpo_relabel.mode_hparams(m) for m in modes]
  out = train_program(cfg, rows, config, ("success", "episode_length", "relabeled_frac"),
                      log, f"relabel T={t} (GoalGrid {cfg.env_kwargs.size}x"
                      f"{cfg.env_kwargs.size}) {'/'.join(modes)}")
  seeds, per_ep = int(config.seeds), int(cfg.num_tasks) * int(cfg.group_size)
  arms = {}
  for i, m in enumerate(modes):
    cols = slice(i * seeds, (i + 1) * seeds)
    steps = out["episode_length"][:, cols] * per_ep     # env steps the episodes took
    arms["grpo" if m == "none" else f"grpo+relabel_{m}"] = {
        **_arm_curve(out["success"][:, cols], steps, int(config.smooth)),
        "relabeled_frac": out["relabeled_frac"][:, cols].mean(axis=1).tolist()}
  return {"arms": arms, "grid_side": int(cfg.env_kwargs.size),
          "compile_s": out["compile_s"], "run_s": out["run_s"]}


def run_search(config, t: int, log) -> dict:
  arms, compile_s, run_s = {}, 0.0, 0.0
  for arm in search_arms(config):
    cfg = search_config(config, t, arm, int(config.search.num_updates))
    out = train_program(cfg, [{}], config, ("success", "greedy_success",
                                            "sample_env_steps", "search_env_steps",
                                            "search_found"), log, f"search T={t} {arm}")
    steps = out["sample_env_steps"] + out["search_env_steps"]
    arms[arm] = {**_arm_curve(out["success"], steps, int(config.smooth)),
                 "search_env_steps": out["search_env_steps"].sum(axis=0).tolist(),
                 "greedy_success": out["greedy_success"].tolist(),
                 "search_found": out["search_found"].mean(axis=1).tolist()}
    compile_s, run_s = compile_s + out["compile_s"], run_s + out["run_s"]
  return {"arms": arms, "compile_s": compile_s, "run_s": run_s}


def run_curriculum(config, t: int, log) -> dict:
  """GRPO with a horizon schedule: the curriculum experiment's part (a) code path."""
  cur = config.curriculum
  spec = ml_collections.ConfigDict(
      {"seeds": int(config.seeds), "eval_every": int(cur.eval_every),
       "eval_episodes": int(cur.eval_episodes), "threshold": float(cur.threshold),
       "window": int(cur.window), "fixed_share": float(cur.fixed_share),
       "grpo": {"num_tasks": int(cur.num_tasks), "group_size": int(cur.group_size),
                "update_epochs": 2, "num_minibatches": 2, "lr": float(cur.lr),
                "hidden_sizes": tuple(cur.hidden_sizes)}})
  stages = sorted({max(int(cur.num_pivotal), int(round(f * t))) for f in cur.stage_fractions})
  kwargs = {"horizon": int(t), "num_pivotal": int(cur.num_pivotal), "num_actions": 4}
  c = curriculum_exp.grpo_config(spec, "KeyChain-v0", kwargs, int(t), "horizon", stages,
                                 int(cur.num_updates))
  t0 = time.perf_counter()
  curves = curriculum_exp.train_curves(c, tuple(cur.methods), jax.random.PRNGKey(
      int(config.seed)), spec, lambda line: log(f"curriculum T={t}{line}"))
  wall = time.perf_counter() - t0
  ev = int(cur.eval_every)
  # Row i of the curves is the policy after i * eval_every updates (row 0: untrained).
  arms = {("grpo" if m == "direct" else f"curriculum_{m}"): {
      "updates": [ev * i for i in range(cv["success"].shape[0])],
      "success": cv["success"].tolist(), "env_steps": cv["env_steps"].tolist(),
      "smooth": 1, "stage_value": cv["stage_value"].tolist()} for m, cv in curves.items()}
  return {"arms": arms, "stages": stages, "compile_s": 0.0, "run_s": wall}


RUNNERS = {"relabel": run_relabel, "search": run_search, "curriculum": run_curriculum}


def _shared_settings(config, part) -> dict:
  """What a saved (part, T) cell must share with the config to be reused (not the list
  of horizons: a cell does not depend on the other T)."""
  fields = {k: v for k, v in config[part].to_dict().items() if k != "horizons"}
  return {"part": fields, "seeds": int(config.seeds), "seed": int(config.seed),
          "chunk_updates": int(config.chunk_updates), "hold": int(config.hold),
          "stop_when_solved": bool(config.stop_when_solved), "level": float(config.level)}


def run(config, workdir: str, log=print) -> dict:
  """Runs (resuming) every (part, T) cell, writes summary and figures; returns the summary."""
  validate_config(config)
  workdir = os.path.abspath(workdir)
  os.makedirs(os.path.join(workdir, "cells"), exist_ok=True)
  watch = report.Stopwatch()
  cells: Dict[str, Dict[int, dict]] = {}
  for part in config.parts:
    settings = json.loads(json.dumps(_shared_settings(config, part), default=list))
    for t in sorted(int(h) for h in config[part].horizons):
      path = os.path.join(workdir, "cells", f"{part}_T{t}.json")
      if os.path.exists(path):
        with open(path) as f:
          saved = json.load(f)
        if saved.get("settings") == settings:
          log(f"{part} T={t}: finished before, skipped")
          cells.setdefault(part, {})[t] = saved
          continue
      load0 = os.getloadavg()
      res = RUNNERS[part](config, t, log)
      res.update(settings=settings, horizon=t, load_start=list(load0),
                 load_end=list(os.getloadavg()))
      with open(f"{path}.tmp", "w") as f:
        json.dump(res, f)
      os.replace(f"{path}.tmp", path)
      cells.setdefault(part, {})[t] = res
      log(f"{part} T={t} done: " + ", ".join(
          f"{a} final {np.mean(r['success'][-1]):.2f}" for a, r in res["arms"].items())
          + f" | {watch.seconds():.0f}s")
  summary = rep.summarize(cells, config)
  summary["wall_seconds"] = watch.seconds()
  summary["load_average_end"] = list(os.getloadavg())
  for part, per_t in cells.items():
    rep.figure(part, per_t, config, workdir)
  return report.write_summary(workdir, summary, rep.markdown(summary, config))
