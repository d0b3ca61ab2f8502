"""Figures and summary.md of the PRM experiment (credit_jax/experiments/prm/study.py).

  prm_training.png   part A: success, PRM score, gap, padding, surface, wrong-surface
  prm_labels.png     part B: MC hard-label agreement and soft-label RMSE against N
  prm_compounding.png part C: P(all T steps judged right) against a^T
  prm_rerank.png     part D: best-of-N success, and padding / answered of the pick
  prm_ppo.png        part E: PPO success against env steps, outcome vs per-step PRM
All figures are drawn off-screen (`report.figure`); every interval is a 95% t-interval
over seeds (`report.t_interval`).
"""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from credit_jax.experiments import report

ci95 = report.t_interval
# What part D reads at each ranker's pick (means over problems, per seed).
FEATURES = ("success", "answered", "length", "padding", "surface", "wrong_surface",
            "step_accuracy", "demo_prm_score")


def _curves(ax, curves: Dict[str, np.ndarray], steps: int, dashed_after: int = 10):
  for i, (name, r) in enumerate(curves.items()):
    mean, half = ci95(r)
    x = (np.arange(mean.shape[0]) + 1) * steps
    ax.plot(x, mean, label=name, linestyle="-" if i < dashed_after else "--")
    ax.fill_between(x, mean - half, mean + half, alpha=0.2)
  ax.set_xlabel("env steps")


def figures(c, res_a, res_b, res_c, res_d, res_e, workdir: str) -> None:
  """Writes the figures of the parts that ran into `workdir`."""
  if res_a:
    steps = int(c.grpo.num_tasks) * int(c.grpo.group_size) * int(c.grpo.horizon)
    fig, axes = report.figure(2, 3, figsize=(15, 8))
    for ax, k in zip(axes.flat, ("success", "prm_score", "prm_gap", "padding_frac",
                                 "surface_frac", "surface_wrong_frac")):
      _curves(ax, {n: r[k] for n, r in res_a.items()}, steps)
      ax.set_title(k)
    axes[0, 0].legend(fontsize=7)
    report.save_figure(fig, workdir, "prm_training.png", dpi=100)
  if res_b["mc"]:
    fig, axes = report.figure(1, 2, figsize=(10, 4))
    ns = [r["N"] for r in res_b["mc"]]
    axes[0, 0].plot(ns, [r["hard_vs_truth_acc"] for r in res_b["mc"]], "o-")
    axes[0, 0].set(xscale="log", xlabel="N completions",
                   title="MC hard label agreement with truth")
    axes[0, 1].plot(ns, [r["soft_rmse_vs_N64"] for r in res_b["mc"]], "o-")
    axes[0, 1].set(xscale="log", xlabel="N completions", title="MC soft label RMSE vs N=64")
    report.save_figure(fig, workdir, "prm_labels.png", dpi=100)
  if res_c["rows"]:
    fig, axes = report.figure(figsize=(6, 4))
    ax, rows = axes[0, 0], res_c["rows"]
    ts = [r["T"] for r in rows]
    ax.plot(ts, [max(r["a^T"], 1e-6) for r in rows], "o--", label="a^T")
    ax.plot(ts, [max(r["measured"], 1e-6) for r in rows], "s-", label="measured (floor 1e-6)")
    ax.set(xscale="log", yscale="log", xlabel="T", ylabel="P(all T steps judged right)",
           title=f"compounding (a = {rows[-1]['a']:.3f} at T={rows[-1]['T']})")
    ax.legend()
    report.save_figure(fig, workdir, "prm_compounding.png", dpi=100)
  if res_d:
    fig, axes = report.figure(1, 3, figsize=(16, 4.5))
    for ax, f, title in zip(axes[0], ("success", "padding", "answered"),
                            ("success of the chosen sample", "padding fraction of the pick",
                             "the pick answers (not cut by the time limit)")):
      for name, r in res_d.items():
        ax.errorbar(r["N"], r["features"][f]["mean"], yerr=r["features"][f]["half"],
                    marker="o", capsize=3, label=name)
      ax.set(xscale="log", xlabel="N samples", title=title)
    axes[0, 0].legend(fontsize=7)
    report.save_figure(fig, workdir, "prm_rerank.png", dpi=100)
  if res_e:
    fig, axes = report.figure(figsize=(7, 4.5))
    ax = axes[0, 0]
    _curves(ax, {n: r["success"] for n, r in res_e["curves"].items()},
            res_e["steps_per_update"])
    ax.axhline(0.5, color="grey", linewidth=0.8)
    ax.set(ylabel="success", title="PPO on RunningSum: outcome vs per-step PRM (95% CI)")
    ax.legend(fontsize=8)
    report.save_figure(fig, workdir, "prm_ppo.png", dpi=100)


