"""Exercise 5: tree search vs sampling on KeyChain-v0, and what search buys GRPO.

  python3 scripts/tree_search.py --config=configs/tree_search.py:small --workdir=/tmp/ts
  summary = tree_search.run(tree_search.default_config(), workdir)

Part A, per difficulty point (k pivotal steps, policy q), on `num_tasks` start states:
  * sampling: K episodes per task (GRPO's budget); success = any of them succeeded;
  * search: `credit_jax.search` from the same start state with the same policy as prior;
    success = it found a complete successful episode; its env steps are counted exactly
    (expansions + rollouts);
  * sampling at matched compute: M = (search env steps per task) / T episodes per task.
The policy is tabular (`credit_jax.diagnostics`): uniform (random success (1/A)^k) or
answering each pivotal step right with probability q (success q^k), so the sampling
success is known exactly, `1 - (1 - p)^K`; the multipliers use it (the measured value is
reported beside it and can be 0 at these rates). Success multiplier = search success /
sampling success; compute multiplier = search env steps / sampling env steps.

Part B trains `search_then_train` with search on and off (the off arm is GRPO with the same
loss), seeds vmapped, and plots sampled and greedy success against updates and against
env steps (search steps included).

`config.parts` picks the parts ("ab", or "a" / "b" alone). Writes into the workdir:
metrics.jsonl (one record per point, then per update and arm), search_vs_sampling.png
(part A), training_curves.png (part B), summary.json and summary.md.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax import diagnostics as dg
from credit_jax import envs, metrics, rollout
from credit_jax import search as search_lib
from credit_jax.algos import ConfigError
from credit_jax.algos import common
from credit_jax.algos import search_then_train as stt
from credit_jax.experiments import report

def train_config(horizon: int, num_pivotal: int):
  """Part B's search-then-train recipe config: the recipe's `default_config()` on KeyChain
  with episodes of `horizon` steps and `num_pivotal` pivotal steps, 4 seeds, 40 updates.

  The same recipe alone, for scripts/train.py: configs/search_then_train_keychain.py.
  """
  c = common.keychain_env(stt.default_config(), horizon, num_pivotal)
  c.seeds = 4                     # seeds vmapped in one compiled call
  c.num_updates = 40              # updates (one group rollout each)
  return c



def default_config() -> ml_collections.ConfigDict:
  """The "small" run: six difficulty points, then part B at T = 10, k = 6."""
  c = ml_collections.ConfigDict()
  c.parts = "ab"                 # which parts run: a (search vs sampling), b (training)
  c.seed = 0                     # base RNG seed
  c.env_name = "KeyChain-v0"
  c.horizon = 10                 # episode length T, and the search's max_depth
  c.num_actions = 4              # A
  # Part A points (k pivotal steps, q): q = 0 is the uniform policy, random success
  # (1/A)^k; q > 0 a tabular policy answering each pivotal step right with probability q
  # (credit_jax.diagnostics.biased_logits), success q^k: a partly trained prior.
  c.difficulties = ((2, 0.0), (4, 0.0), (5, 0.0), (7, 0.0), (7, 0.5), (10, 0.5))
  c.num_tasks = 128              # tasks (start states) per point
  c.group_size = 8               # K: episodes per task GRPO would sample
  c.search = ml_collections.ConfigDict()
  c.search.simulations = 256     # per task
  c.search.selection = "puct"    # puct | ucb1
  c.search.rollout = "sample"    # sample | greedy
  c.search.exploration = 1.25    # PUCT/UCB1 constant
  # Part B: GRPO with and without search at one difficulty (random success 2.4e-4: about
  # one success per 30 updates of 128 sampled episodes).
  c.train = train_config(horizon=10, num_pivotal=6)
  c.train.num_updates = 60
  return c


def num_seeds(config) -> int:
  """Seeds vmapped in part B's compiled call (part A batches tasks, not seeds)."""
  return int(config.train.seeds)


