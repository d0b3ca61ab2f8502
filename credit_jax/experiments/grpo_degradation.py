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
which reaches 0.1% but not 95%; `diagnostics.biased_logits(A, q)` answers every pivotal
step right with probability q, so the success rate `q^k` can be set anywhere. The
policy treats every cue alike, so every task has the same success rate and the K
rewards of a group are i.i.d. Bernoulli(p): the analytic curve is exact, not a model.

Per point and seed, `num_tasks` groups of max(K) members are rolled out in one batch
(the seeds are independent slices of it); a group of size K is the first K members of
each group, so all K share the rollout. Points with the same (k, A) are one compiled
call (the policy bias q is a traced leaf, mapped over).

Writes into the workdir: metrics.jsonl (one record per point and K), degenerate_fraction.png,
summary.json (measured and analytic fractions per point, with standard errors and the
informative range) and summary.md.
"""
from __future__ import annotations

import collections
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax import diagnostics as dg
from credit_jax import envs, metrics, rollout
from credit_jax.algos import ConfigError
from credit_jax.experiments import report

MAX_Z = 3.0   # target: every measured fraction within this many standard errors


def default_config() -> ml_collections.ConfigDict:
  """The "small" sweep: 11 difficulties from 0.1% to 95% success, K = 4, 8, 16."""
  c = ml_collections.ConfigDict()
  c.env_name = "KeyChain-v0"   # the task; its success rate is set by k, A and the policy
  c.horizon = 10               # episode length T (>= every k; degeneracy does not depend on it)
  # Difficulty points (k pivotal steps, A actions, q): q = 0 is the uniform random
  # policy, success (1/A)^k; q > 0 is a tabular policy that answers each pivotal step
  # right with probability q (diagnostics.biased_logits), success q^k. Points sharing
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


def pivotal_accuracy(k, a, q):
  """The q of a point: the configured bias, or 1/A for the uniform policy (q = 0)."""
  del k
  return q if q > 0.0 else 1.0 / a


def make_measure(config, num_pivotal, num_actions):
  """A jitted `measure(key, qs [Q]) -> dict` for the points of one (k, A)."""
  env, env_params = envs.make(config.env_name, horizon=config.horizon,
                              num_pivotal=num_pivotal, num_actions=num_actions)
  k_max, seeds, tasks = max(config.group_sizes), config.seeds, config.num_tasks

  def one_point(key, q):
    traj = rollout.collect_groups(env, env_params, dg.tabular_policy,
                                  dg.biased_logits(num_actions, q), key, seeds * tasks,
                                  k_max, config.horizon)
    # One episode per member (KeyChain lasts exactly `horizon` steps); its return.
    rewards = jnp.sum(traj.rewards * traj.valid, axis=0).reshape(seeds, tasks, k_max)
    return {"success": jnp.mean(rewards, axis=(1, 2)),                   # [S]
            "degenerate": jnp.stack([jax.vmap(dg.degenerate_fraction)(rewards[..., :g])
                                     for g in config.group_sizes])}      # [G, S]

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
    analytic = float(dg.analytic_degenerate_fraction(p, size))
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


def plot(records, config, ranges, workdir):
  """degenerate_fraction.png: measured fractions (+-3 SE) over the analytic curves, and
  their z-scores; returns its path."""
  fig, axes = report.figure(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [2, 1]})
  ax, axz = axes[0]
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
    ax.plot(grid, np.asarray(dg.analytic_degenerate_fraction(grid, size)), color=colour,
            lw=1.5 if size == head else 1.0, label=f"p^K + (1-p)^K, K={size}")
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
      f"p^K + (1-p)^K. {report.wall_time(s['wall_seconds'])}", "",
      f"- Informative range (at most {s['max_degenerate']:.0%} of groups degenerate): "
      + "; ".join(f"K={kk}: p in [{lo:.4f}, {hi:.4f}]"
                  for kk, (lo, hi) in s["informative_range"].items()) + ".",
      f"- For K={head}, a task solved less than {low:.1%} or more than {high:.1%} of the "
      "time gives no gradient in most of its groups: the curve is flat at 1 on both "
      "ends, so GRPO alone cannot start on a hard task or finish an easy one.",
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
  return "\n".join(lines + [""])


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
  ranges = {str(g): dg.informative_success_range(g, config.max_degenerate)
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
      "wall_seconds": watch.seconds()}
  plot(records, config, ranges, workdir)
  report.write_summary(workdir, summary, markdown(summary, records))
  log(f"all within {MAX_Z:g} SE: {summary['all_within_3se']} (max |z| "
      f"{summary['max_abs_z']:.2f})")
  return summary

