"""Experiment 2: the fraction of GRPO groups that carry no signal, against difficulty.

  python3 scripts/grpo_degradation.py --config=configs/grpo_degradation.py:small \
      --workdir=/tmp/grpo_degradation

A GRPO group is K episodes of one task from the same start state. When all K rewards
are equal (all failed, or all succeeded) the group-normalised advantage is exactly 0 and
the group teaches nothing. With independent 0/1 rewards of success rate p that happens
with probability `p^K + (1 - p)^K`; this experiment measures it on KeyChain-v0 across a
difficulty sweep and draws the analytic curve over the measurements.

Difficulty: k pivotal steps, A actions and a tabular softmax policy over KeyChain
contexts (`credit_jax.diagnostics`). Uniform logits give the random policy's `(1/A)^k`,
which reaches 0.1% but not 95%; `degenerate_groups.biased_logits(A, q)` answers every
pivotal step right with probability q, so the success rate `q^k` can be set anywhere. The
policy treats every cue alike, so every task has the same success rate and the K
rewards of a group are i.i.d. Bernoulli(p): the analytic curve is exact, not a model.

Per point, K and seed, `num_tasks` groups of K members are rolled out (the seeds are
independent slices of one batch, and each K has its own rollout, so the points of
different K are independent). Points with the same (k, A) are one compiled call (the
policy bias q is a traced leaf, mapped over).

That sweep gives every task the same p, so it checks the plumbing more than GRPO. Two
more measurements (`grpo_pool.py`) leave that setting:
  pool      a task pool of mixed difficulty: each task's p drawn from Beta(a, b)
            (`pool_beta`), realised as the task's own policy bias (k = 1, A = 2, p = q);
            the measured fraction against the formula averaged over the distribution,
            E[p^K + (1 - p)^K], and against the formula at the mean p.
  training  a real GRPO run (the `grpo` recipe on a hard KeyChain, `train`): the
            degenerate fraction per update next to success, the informative window it
            opens and closes, and the update of each seed's first success against the
            waiting time 1 / (tasks K p) of a policy that cannot learn before it.

Writes into the workdir: metrics.jsonl (one record per point and K), degenerate_fraction.png
(the sweep and the pool), grpo_training_window.png, summary.json (measured and analytic
fractions per point, with standard errors and the informative range; "pool"; "training")
and summary.md.
"""
from __future__ import annotations

import collections
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax import diagnostics as dg
from credit_jax.experiments.grpo_degradation import degenerate_groups
from credit_jax import algos, envs, rollout
from credit_jax.runtime import metrics
from credit_jax.algos import ConfigError
from credit_jax.experiments.grpo_degradation import pool as grpo_pool
from credit_jax.experiments import report

__all__ = [
    "MAX_Z", "default_config", "make_measure", "markdown", "num_seeds",
    "pivotal_accuracy", "plot", "plot_pool", "point_records", "pool_markdown", "run",
    "training_markdown", "validate_config",
]

MAX_Z = 3.0   # target: every measured fraction within this many standard errors