def _cell(m, h) -> str:
  return f"{m:.3f} ± {h:.3f}"


def _speed_table(speed, budget: int, title: str) -> List[str]:
  base = next(iter(speed.values()))
  md = ["", f"## {title} (10-update moving average; a seed that never gets there "
        f"counts as the budget, {budget})", ""]
  return md + report.table(
      ["arm", "per seed", "mean ± 95% CI (censored)", "median", "median / first arm's"],
      [[n, sp["per_seed"], f"{sp['mean_censored']:.0f} ± {sp['half']:.0f}",
        f"{sp['median_censored']:.0f}",
        f"{sp['median_censored'] / base['median_censored']:.2f}"]
       for n, sp in speed.items()])


def markdown(c, summary: Dict[str, Any]) -> str:
  """summary.md from `summary` (what `run` writes to summary.json)."""
  g = c.grpo
  steps = int(g.num_tasks) * int(g.group_size) * int(g.horizon)
  md = ["# PRM experiment", ""]
  final = summary["final"]
  if final:
    md += [f"GRPO on RunningSum-v0 {dict(g.env_kwargs)}, {c.seeds} seeds, "
           f"{g.num_updates} updates ({steps} env steps each); last-10-update means "
           "with 95% t-intervals over seeds.", ""]
    keys = ("success", "prm_score", "step_accuracy", "prm_gap", "padding_frac",
            "surface_frac", "surface_wrong_frac")
    md += report.table(
        ["arm", "success", "PRM score", "step acc", "gap", "padding", "surface",
         "wrong surface", "seeds at 50%"],
        [[n] + [_cell(*f[k]) for k in keys]
         + [f"{f['steps_to_50pct']['reached']}/{f['steps_to_50pct']['seeds']}"]
         for n, f in final.items()])
    md += _speed_table({n: f["steps_to_50pct"] for n, f in final.items()},
                       summary["budget_env_steps"], "GRPO: env steps to 50% success")
  res_d = summary["rerank"]
  if res_d:
    ns = next(iter(res_d.values()))["N"]
    md += ["", "## Best-of-N (outcome-only policies, success of the chosen sample)", ""]
    md += report.table(["ranker"] + [f"N={n}" for n in ns],
                       [[n] + [_cell(m, h) for m, h in zip(r["mean"], r["half"])]
                        for n, r in res_d.items()])
    md += ["", f"What the chosen sample contains at N = {ns[-1]} (and N = 1: the policy's "
           "own samples)", ""]
    md += report.table(
        ["ranker"] + list(FEATURES),
        [[n] + [f"{r['features'][f]['mean'][-1]:.3f}" for f in FEATURES]
         for n, r in res_d.items()]
        + [["(N = 1)"] + [f"{next(iter(res_d.values()))['features'][f]['mean'][0]:.3f}"
                          for f in FEATURES]])
  res_e = summary["ppo"]
  if res_e:
    md += ["", f"## PPO (part E): {dict(c.ppo.env_kwargs)}, {c.seeds} seeds, "
           f"{res_e['steps_per_update']} env steps per update; last-10-update means", ""]
    md += report.table(["arm", "success", "step acc", "padding", "surface"],
                       [[n, *(_cell(*r[k]) for k in ("success", "step_accuracy",
                                                     "padding_frac", "surface_frac"))]
                        for n, r in res_e["final"].items()])
    md += _speed_table(res_e["steps_to_50pct"], res_e["budget_env_steps"],
                       "PPO: env steps to 50% success")
  res_b = summary["labels"]
  if res_b["kinds"]:
    md += ["", "## PRM label kinds (held-out demonstrator steps)", ""]
    md += report.table(
        ["labels", "accuracy", "BCE", "ECE", "P(good) wrong+surface", "P(good) right+plain"],
        [[k, *(f"{v[f]:.3f}" for f in ("accuracy", "bce", "ece", "p_wrong_surface",
                                       "p_right_plain"))] for k, v in res_b["kinds"].items()])
    md += ["", "## MC labels against N", ""]
    md += report.table(["N", "env steps / label", "hard label = truth", "soft RMSE vs N=64"],
                       [[r["N"], r["env_steps_per_label"], f"{r['hard_vs_truth_acc']:.3f}",
                         f"{r['soft_rmse_vs_N64']:.3f}"] for r in res_b["mc"]])
  if summary["compounding"]["rows"]:
    md += ["", "## Compounding", ""]
    md += report.table(["T", "a", "a^T", "measured"],
                       [[r["T"], f"{r['a']:.4f}", f"{r['a^T']:.3g}", f"{r['measured']:.3g}"]
                        for r in summary["compounding"]["rows"]])
  md += ["", report.wall_time(summary["wall_s"])]
  return "\n".join(md) + "\n"