def validate_config(config) -> None:
  """Raises ConfigError naming the field when the experiment cannot run as configured."""
  if not config.parts or set(config.parts) - set("ab"):
    raise ConfigError(f"config.parts must be made of 'a' and 'b', got {config.parts!r}")
  a = int(config.num_actions)
  if a < 2 or a & (a - 1):
    raise ConfigError(f"config.num_actions={a} must be a power of two >= 2 (uniform cues)")
  for i, (k, q) in enumerate(config.difficulties):
    if not 1 <= int(k) <= config.horizon:
      raise ConfigError(f"config.difficulties[{i}]: k={k} must lie in [1, horizon="
                       f"{config.horizon}]")
    if not 0.0 <= q < 1.0:
      raise ConfigError(f"config.difficulties[{i}]: q={q} must be 0 (uniform) or in (0, 1)")
  for field in ("num_tasks", "group_size"):
    if int(config[field]) < 1:
      raise ConfigError(f"config.{field} must be >= 1, got {config[field]}")
  if int(config.search.simulations) < 1:
    raise ConfigError(f"config.search.simulations must be >= 1, got "
                     f"{config.search.simulations}")
  stt.validate_config(config.train)


def success_rate(k, q, num_actions):
  """Per-episode success of the point's policy: q^k, or (1/A)^k for the uniform one."""
  return (q if q > 0.0 else 1.0 / num_actions) ** k


def _table(num_actions, q):
  """The tabular policy's [A + 1, A] logits (uniform when q = 0)."""
  if q > 0.0:
    return dg.biased_logits(num_actions, q)
  return jnp.zeros((num_actions + 1, num_actions), jnp.float32)


def _any_success(env, env_params, table, key, obs0, states0, episodes):
  """[N] bool: any of `episodes` sampled episodes from each start state succeeded."""
  n = obs0.shape[0]
  obs, states = jax.tree.map(lambda x: jnp.repeat(x, episodes, axis=0), (obs0, states0))
  traj, _ = rollout.collect(env, env_params, dg.tabular_policy, table, key, states, obs,
                            int(env.horizon))
  valid = rollout.first_episode_mask(traj.terminated, traj.truncated)
  ret = jnp.sum(jnp.where(valid, traj.rewards, 0.0), axis=0).reshape(n, episodes)
  return jnp.any(ret > 0, axis=1), jnp.sum(valid).astype(jnp.float32) / n


def measure_point(config, k, q, key):
  """Part A for one point: a dict of rates and env steps per task."""
  a, horizon, n, group = (int(config.num_actions), int(config.horizon),
                          int(config.num_tasks), int(config.group_size))
  env, env_params = envs.make(config.env_name, horizon=horizon, num_pivotal=int(k),
                              num_actions=a)
  table = _table(a, q)
  search_fn = search_lib.make_search(
      env, lambda t, obs: t[dg.keychain_context(obs, a)],
      num_simulations=int(config.search.simulations), max_depth=horizon,
      selection=config.search.selection, rollout=config.search.rollout)
  k_reset, k_sample, k_search, k_matched = jax.random.split(key, 4)
  obs0, states0 = rollout.reset(env, env_params, k_reset, n)

  @jax.jit
  def sample_and_search(table, obs0, states0):
    sampled, sample_steps = _any_success(env, env_params, table, k_sample, obs0, states0,
                                         group)
    out = search_fn(table, env_params, k_search, states0, obs0,
                    exploration=config.search.exploration)
    return (sampled, sample_steps, out.stats.success, out.stats.env_steps,
            out.stats.tree_depth)
  sampled, sample_steps, found, search_steps, depth = jax.device_get(
      sample_and_search(table, obs0, states0))
  steps = float(np.mean(search_steps))
  matched = max(1, int(round(steps / horizon)))
  matched_ok, _ = jax.device_get(jax.jit(
      lambda t, o, s: _any_success(env, env_params, t, k_matched, o, s, matched))(
          table, obs0, states0))
  p = success_rate(k, q, a)
  exact_k = 1.0 - (1.0 - p) ** group
  exact_m = 1.0 - (1.0 - p) ** matched
  search_rate = float(np.mean(found))
  return {
      "num_pivotal": int(k), "q": float(q if q > 0 else 1.0 / a),
      "policy": "uniform" if q == 0.0 else "biased", "episode_success": p,
      "group_size": group, "sampling_success": exact_k,
      "sampling_success_measured": float(np.mean(sampled)),
      "search_success": search_rate,
      "search_env_steps": steps, "sampling_env_steps": float(sample_steps),
      "compute_multiplier": steps / float(sample_steps),
      "success_multiplier": search_rate / exact_k,
      "matched_episodes": matched, "matched_sampling_success": exact_m,
      "matched_sampling_success_measured": float(np.mean(matched_ok)),
      "matched_success_multiplier": search_rate / exact_m,
      "search_tree_depth": float(np.mean(depth)), "tasks": n,
      "simulations": int(config.search.simulations)}