def default_config() -> ml_collections.ConfigDict:
  """The "small" sweep: 11 difficulties from 0.1% to 95% success, K = 4, 8, 16."""
  c = ml_collections.ConfigDict()
  c.env_name = "KeyChain-v0"   # the task; its success rate is set by k, A and the policy
  c.horizon = 10               # episode length T (>= every k; degeneracy does not depend on it)
  # Difficulty points (k pivotal steps, A actions, q): q = 0 is the uniform random
  # policy, success (1/A)^k; q > 0 is a tabular policy that answers each pivotal step
  # right with probability q (degenerate_groups.biased_logits), success q^k. Points sharing
  # (k, A) share one compiled call. A must be a power of two (exactly uniform cues).
  c.difficulties = (
      (10, 2, 0.0),   # 0.098%
      (4, 4, 0.0),    # 0.39%
      (3, 4, 0.0),    # 1.6%
      (5, 2, 0.0),    # 3.1%
      (2, 4, 0.0),    # 6.3%
      (3, 2, 0.0),    # 12.5%
      (2, 2, 0.0),    # 25%
      (1, 2, 0.0),    # 50%
      (1, 2, 0.75),   # 75%
      (1, 2, 0.9),    # 90%
      (1, 2, 0.95),   # 95%
  )
  c.group_sizes = (4, 8, 16)   # K values; one rollout of max(K) per group, a K-group is its first K
  c.headline_group_size = 8    # the K whose informative range is marked (must be in group_sizes)
  c.max_degenerate = 0.5       # "informative": at most this fraction of groups degenerate
  c.num_tasks = 256            # groups (tasks, one start state each) per seed and point
  c.seeds = 16                 # independent replicates per point (slices of one batched rollout)
  c.seed = 0                   # base RNG seed
  c.parts = "pt"               # beside the sweep: p, the task pool; t, a GRPO training run
  # A task pool of mixed difficulty: per task p ~ Beta(a, b) (mean a / (a + b) = 0.1),
  # num_tasks x seeds groups per K (grpo_pool.py).
  c.pool_beta = (0.5, 4.5)
  # A real GRPO run (the `grpo` recipe config, every field documented in
  # credit_jax/algos/grpo.py): degenerate fraction and success per update, and the
  # update of each seed's first success.
  c.train = grpo_pool.training_config()
  return c


def num_seeds(config) -> int:
  """Seeds vmapped in one compiled call."""
  return int(config.seeds)


def validate_config(config) -> None:
  """Raises ConfigError naming the field when the experiment cannot run as configured."""
  for i, (k, a, q) in enumerate(config.difficulties):
    if int(a) < 2 or int(a) & (int(a) - 1):
      raise ConfigError(f"config.difficulties[{i}]: A={a} must be a power of two >= 2 "
                       "(uniform cues, so the success rate is exactly q^k)")
    if not 1 <= int(k) <= config.horizon:
      raise ConfigError(f"config.difficulties[{i}]: k={k} must lie in [1, horizon="
                       f"{config.horizon}]")
    if not 0.0 <= q < 1.0:
      raise ConfigError(f"config.difficulties[{i}]: q={q} must be 0 (uniform) or in (0, 1)")
  if min(config.group_sizes) < 2:
    raise ConfigError(f"config.group_sizes must all be >= 2, got {tuple(config.group_sizes)}")
  if config.headline_group_size not in config.group_sizes:
    raise ConfigError(f"config.headline_group_size={config.headline_group_size} must be "
                     f"one of config.group_sizes={tuple(config.group_sizes)}")
  for field in ("num_tasks", "seeds"):
    if int(config[field]) < 1:
      raise ConfigError(f"config.{field} must be >= 1, got {config[field]}")
  if set(config.parts) - set("pt"):
    raise ConfigError(f"config.parts must be made of 'p' and 't' (or empty), got "
                      f"{config.parts!r}")
  if len(config.pool_beta) != 2 or min(config.pool_beta) <= 0:
    raise ConfigError(f"config.pool_beta must be (a, b) with a, b > 0, got "
                      f"{tuple(config.pool_beta)}")
  if "t" in config.parts:
    try:
      algos.validate_config(config.train)
    except ConfigError as e:
      raise ConfigError(str(e).replace("config.", "config.train.", 1)) from None


def pivotal_accuracy(k, a, q):
  """The q of a point: the configured bias, or 1/A for the uniform policy (q = 0)."""
  del k
  return q if q > 0.0 else 1.0 / a


def make_measure(config, num_pivotal, num_actions):
  """A jitted `measure(key, qs [Q]) -> dict` for the points of one (k, A)."""
  env, env_params = envs.make(config.env_name, horizon=config.horizon,
                              num_pivotal=num_pivotal, num_actions=num_actions)
  seeds, tasks = config.seeds, config.num_tasks

  def one_point(key, q):
    success, degenerate = [], []
    for g in config.group_sizes:   # an independent rollout per K (no shared members)
      traj = rollout.collect_groups(env, env_params, dg.tabular_policy,
                                    degenerate_groups.biased_logits(num_actions, q),
                                    jax.random.fold_in(key, g), seeds * tasks, g,
                                    config.horizon)
      # One episode per member (KeyChain lasts exactly `horizon` steps); its return.
      rewards = jnp.sum(traj.rewards * traj.valid, axis=0).reshape(seeds, tasks, g)
      success.append(jnp.mean(rewards, axis=(1, 2)))
      degenerate.append(jax.vmap(degenerate_groups.degenerate_fraction)(rewards))
    return {"success": jnp.mean(jnp.stack(success), axis=0),             # [S]
            "degenerate": jnp.stack(degenerate)}                         # [G, S]

  def measure(key, qs):
    keys = jax.random.split(key, qs.shape[0])
    return jax.lax.map(lambda kq: one_point(*kq), (keys, qs))

  return jax.jit(measure)


