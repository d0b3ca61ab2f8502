"""Which of KeyChain's shortcuts make long horizons easy: a short measurement.

  python3 scripts/probes.py --config=configs/probes.py --workdir=runs/probes

Cells: GRPO (K = 8) and PPO + GAE (gamma = 1, lambda 1 and 0.95), MLP policies, on
KeyChain-v0 (k = 3, A = 4) at each T of `horizons` with its shortcut switches at their
defaults ("default"), each switch alone, and all six together ("all"; optionally
"all_but_cues_at_start", the five a memoryless policy can pass; "credit_switches", the
four that leave difficulty flat in T and need no memory: no flag, fake cues, distinct
rules, reward noise); and on
LinearKeyToDoor-v0 at each L of `corridor_lengths` ("corridor"). Every cell trains
`seeds` seeds side by side (one compiled vmap) through `credit_jax.algos.make_train` on
the recipe's own config with the horizon study's settings (64 episodes of T steps per
update for every method: GRPO 8 tasks x K = 8, PPO 64 environments x T steps; 2 epochs x
2 minibatches; lr `lr`; PPO without entropy bonus or lr annealing, grad-norm clip 1), for
an equal budget of `budget_env_steps` env steps per seed (`updates = budget // (64 T)`,
rounded down: the corridor's L = 103 does not divide it).

Measure: after training, each seed's sampled policy (and its greedy policy) runs
`eval_episodes` fresh episodes; success is the task's (`info["success"]`: all pivotal
steps right, or the treasure), never a positive return, which reward noise and apples
fake. A cell's rate pools seeds x episodes with a 95% Wilson interval; seeds are not
independent draws of one rate, so per-seed rates are kept beside it and the interval is a
floor on the uncertainty. The recipes' own training-time `success` is logged but not
reported: PPO's counts a positive reward as success.

Switch values: `pivotal_density` (0.03: k = 3 at T = 100, as the default, and 30 at T =
1000) and `distractor_reward_std` (0.1: the summed noise's std equals the unit signal at
T = 100 and is 3.2x it at T = 1000); the rest are booleans.

Writes into the workdir: cells/<cell>.json as each cell finishes (a rerun skips those
already there: a killed run resumes at its next cell; a saved cell with other seeds or
updates than the config's is refused, so a budget override needs its own workdir),
summary.json and summary.md (the tables).
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Tuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax import nets, rollout
from credit_jax.algos import ConfigError, grpo, make_train, ppo, reinforce, train as train_lib
from credit_jax.experiments import report
from credit_jax.experiments.probes import credit_horizon

__all__ = ["CORRIDORS", "EXTRA_METHODS", "EXTRA_SETTINGS", "METHODS", "SETTINGS",
           "SWITCH_NAMES", "TABULAR", "budget_updates", "cell_env", "cells",
           "default_config", "evaluate", "markdown", "method_config", "num_seeds", "run",
           "seeds_passing", "switch_kwargs", "train_cell", "validate_config"]

METHODS = ("grpo_k8", "ppo_l1", "ppo_l0.95")
# More arms for the learnability gate: REINFORCE (returns-to-go, leave-one-out mean), and
# any method with "-tabular" appended: a table policy (critic) over the one-hot parts.
EXTRA_METHODS = ("reinforce",)
TABULAR = "-tabular"
CORRIDORS = {"LinearKeyToDoor-v0": "corridor", "ConveyorTreasure-v0": "conveyor"}
SWITCH_NAMES = ("pivotal_flag", "distractor_cues", "distinct_rules", "cues_at_start",
                "pivotal_density", "distractor_reward_std")
SETTINGS = ("default",) + SWITCH_NAMES + ("all",)
# Every switch but the one a memoryless (MLP) policy cannot pass: what "all" asks of an
# MLP's credit assignment rather than of its memory. And those without `pivotal_density`
# too ("credit_switches"): at T = 1000 density makes k = 30 (random 8.7e-19), where no
# method succeeds once, so only this combination measures credit at long T.
EXTRA_SETTINGS = ("all_but_cues_at_start", "credit_switches", "credit_probe",
                  "credit_probe_noise")


def default_config() -> ml_collections.ConfigDict:
  """The measurement of docs/results/probes.md; every field documented."""
  c = ml_collections.ConfigDict()
  c.seeds = 5                   # seeds per cell (vmapped)
  c.seed = 0                    # base RNG seed; every cell uses the same seed keys
  c.horizons = (100, 1000)      # KeyChain episode lengths T
  c.settings = SETTINGS         # KeyChain switch settings (module doc)
  c.corridor_lengths = (103,)   # corridor lengths L
  c.corridor_env = "LinearKeyToDoor-v0"  # or ConveyorTreasure-v0 (COCOA's; cells "conveyor/...")
  c.methods = METHODS           # grpo_k8 | ppo_l1 | ppo_l0.95 | reinforce, each [-tabular]
  c.num_pivotal = 3             # KeyChain k (without pivotal_density)
  c.num_actions = 4             # KeyChain A
  c.pivotal_density = 0.03      # the value of that switch when on
  c.distractor_reward_std = 0.1  # the value of that switch when on
  c.probe_noise_std = 1.0       # credit_probe_noise: episode_noise_std (summed noise std)
  c.episodes = 64               # episodes per update and seed, every method
  c.budget_env_steps = 1_280_000  # env steps per seed and cell
  c.lr = 0.01                   # learning rate, every method (the horizon study's choice)
  c.hidden_sizes = (64, 64)     # MLP widths
  c.chunk_updates = 10          # updates per compiled call (one progress line each)
  c.eval_episodes = 128         # fresh evaluation episodes per seed
  c.new_cells = True            # False: train nothing, tabulate the saved cells
  c.study = "cells"             # cells | credit_horizon | gradient_bias (credit_horizon.py)
  return credit_horizon.add_fields(c)


def num_seeds(config) -> int:
  return int(config.seeds)


def validate_config(config) -> None:
  """Raises ConfigError naming the first field that cannot run."""
  for f in ("seeds", "episodes", "budget_env_steps", "chunk_updates", "eval_episodes"):
    if int(config[f]) < 1:
      raise ConfigError(f"config.{f}: must be >= 1, got {config[f]}")
  for m in config.methods:
    if _base_method(m) not in METHODS + EXTRA_METHODS:
      raise ConfigError(f"config.methods: {m!r} is not one of {METHODS + EXTRA_METHODS}"
                        f" (optionally with {TABULAR!r} appended)")
  if config.corridor_env not in CORRIDORS:
    raise ConfigError(f"config.corridor_env: must be one of {tuple(CORRIDORS)}, got "
                      f"{config.corridor_env!r}")
  for s in config.settings:
    if s not in SETTINGS + EXTRA_SETTINGS:
      raise ConfigError(f"config.settings: {s!r} is not one of {SETTINGS + EXTRA_SETTINGS}")
  if int(config.episodes) % 16:
    raise ConfigError(f"config.episodes: {config.episodes} must be a multiple of 16 "
                      f"(GRPO: K = 8 times an even number of tasks)")
  for name, horizon, _, _ in cells(config):
    if budget_updates(config, horizon) < 1:
      raise ConfigError(f"config.budget_env_steps: {config.budget_env_steps} is less "
                        f"than one update of cell {name}")
    try:
      _ = train_lib.make_env(method_config(config, name.split("/")[-1], *cell_env(
          config, name), horizon))
    except (ValueError, ConfigError) as e:
      raise ConfigError(f"config: cell {name}: {e}") from e


def _base_method(method: str) -> str:
  return method[:-len(TABULAR)] if method.endswith(TABULAR) else method


def switch_kwargs(config, setting: str) -> dict:
  """KeyChain overrides of a setting: {} for "default", one switch, all six, all but
  `cues_at_start`, or all but it and `pivotal_density` ("credit_switches"); the credit
  probe ("credit_probe": (segment, cue) one-hot, distinct rules, fake cues, no flag, k
  fixed; "credit_probe_noise": with `episode_noise_std = probe_noise_std`)."""
  if setting.startswith("credit_probe"):
    probe = {"segment_cue_onehot": True, "distinct_rules": True, "distractor_cues": True,
             "pivotal_flag": False}
    if setting == "credit_probe_noise":
      probe["episode_noise_std"] = float(config.probe_noise_std)
    return probe
  on = {"pivotal_flag": False, "distractor_cues": True, "distinct_rules": True,
        "cues_at_start": True, "pivotal_density": float(config.pivotal_density),
        "distractor_reward_std": float(config.distractor_reward_std)}
  if setting == "default":
    return {}
  if setting == "all":
    return on
  if setting == "all_but_cues_at_start":
    return {k: v for k, v in on.items() if k != "cues_at_start"}
  if setting == "credit_switches":
    return {k: v for k, v in on.items() if k not in ("cues_at_start", "pivotal_density")}
  return {setting: on[setting]}


def cells(config) -> List[Tuple[str, int, str, str]]:
  """`(name, horizon, setting, method)` of every cell, cheapest horizons first; names are
  `keychain/<setting>/T<T>/<method>` and `corridor/L<L>/<method>` (LinearKeyToDoor-v0)
  or `conveyor/L<L>/<method>` (ConveyorTreasure-v0)."""
  out = []
  horizons = sorted(set(int(t) for t in config.horizons) | set(
      int(n) for n in config.corridor_lengths))
  for t in horizons:
    if t in [int(h) for h in config.horizons]:
      for s in config.settings:
        for m in config.methods:
          out.append((f"keychain/{s}/T{t}/{m}", t, s, m))
    if t in [int(n) for n in config.corridor_lengths]:
      for m in config.methods:
        out.append((f"{CORRIDORS[config.corridor_env]}/L{t}/{m}", t, "corridor", m))
  return out


def cell_env(config, name: str) -> Tuple[str, dict]:
  """(env_name, env_kwargs) of cell `name`."""
  parts = name.split("/")
  if parts[0] in CORRIDORS.values():
    env = {v: k for k, v in CORRIDORS.items()}[parts[0]]
    return env, {"length": int(parts[1][1:])}
  kwargs = {"horizon": int(parts[2][1:]), "num_pivotal": int(config.num_pivotal),
            "num_actions": int(config.num_actions), "cue_delay": 0}
  return "KeyChain-v0", {**kwargs, **switch_kwargs(config, parts[1])}


def budget_updates(config, horizon: int) -> int:
  """Updates per seed of a cell at episode length `horizon` (equal env-step budget)."""
  return int(config.budget_env_steps) // (int(config.episodes) * int(horizon))


def method_config(config, method: str, env_name: str, env_kwargs: dict, horizon: int,
                  num_updates: int = 1) -> ml_collections.ConfigDict:
  """The recipe config of `method` on the env, `num_updates` updates per seed."""
  episodes = int(config.episodes)
  tabular = method.endswith(TABULAR)
  method = _base_method(method)
  if method == "reinforce":
    c = reinforce.default_config()
    c.num_envs, c.horizon, c.num_updates = episodes, int(horizon), int(num_updates)
    c.credit, c.baseline = "rtg", "mean"
  elif method == "grpo_k8":
    c = grpo.default_config()
    c.group_size, c.num_tasks = 8, episodes // 8
    c.num_minibatches, c.update_epochs = 2, 2
    c.num_updates = int(num_updates)
    c.horizon = int(horizon)
  else:
    c = ppo.default_config()
    c.num_envs, c.num_steps = episodes, int(horizon)
    c.total_timesteps = int(num_updates) * episodes * int(horizon)
    c.update_epochs, c.num_minibatches = 2, 2
    c.gamma, c.gae_lambda = 1.0, (1.0 if method == "ppo_l1" else 0.95)
    c.ent_coef, c.anneal_lr, c.max_grad_norm = 0.0, False, 1.0
  c.env_name = env_name
  c.env_kwargs = ml_collections.ConfigDict(env_kwargs)
  c.lr = float(config.table_lr if tabular else config.lr)
  c.network.hidden_sizes = tuple(config.hidden_sizes)
  if tabular:
    c.network.kind, c.network.min_prob = "tabular", float(config.min_prob)
  c.seeds, c.seed = int(config.seeds), int(config.seed)
  c.chunk_updates, c.checkpoint_every = int(config.chunk_updates), 0
  return c


def evaluate(cfg, params, episodes: int, key) -> Dict[str, np.ndarray]:
  """Per-seed counts over `episodes` fresh episodes of the sampled and greedy policies.

  Args:
    params: the per-seed policy parameters (leading axis S).
  Returns: {"success", "greedy_success", "episodes"} as [S] ints, and for the corridor
    "apples" and "apples_available" ([S] ints, sampled policy).
  """
  env, env_params = train_lib.make_env(cfg)
  network, _ = train_lib.make_network(cfg, env, env_params,
                                      value_head=reinforce.needs_value(cfg)
                                      if cfg.algo == "reinforce" else cfg.algo == "ppo")
  sampled = nets.make_policy_fn(network, value=False)

  def greedy(p, obs, key):
    del key
    logits, _ = network.apply(p, obs)
    action = jnp.argmax(logits).astype(jnp.int32)
    return action, nets.categorical_log_prob(logits, action), ()
  horizon = int(env.horizon)

  def one(p, k):
    out = {}
    for name, policy, kk in (("success", sampled, k),
                             ("greedy_success", greedy, jax.random.fold_in(k, 1))):
      traj = rollout.collect_episodes(env, env_params, policy, p, kk, episodes, horizon)
      succ = traj.info.get("success")
      if succ is None:   # the default KeyChain: success is exactly a positive return
        won = jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), axis=0) > 0
      else:
        won = jnp.any(succ & traj.valid, axis=0)
      out[name] = jnp.sum(won)
      if name == "success" and "apple" in traj.info:
        out["apples"] = jnp.sum(traj.info["apple"] & traj.valid)
        out["apples_available"] = jnp.sum(traj.info["apple_available"] & traj.valid)
    return out
  n = jax.tree.leaves(params)[0].shape[0]
  out = jax.device_get(jax.jit(jax.vmap(one))(params, jax.random.split(key, n)))
  out = {k: np.asarray(v, np.int64) for k, v in out.items()}
  out["episodes"] = np.full(n, episodes, np.int64)
  return out


def train_cell(config, name: str, horizon: int, method: str, log) -> dict:
  """Trains and evaluates one cell; returns its record (saved as cells/<name>.json)."""
  env_name, env_kwargs = cell_env(config, name)
  updates = budget_updates(config, horizon)
  cfg = method_config(config, method, env_name, env_kwargs, horizon, updates)
  train = make_train(cfg)
  seeds = int(config.seeds)
  keys = jax.random.split(jax.random.PRNGKey(int(config.seed)), seeds)
  hp = {k: jnp.full((seeds,), v, jnp.float32) for k, v in train.default_hparams.items()}
  chunk = min(int(config.chunk_updates), updates)
  watch = report.Stopwatch()
  state = jax.jit(jax.vmap(train.init))(keys, hp)
  programs = {}
  curve, done = [], 0
  while done < updates:
    n = min(chunk, updates - done)
    if n not in programs:
      programs[n] = jax.jit(jax.vmap(lambda s, h, n=n: train.run(s, h, n)))
    state, m = programs[n](state, hp)
    m = jax.device_get(m)
    curve.extend(np.asarray(m.get("success", m["return"]), np.float64).mean(axis=0))
    done += n
    log(f"{name}: update {done}/{updates} | training success {curve[-1]:.2f} | "
        f"{watch.seconds():.0f}s")
  train_s = watch.lap()
  ev = evaluate(cfg, state.params, int(config.eval_episodes),
                jax.random.PRNGKey(int(config.seed) + 1))
  per_update = train.env_steps_per_update
  wins, total = int(ev["success"].sum()), int(ev["episodes"].sum())
  low, high = report.wilson_interval(wins, total)
  g_low, g_high = report.wilson_interval(int(ev["greedy_success"].sum()), total)
  env, _ = train_lib.make_env(cfg)
  record = {
      "cell": name, "env_name": env_name, "env_kwargs": env_kwargs, "horizon": horizon,
      "method": method, "seeds": seeds, "updates": updates,
      "env_steps_per_update": per_update, "env_steps_per_seed": updates * per_update,
      "random_success": float(env.random_success()),
      "success": wins / total, "success_ci": [low, high],
      "success_per_seed": (ev["success"] / ev["episodes"]).tolist(),
      "greedy_success": float(ev["greedy_success"].sum()) / total,
      "greedy_ci": [g_low, g_high], "eval_episodes": total,
      "training_curve": curve, "train_s": train_s, "eval_s": watch.lap(),
  }
  if "apples" in ev:
    record["apple_rate"] = float(ev["apples"].sum()) / max(1, int(ev["apples_available"].sum()))
  log(f"{name}: success {record['success']:.3f} [{low:.3f}, {high:.3f}] (greedy "
      f"{record['greedy_success']:.3f}, random {record['random_success']:.3g}) | "
      f"train {train_s:.0f}s")
  return record


def _path(workdir: str, name: str) -> str:
  return os.path.join(workdir, "cells", name.replace("/", "__") + ".json")


def run(config, workdir: str, log=print) -> dict:
  """Runs every cell not yet saved, then writes summary.json and summary.md (or, with
  `config.study` "credit_horizon" / "gradient_bias", that measurement)."""
  if config.study in credit_horizon.STUDIES:
    return credit_horizon.run(config, workdir, log)
  if config.study != "cells":
    raise ConfigError(f"config.study: must be 'cells' or one of "
                      f"{credit_horizon.STUDIES}, got {config.study!r}")
  validate_config(config)
  os.makedirs(os.path.join(workdir, "cells"), exist_ok=True)
  watch = report.Stopwatch()
  records = []
  for name, horizon, _, method in cells(config):
    path = _path(workdir, name)
    if os.path.exists(path):
      with open(path) as f:
        rec = json.load(f)
      saved = (rec.get("seeds"), rec.get("updates"))
      if saved != (int(config.seeds), budget_updates(config, horizon)):
        raise ConfigError(
            f"config: {workdir} holds cell {name} at {saved[0]} seeds x {saved[1]} "
            f"updates, this config asks for {int(config.seeds)} x "
            f"{budget_updates(config, horizon)} (seeds, budget_env_steps): use another "
            f"--workdir, or the saved cell's settings")
      records.append(rec)
      continue
    if not bool(config.new_cells):
      continue
    rec = train_cell(config, name, horizon, method, log)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
      json.dump(rec, f)
    os.replace(tmp, path)
    records.append(rec)
  summary = {"cells": records, "budget_env_steps": int(config.budget_env_steps),
             "seeds": int(config.seeds), "eval_episodes": int(config.eval_episodes)}
  report.write_summary(workdir, summary, "\n".join(markdown(records, config)
                                                     + [report.wall_time(watch.seconds())]))
  return summary


def _fmt(rec) -> str:
  low, high = rec["success_ci"]
  return f"{rec['success']:.2f} [{low:.2f}, {high:.2f}]"


def seeds_passing(rec, threshold: float = 0.9) -> str:
  """"n/N": the seeds of a cell whose sampled success reached `threshold` (the gate)."""
  per_seed = np.asarray(rec.get("success_per_seed", []))
  if not per_seed.size:
    return "-"
  return f"{int(np.sum(per_seed >= threshold))}/{len(per_seed)}"


def markdown(records: List[dict], config) -> List[str]:
  """The tables: success [95% Wilson] per setting x (T, method), then the corridor."""
  by = {r["cell"]: r for r in records}
  lines = []
  methods = list(config.methods)
  horizons = [int(t) for t in config.horizons]
  header = ["setting", "random"] + [f"T={t} {m}" for t in horizons for m in methods]
  rows = []
  for s in config.settings:
    cols = [by.get(f"keychain/{s}/T{t}/{m}") for t in horizons for m in methods]
    if not any(cols):
      continue
    rand = sorted({f"{c['random_success']:.3g}" for c in cols if c})
    rows.append([s, " / ".join(rand)] + [_fmt(c) if c else "not run" for c in cols])
  if rows:
    lines += report.table(header, rows) + [""]
  rows = []
  for n in config.corridor_lengths:
    for m in methods:
      c = by.get(f"{CORRIDORS[config.corridor_env]}/L{int(n)}/{m}")
      if c:
        rows.append([f"L={int(n)}", m, _fmt(c), seeds_passing(c),
                     f"{c['greedy_success']:.2f}",
                     f"{c.get('apple_rate', float('nan')):.2f}",
                     f"{c['random_success']:.4g}"])
  if rows:
    lines += report.table([config.corridor_env, "method", "treasure rate (sampled)",
                           "seeds >= 0.9", "greedy", "apple rate", "random"], rows) + [""]
  # The learnability gate: seeds whose sampled success reached 0.9, per cell.
  rows = []
  for s in config.settings:
    for t in horizons:
      cols = [by.get(f"keychain/{s}/T{t}/{m}") for m in methods]
      if any(cols):
        rows.append([f"{s} T={t}"] + [seeds_passing(c) if c else "-" for c in cols])
  if rows:
    lines += ["Seeds reaching 0.9 (the learnability gate):", ""]
    lines += report.table(["probe"] + methods, rows) + [""]
  return lines