def train_arms(config, key, log):
  """Part B: {arm: metrics {name: [seeds, updates]}} for search on and off."""
  arms = {}
  for arm, every in (("search", int(config.train.search_every) or 1), ("grpo", 0)):
    c = config.train.copy_and_resolve_references()
    c.search_every = every
    train = stt.make_train(c)
    keys = jax.random.split(key, int(c.seeds))
    (_, m), compile_s, run_s = report.compile_and_run(jax.vmap(train), keys)
    arms[arm] = {k: np.asarray(v) for k, v in m.items()}
    log(f"train {arm:6s}: final success {arms[arm]['success'][:, -5:].mean():.3f}, greedy "
        f"{arms[arm]['greedy_success'][:, -5:].mean():.3f} (compile {compile_s:.1f}s, "
        f"run {run_s:.1f}s)")
  return arms


def _env_steps(m):
  return np.cumsum(m["sample_env_steps"] + m["search_env_steps"], axis=1)


def plot_points(points, workdir):
  """search_vs_sampling.png: part A's success rates and multipliers; returns its path."""
  fig, axes = report.figure(1, 2, figsize=(12, 4.5))
  ax, axm = axes[0]
  x = np.arange(len(points))
  labels = [f"k={p['num_pivotal']}\nq={p['q']:.2f}\np={p['episode_success']:.1e}"
            for p in points]
  for offset, (key, label) in zip((-0.27, 0.0, 0.27), (
      ("sampling_success", "sampling, K per task (exact)"),
      ("matched_sampling_success", "sampling at search's compute (exact)"),
      ("search_success", "tree search (measured)"))):
    ax.bar(x + offset, [max(p[key], 1e-6) for p in points], width=0.27, label=label)
  ax.set_yscale("log")
  ax.set_ylim(1e-6, 1.5)
  ax.set_xticks(x, labels, fontsize=7)
  ax.set_ylabel("tasks solved")
  ax.set_title("KeyChain-v0: success per task", fontsize=10)
  ax.legend(fontsize=7)
  axm.plot(x, [p["success_multiplier"] for p in points], "o-", label="success multiplier (vs K)")
  axm.plot(x, [p["matched_success_multiplier"] for p in points], "s-",
           label="success multiplier (vs matched compute)")
  axm.plot(x, [p["compute_multiplier"] for p in points], "^--", label="compute multiplier")
  axm.axhline(1.0, color="grey", lw=0.8)
  axm.set_yscale("log")
  axm.set_xticks(x, labels, fontsize=7)
  axm.legend(fontsize=7)
  axm.set_title("search over sampling", fontsize=10)
  return report.save_figure(fig, workdir, "search_vs_sampling.png")