def point_records(point, k, a, q, out, config, first_index):
  """One record per group size K for a difficulty point."""
  p = pivotal_accuracy(k, a, q) ** k
  groups = config.seeds * config.num_tasks
  recs = []
  for i, size in enumerate(config.group_sizes):
    seeds_f = np.asarray(out["degenerate"][i], np.float64)
    measured = float(np.mean(seeds_f))
    analytic = float(degenerate_groups.analytic_degenerate_fraction(p, size))
    # The standard error of a fraction of `groups` independent groups, at the analytic
    # value (the measured one can be exactly 0 or 1); the spread over seeds is reported
    # beside it as a model-free check.
    se = float(np.sqrt(max(analytic * (1.0 - analytic), 0.0) / groups))
    se_seeds = (float(np.std(seeds_f, ddof=1) / np.sqrt(len(seeds_f)))
                if len(seeds_f) > 1 else float("nan"))
    z = (measured - analytic) / se if se > 0 else (0.0 if measured == analytic else np.inf)
    recs.append({"update": first_index + i, "point": point, "num_pivotal": int(k),
                 "num_actions": int(a), "q": float(pivotal_accuracy(k, a, q)),
                 "policy": "uniform" if q == 0.0 else "biased",
                 "success_analytic": p,
                 "success_measured": float(np.mean(out["success"])),
                 "group_size": int(size), "groups": groups,
                 "degenerate_measured": measured, "degenerate_analytic": analytic,
                 "se": se, "se_seeds": se_seeds, "z": float(z),
                 "within_3se": bool(abs(z) <= MAX_Z)})
  return recs


def plot_pool(ax, pool):
  """The pool panel: measured (+-3 SE) beside the pool's formula and the formula at the
  mean p, per K."""
  sizes = np.arange(len(pool))
  width = 0.27
  for j, (key, label, colour) in enumerate((
      ("degenerate_measured", "measured (bars: 3 SE)", "C0"),
      ("degenerate_pool_analytic", "E[p^K + (1-p)^K], p ~ Beta", "C1"),
      ("degenerate_at_mean_p", "formula at the mean p", "C7"))):
    ax.bar(sizes + (j - 1) * width, [r[key] for r in pool], width, color=colour,
           label=label, yerr=[MAX_Z * r["se"] for r in pool] if j == 0 else None,
           capsize=3)
  a, b = pool[0]["beta"]
  ax.set(xticks=sizes, xticklabels=[f"K={r['group_size']}" for r in pool], ylim=(0, 1),
         ylabel="fraction of degenerate groups",
         title=f"task pool: p ~ Beta({a:g}, {b:g}), mean {pool[0]['mean_p']:.2f}")
  ax.title.set_fontsize(10)
  ax.legend(fontsize=7)