def plot_training(arms, workdir):
  """training_curves.png: part B's success against updates and env steps; its path."""
  fig, axes = report.figure(1, 3, figsize=(15, 4.2))
  axes = axes[0]
  for i, (arm, m) in enumerate(arms.items()):
    updates = np.arange(1, m["success"].shape[1] + 1)
    steps = _env_steps(m).mean(0)
    for ax, xs, key, style in ((axes[0], updates, "success", "-"),
                               (axes[0], updates, "greedy_success", ":"),
                               (axes[1], steps, "success", "-")):
      mean = m[key].mean(0)
      ax.plot(xs, mean, style, color=f"C{i}", label=f"{arm}: {key}")
      ax.fill_between(xs, m[key].min(0), m[key].max(0), color=f"C{i}", alpha=0.12)
    axes[2].plot(updates, m["degenerate_frac"].mean(0), color=f"C{i}", label=arm)
  search = arms["search"]
  searched = search["searched_tasks"].sum(0)
  found = (search["search_found"] * search["searched_tasks"]).sum(0)
  axes[2].plot(np.arange(1, searched.shape[0] + 1),
               np.where(searched > 0, found / np.maximum(searched, 1), np.nan), "--",
               color="C0", label="search: found (of the failed tasks searched)")
  axes[0].set_xlabel("update")
  axes[1].set_xlabel("env steps (sampling + search)")
  axes[1].set_xscale("log")
  axes[2].set_xlabel("update")
  axes[0].set_ylabel("success")
  axes[2].set_ylabel("fraction")
  axes[0].set_title("success (mean; band: seed range)", fontsize=10)
  axes[1].set_title("success against compute", fontsize=10)
  axes[2].set_title("degenerate groups; search success on failed tasks", fontsize=10)
  for ax in axes:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  return report.save_figure(fig, workdir, "training_curves.png")


def markdown(summary):
  """summary.md: part A's table and part B's, for the parts that ran."""
  s = summary
  lines = ["# Exercise 5: tree search vs sampling (KeyChain-v0)", "",
           f"{report.wall_time(s['wall_seconds'])}", ""]
  if "points" in s:
    lines += _markdown_points(s)
  if "training" in s:
    lines += _markdown_training(s["training"])
  return "\n".join(lines + [""])


def _markdown_points(s):
  lines = [
      "## Sampling against search, per difficulty", "",
      f"T = {s['horizon']}, A = {s['num_actions']}, {s['num_tasks']} tasks per point, "
      f"K = {s['group_size']} samples per task, search: {s['simulations']} simulations "
      f"({s['selection']}, {s['rollout']} rollouts) with the policy as prior. Sampling "
      "success is exact (`1 - (1 - p)^K`; measured beside it); search success is measured.",
      ""]
  lines += report.table(
      ("k", "policy q", "p (one episode)", "sampling@K", "(measured)", "search",
       "success x", "compute x", "matched M", "sampling@M", "success x at matched compute"),
      [(p["num_pivotal"], f"{p['q']:.2f} ({p['policy']})", f"{p['episode_success']:.2e}",
        f"{p['sampling_success']:.2e}", f"{p['sampling_success_measured']:.3f}",
        f"{p['search_success']:.3f}", f"{p['success_multiplier']:.3g}",
        f"{p['compute_multiplier']:.3g}", p["matched_episodes"],
        f"{p['matched_sampling_success']:.2e}", f"{p['matched_success_multiplier']:.3g}")
       for p in s["points"]])
  return lines + [""]


def _markdown_training(t):
  lines = [
      "## GRPO with and without search", "",
      f"KeyChain T = {t['horizon']}, k = {t['num_pivotal']} (random success "
      f"{t['episode_success']:.2e}), {t['num_updates']} updates x {t['num_tasks']} tasks x "
      f"K = {t['group_size']}, {t['seeds']} seeds; search on every "
      f"{t['search_every']} update(s), {t['search_simulations']} simulations on up to "
      f"{t['search_tasks']} all-failed tasks, weight {t['search_weight']}.", ""]
  lines += report.table(
      ("arm", "sampled success (last 5 updates)", "greedy success", "env steps",
       "search found (failed tasks)", "searched log-prob / step"),
      [(arm, f"{r['success_last5']:.3f}", f"{r['greedy_success_last5']:.3f}",
        f"{r['env_steps']:.3g}", f"{r['search_found']:.3f}", f"{r['searched_logp_step']:.3f}")
       for arm, r in t["arms"].items()])
  return lines


def training_summary(train_config, arms):
  """Part B's summary: the run's shape and per arm its final rates and mean curves."""
  tc = train_config
  def arm_summary(m):
    ran, found = m["search_ran"] > 0, m["search_found"] > 0
    return {"success_last5": float(m["success"][:, -5:].mean()),
            "greedy_success_last5": float(m["greedy_success"][:, -5:].mean()),
            "env_steps": float(_env_steps(m)[:, -1].mean()),
            "search_found": float(m["search_found"][ran].mean()) if ran.any() else 0.0,
            "searched_logp_step": (float(m["searched_logp_step"][found].mean())
                                   if found.any() else 0.0),
            "success_curve": m["success"].mean(0).tolist(),
            "greedy_success_curve": m["greedy_success"].mean(0).tolist()}
  return {
      "horizon": int(tc.env_kwargs.horizon), "num_pivotal": int(tc.env_kwargs.num_pivotal),
      "episode_success": float((1.0 / tc.env_kwargs.num_actions)
                               ** tc.env_kwargs.num_pivotal),
      "num_updates": int(tc.num_updates), "num_tasks": int(tc.num_tasks),
      "group_size": int(tc.group_size), "seeds": int(tc.seeds),
      "search_every": int(tc.search_every) or 1, "search_tasks": int(tc.search_tasks),
      "search_simulations": int(tc.search_simulations),
      "search_weight": float(tc.search_weight),
      "arms": {arm: arm_summary(m) for arm, m in arms.items()}}


def _part_a(config, key, writer, log):
  """Part A: one dict per difficulty point (`measure_point`), logged and recorded."""
  points = []
  for i, (k, q) in enumerate(config.difficulties):
    lap = report.Stopwatch()
    p = measure_point(config, k, q, jax.random.fold_in(key, i))
    points.append(p)
    writer.write_records([{"update": i + 1, "part": "A", **p}])
    log(f"point {i + 1}/{len(config.difficulties)} k={k} q={p['q']:.2f} "
        f"p={p['episode_success']:.1e}: sampling@{p['group_size']} "
        f"{p['sampling_success']:.2e} (measured {p['sampling_success_measured']:.3f}), "
        f"search {p['search_success']:.3f} | x{p['success_multiplier']:.3g} success at "
        f"x{p['compute_multiplier']:.3g} compute | {lap.seconds():.1f}s")
  return points


def run(config, workdir: str, log=print) -> dict:
  """Runs the parts named by `config.parts`; writes metrics, figures and summaries.

  Returns the summary (also summary.json): "points" (part A, one dict per difficulty)
  and "training" (part B, `training_summary`).
  """
  validate_config(config)
  os.makedirs(workdir, exist_ok=True)
  key = jax.random.key(config.seed)
  watch = report.Stopwatch()
  summary = {"horizon": int(config.horizon), "num_actions": int(config.num_actions),
             "num_tasks": int(config.num_tasks), "group_size": int(config.group_size),
             "simulations": int(config.search.simulations),
             "selection": config.search.selection, "rollout": config.search.rollout}
  with metrics.MetricsWriter(workdir, tensorboard=False) as writer:
    if "a" in config.parts:
      summary["points"] = _part_a(config, key, writer, log)
      plot_points(summary["points"], workdir)
    if "b" in config.parts:
      arms = train_arms(config, jax.random.fold_in(key, 10_000), log)
      first = len(summary.get("points", ()))
      for arm, m in arms.items():
        mean = {k: v.mean(0) for k, v in m.items()}
        writer.write_records(
            [{"update": first + u + 1, "part": "B", "arm": arm, "train_update": u + 1,
              **{k: float(v[u]) for k, v in mean.items()}}
             for u in range(m["success"].shape[1])])
      plot_training(arms, workdir)
      summary["training"] = training_summary(config.train, arms)
  summary["wall_seconds"] = watch.seconds()
  return report.write_summary(workdir, summary, markdown(summary))