def plot(records, config, ranges, workdir, pool=None):
  """degenerate_fraction.png: measured fractions (+-3 SE) over the analytic curves, their
  z-scores, and the task pool when measured; returns its path."""
  ratios = [2, 1] + ([1] if pool else [])
  fig, axes = report.figure(1, len(ratios), figsize=(13 + 4.5 * bool(pool), 4.8),
                            gridspec_kw={"width_ratios": ratios})
  ax, axz = axes[0][:2]
  if pool:
    plot_pool(axes[0][2], pool)
  lim = (5e-4, 1 - 2e-3)
  grid = np.concatenate([np.geomspace(lim[0], 0.5, 200), 1 - np.geomspace(0.5, 1 - lim[1], 200)])
  head = config.headline_group_size
  low, high = ranges[str(head)]
  ax.axvspan(low, high, color="tab:green", alpha=0.12,
             label=f"informative for K={head}: p in [{low:.3f}, {high:.3f}]")
  ax.axhline(config.max_degenerate, color="grey", lw=0.8, ls=":")
  for i, size in enumerate(config.group_sizes):
    colour = f"C{i}"
    rows = [r for r in records if r["group_size"] == size]
    ax.plot(grid, np.asarray(degenerate_groups.analytic_degenerate_fraction(grid, size)),
            color=colour, lw=1.5 if size == head else 1.0, label=f"p^K + (1-p)^K, K={size}")
    ax.errorbar([r["success_analytic"] for r in rows],
                [r["degenerate_measured"] for r in rows],
                yerr=[MAX_Z * r["se"] for r in rows], fmt="o", ms=4, color=colour,
                capsize=2, label=f"measured, K={size} (bars: 3 SE)")
    axz.plot([r["success_analytic"] for r in rows], [r["z"] for r in rows], "o",
             color=colour, ms=4, label=f"K={size}")
  for a in (ax, axz):
    a.set_xscale("logit")
    a.set_xlim(*lim)
    a.set_xlabel("success rate p")
    a.grid(alpha=0.3)
  ax.set_ylabel("fraction of degenerate groups (advantage 0)")
  ax.set_ylim(-0.02, 1.02)
  ax.set_title("GRPO on KeyChain-v0: groups with all-equal rewards", fontsize=10)
  ax.legend(fontsize=7, loc="center left")
  axz.axhspan(-MAX_Z, MAX_Z, color="grey", alpha=0.15)
  axz.set_ylabel("(measured - analytic) / SE")
  axz.set_title("agreement with the analytic curve", fontsize=10)
  axz.legend(fontsize=7)
  return report.save_figure(fig, workdir, "degenerate_fraction.png")


def markdown(summary, records):
  """summary.md: what was measured, the targets, and a table per point."""
  s = summary
  head = s["headline_group_size"]
  low, high = s["informative_range"][str(head)]
  lines = [
      "# Experiment 2: GRPO degenerate groups against difficulty (KeyChain-v0)", "",
      f"{s['groups_per_point']} groups per point ({s['seeds']} seeds x "
      f"{s['num_tasks']} tasks), group sizes K = {', '.join(map(str, s['group_sizes']))}. "
      "A group is degenerate when its K rewards are all equal: its GRPO advantages are "
      "exactly 0. With i.i.d. rewards of success rate p this happens with probability "
      f"p^K + (1-p)^K. Compute per point and K: seeds x tasks groups of K episodes of "
      f"{s.get('horizon', '?')} env steps at a fixed policy. "
      f"{report.wall_time(s['wall_seconds'])}", "",
      f"- Informative range (at most {s['max_degenerate']:.0%} of groups degenerate): "
      + "; ".join(f"K={kk}: p in [{lo:.4f}, {hi:.4f}]"
                  for kk, (lo, hi) in s["informative_range"].items()) + ".",
      f"- For K={head}, a task solved less than {low:.1%} or more than {high:.1%} of the "
      "time gives no gradient in most of its groups: the curve is flat at 1 on both "
      "ends. On a hard task that means waiting, not never: see the training run below.",
      "- Every task here has the same p and the policy treats every cue alike, so the K "
      "rewards of a group are i.i.d. Bernoulli(p) by construction: the agreement checks "
      "the measurement, not GRPO. Each K has its own rollouts (independent points).",
      f"- Target (every measured fraction within {MAX_Z:g} standard errors of the "
      f"analytic one): {'met' if s['all_within_3se'] else 'NOT met'}; largest |z| "
      f"{s['max_abs_z']:.2f}.", ""]
  lines += report.table(
      ("k", "A", "policy q", "p", "p measured", "K", "degenerate measured", "analytic",
       "SE", "z"),
      [(r["num_pivotal"], r["num_actions"], f"{r['q']:.3f} ({r['policy']})",
        f"{r['success_analytic']:.4g}", f"{r['success_measured']:.4g}", r["group_size"],
        f"{r['degenerate_measured']:.4f}", f"{r['degenerate_analytic']:.4f}",
        f"{r['se']:.4f}", f"{r['z']:+.2f}") for r in records])
  if "pool" in s:
    lines += pool_markdown(s["pool"])
  if "training" in s:
    lines += training_markdown(s["training"], s["max_degenerate"])
  return "\n".join(lines + [""])


def pool_markdown(pool):
  """summary.md lines of the task pool."""
  a, b = pool[0]["beta"]
  lines = ["", f"## A task pool of mixed difficulty: p ~ Beta({a:g}, {b:g}) per task", "",
           f"Mean p {pool[0]['mean_p']:.3f}; {pool[0]['groups']} groups (tasks) per K, "
           "each with its own p. The formula averaged over the distribution, "
           "E[p^K] + E[(1-p)^K], against the formula at the mean p: p^K + (1-p)^K is "
           "convex, so a pool with the same mean success wastes more groups.", ""]
  lines += report.table(
      ("K", "measured", "E[p^K + (1-p)^K]", "given the drawn p's", "at the mean p", "SE",
       "z"),
      [(r["group_size"], f"{r['degenerate_measured']:.4f}",
        f"{r['degenerate_pool_analytic']:.4f}", f"{r['degenerate_given_draws']:.4f}",
        f"{r['degenerate_at_mean_p']:.4f}", f"{r['se']:.4f}", f"{r['z']:+.2f}")
       for r in pool])
  return lines


def training_markdown(t, max_degenerate):
  """summary.md lines of the GRPO training run."""
  kw = t["env_kwargs"]
  firsts = ", ".join("never" if f is None else str(f) for f in t["first_success_update"])
  windows = [w for w in t["informative_window"] if w is not None]
  return [
      "", "## During GRPO training", "",
      f"The `grpo` recipe (MLP policy, lr {t['lr']:g}) on KeyChain T = {kw['horizon']}, "
      f"k = {kw['num_pivotal']}, A = {kw['num_actions']} (initial success p = "
      f"{t['initial_success_rate']:.3g}), {t['num_tasks']} tasks x K = {t['group_size']} "
      f"episodes per update, {t['updates']} updates, {t['seeds']} seeds. Compute: "
      f"{t['episodes_per_update']} episodes of {kw['horizon']} env steps per update. "
      f"Figure: grpo_training_window.png.", "",
      f"- First success (update whose rollout had one), per seed: {firsts}. Mean over the "
      f"{t['seeds_with_success']} seeds that had one: {t['first_success_mean']:.1f} +- "
      f"{t['first_success_interval']:.1f} (95% t), median {t['first_success_median']}; "
      f"1 / (tasks K p) = {t['expected_wait_formula']:.1f}, the geometric law's mean "
      f"1 / (1 - (1-p)^(N K)) = {t['expected_wait_geometric']:.1f} (chance of no "
      f"success in {t['updates']} updates: {t['p_never_geometric']:.2g}). Before it "
      "every advantage is 0 and the policy does not move.",
      f"- Informative window (updates with at most {max_degenerate:.0%} of groups "
      f"degenerate): {t['informative_updates_mean']:.1f} updates per seed on average"
      + (f"; first opened at update {min(w[0] for w in windows)}, last closed at "
         f"{max(w[1] for w in windows)}" if windows else "; never opened") + ". "
      f"Final success (last 5 updates, seed mean) {t['final_success_mean']:.2f}.",
      f"- {t['seeds_with_success']} of {t['seeds']} seeds had a first success and "
      f"{sum(h is not None for h in t['half_success_update'])} reached 50% sampled "
      f"success within {t['updates']} updates (update of 50% per seed: "
      + ", ".join("never" if h is None else str(h) for h in t["half_success_update"])
      + f"). The seed-mean degenerate fraction fell to {t['min_degenerate_mean']:.2f} and "
      f"was {t['final_degenerate_mean']:.2f} over the last 5 updates."]


def run(config, workdir: str, log=print) -> dict:
  """Runs the sweep; writes metrics, the figure and summaries into `workdir`.

  Returns the summary (also summary.json): measured and analytic fractions per point and
  K, with standard errors, z-scores and the informative success range per K.
  """
  validate_config(config)
  by_env = collections.defaultdict(list)   # (k, A) -> [(point index, q)]
  for i, (k, a, q) in enumerate(config.difficulties):
    by_env[(int(k), int(a))].append((i, float(q)))
  key = jax.random.key(config.seed)
  os.makedirs(workdir, exist_ok=True)
  records, watch, done = [], report.Stopwatch(), 0
  with metrics.MetricsWriter(workdir, tensorboard=False) as writer:
    for (k, a), points in by_env.items():
      lap = report.Stopwatch()
      qs = jnp.asarray([pivotal_accuracy(k, a, q) for _, q in points], jnp.float32)
      out = jax.device_get(make_measure(config, k, a)(jax.random.fold_in(key, 1000 * k + a),
                                                      qs))
      for j, (i, q) in enumerate(points):
        recs = point_records(i, k, a, q, jax.tree.map(lambda x, j=j: x[j], out), config,
                             len(records) + 1)
        writer.write_records(recs)
        records += recs
        done += 1
        head = next(r for r in recs if r["group_size"] == config.headline_group_size)
        log(f"point {done:>2}/{len(config.difficulties)} k={k} A={a} "
            f"q={head['q']:.3f} p={head['success_analytic']:.4g} | K={head['group_size']} "
            f"degenerate {head['degenerate_measured']:.4f} (analytic "
            f"{head['degenerate_analytic']:.4f}, z {head['z']:+.2f}) | "
            f"{lap.seconds():.1f}s for (k, A)")
  records.sort(key=lambda r: (r["point"], r["group_size"]))
  ranges = {str(g): degenerate_groups.informative_success_range(g, config.max_degenerate)
            for g in config.group_sizes}
  summary = {
      "points": [{key_: r[key_] for key_ in (
          "num_pivotal", "num_actions", "q", "policy", "success_analytic",
          "success_measured", "group_size", "degenerate_measured", "degenerate_analytic",
          "se", "se_seeds", "z", "within_3se")} for r in records],
      "informative_range": {g: list(v) for g, v in ranges.items()},
      "max_degenerate": float(config.max_degenerate),
      "headline_group_size": int(config.headline_group_size),
      "group_sizes": [int(g) for g in config.group_sizes],
      "all_within_3se": all(r["within_3se"] for r in records),
      "max_abs_z": max(abs(r["z"]) for r in records),
      "seeds": int(config.seeds), "num_tasks": int(config.num_tasks),
      "groups_per_point": int(config.seeds * config.num_tasks),
      "horizon": int(config.horizon)}
  pool = None
  if "p" in config.parts:
    lap = report.Stopwatch()
    pool = grpo_pool.pool_records(jax.device_get(grpo_pool.make_pool_measure(config)(
        jax.random.fold_in(key, 7))), config)
    summary["pool"] = pool
    log("pool " + ", ".join(f"K={r['group_size']} {r['degenerate_measured']:.4f} (formula "
                            f"{r['degenerate_pool_analytic']:.4f}, at mean p "
                            f"{r['degenerate_at_mean_p']:.4f})" for r in pool)
        + f" | {lap.seconds():.1f}s")
  if "t" in config.parts:
    curves = grpo_pool.run_training(config.train)
    summary["training"] = grpo_pool.training_summary(curves, config.train,
                                                     config.max_degenerate)
    grpo_pool.plot_training(curves, summary["training"], workdir, config.max_degenerate)
    t = summary["training"]
    log(f"training: first success at updates {t['first_success_update']} (1/(tasks K p) "
        f"= {t['expected_wait_formula']:.1f}); final success {t['final_success_mean']:.2f} "
        f"| compile {t['compile_seconds']:.0f} s, run {t['run_seconds']:.0f} s")
  summary["wall_seconds"] = watch.seconds()
  plot(records, config, ranges, workdir, pool)
  report.write_summary(workdir, summary, markdown(summary, records))
  log(f"all within {MAX_Z:g} SE: {summary['all_within_3se']} (max |z| "
      f"{summary['max_abs_z']:.2f})")
  return summary

