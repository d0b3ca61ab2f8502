"""The token study's tables and figure from its records (`study.py` writes them).

Per (k, arm): held-out greedy success before (the shared warm start) and after, pooled
over seeds with a Wilson interval; the paired gain, per seed `(after - before) / n`, as a
mean with a 95% t interval over seeds; the gain minus the SFT arm's gain at the same k,
per seed (the same checkpoint and seed), with its t interval; greedy call accuracy and
call rate before and after; and the per-update diagnostics averaged over updates.
"""
from __future__ import annotations

import numpy as np

from credit_jax import stats
from credit_jax.experiments import report

__all__ = ["paired_gains", "summarise"]
SFT = "sft"


def paired_gains(before, after, n: int):
  """Per-seed gains `(after - before) / n` `[S]` of success counts `[S]` of `n`."""
  before, after = np.asarray(before, np.float64), np.asarray(after, np.float64)
  if before.shape != after.shape or before.ndim != 1:
    raise ValueError(f"before and after must be [seeds] alike, got {before.shape}, "
                     f"{after.shape}")
  return (after - before) / n


def _interval(x):
  mean, half = stats.t_interval(np.asarray(x, np.float64))
  return {"mean": float(mean), "half": float(half),
          "low": float(mean - half), "high": float(mean + half)}


def _rate(counts, n):
  counts = np.asarray(counts)
  low, high = stats.wilson_interval(int(counts.sum()), n * len(counts))
  return {"rate": float(counts.sum() / (n * len(counts))), "wilson": (low, high)}


def _fmt(x):
  return f"{x['mean']:+.3f} [{x['low']:+.3f}, {x['high']:+.3f}]"


def summarise(config, workdir, records, seconds):
  warm = {r["turns"]: r for r in records if r["kind"] == "warm_start"}
  arms = sorted((r for r in records if r["kind"] == "arm"),
                key=lambda r: (r["turns"], r["arm"] != SFT, r["arm"]))
  cells, rows, diag, warm_rows = [], [], [], []
  for k, w in sorted(warm.items()):
    n = w["episodes_per_seed"]
    warm_rows.append([k, ",".join(map(str, w["warm_turns"])), w["warm_start"],
                      " ".join(map(str, w["sft_steps"])), f"{np.mean(w['tokens']):.3g}",
                      " ".join(map(str, w["before"]["greedy"])),
                      f"{np.mean(w['before']['call_accuracy']):.3f}",
                      f"{w['wall_s']:.0f} / {w['cpu_s']:.0f}"])
  for r in arms:
    w = warm.get(r["turns"])
    if w is None:
      continue
    n = r["episodes_per_seed"]
    gain = paired_gains(w["before"]["greedy"], r["after"]["greedy"], n)
    sft = next((x for x in arms if x["turns"] == r["turns"] and x["arm"] == SFT), None)
    cell = {"turns": r["turns"], "arm": r["arm"], "tokens": r["tokens"],
            "before_greedy": _rate(w["before"]["greedy"], n),
            "after_greedy": _rate(r["after"]["greedy"], n),
            "after_sampled": _rate(r["after"]["sampled"], n),
            "gain": _interval(gain), "gain_per_seed": gain.tolist(),
            "call_accuracy": (float(np.mean(w["before"]["call_accuracy"])),
                              float(np.mean(r["after"]["call_accuracy"]))),
            "call_rate": (float(np.mean(w["before"]["call_rate"])),
                          float(np.mean(r["after"]["call_rate"])))}
    if sft is not None and r["arm"] != SFT:
      cell["gain_minus_sft"] = _interval(
          gain - paired_gains(w["before"]["greedy"], sft["after"]["greedy"], n))
    cells.append(cell)
    vs = _fmt(cell["gain_minus_sft"]) if "gain_minus_sft" in cell else "-"
    rows.append([r["turns"], r["arm"], f"{r['tokens']:.3g}",
                 f"{cell['before_greedy']['rate']:.3f}",
                 f"{cell['after_greedy']['rate']:.3f}", _fmt(cell["gain"]), vs,
                 " ".join(f"{g:+.2f}" for g in gain),
                 f"{cell['call_accuracy'][0]:.3f} -> {cell['call_accuracy'][1]:.3f}",
                 f"{cell['call_rate'][0]:.2f} -> {cell['call_rate'][1]:.2f}",
                 f"{r['wall_s']:.0f} / {r['cpu_s']:.0f}"])
    cu = r["curves"]
    if r["arm"] != SFT:
      def avg(name, cu=cu):
        return f"{np.mean(cu[name]):.4f}" if name in cu else "-"
      diag.append([r["turns"], r["arm"], avg("degenerate_frac"), avg("approx_kl"),
                   avg("clip_frac"), avg("kl_ref"),
                   f"{cu['entropy'][0]:.3f} -> {cu['entropy'][-1]:.3f}",
                   f"{cu['call_rate'][-1]:.2f}", f"{cu['lr'][-1]:.2e}"])
  lines = ["# Token agents: RL against equal-token supervised training", "",
           f"ToolArith-v0 ({config.recipe.env_kwargs.num_digits}-digit numbers, step "
           f"index {'on' if config.recipe.env_kwargs.get('step_index') else 'off'}), "
           f"{config.seeds} seeds x {config.eval_episodes} held-out episodes per "
           "measurement. Gains: per seed (after - before) / n of greedy successes, mean "
           "[95% t interval over seeds].", "", "Warm starts:", ""]
  lines += report.table(["k", "demo k", "mode", "steps per seed", "tokens per seed",
                         "held-out greedy per seed", "call accuracy", "wall / CPU s"],
                        warm_rows)
  lines += ["", "Arms (tokens per seed through the model in training):", ""]
  lines += report.table(["k", "arm", "tokens", "before", "after", "paired gain",
                         "gain minus SFT's", "gain per seed", "call accuracy",
                         "call rate", "wall / CPU s"], rows)
  lines += ["", "RL diagnostics (means over updates of the seeds' mean; entropy first -> "
            "last update; call rate and lr at the last):", ""]
  lines += report.table(["k", "arm", "degenerate groups", "approx_kl", "clip fraction",
                         "KL to reference", "entropy", "call rate", "lr"], diag)
  lines += ["", report.wall_time(seconds)]
  _figure(cells, workdir)
  return report.write_summary(workdir, {"cells": cells, "warm_starts": list(warm.values())},
                              "\n".join(lines))


def _figure(cells, workdir):
  fig, axes = report.figure(1, 1, figsize=(6.5, 4.0))
  ax = axes[0, 0]
  turns = sorted({c["turns"] for c in cells})
  names = list(dict.fromkeys(c["arm"] for c in cells))
  width = 0.8 / max(len(names), 1)
  for j, name in enumerate(names):
    pts = [(turns.index(c["turns"]), c["gain"]) for c in cells if c["arm"] == name]
    if not pts:
      continue
    x = np.array([i for i, _ in pts]) + (j - (len(names) - 1) / 2) * width
    mean = np.array([g["mean"] for _, g in pts])
    half = np.nan_to_num(np.array([g["half"] for _, g in pts]))
    ax.errorbar(x, mean, yerr=half, fmt="o", capsize=3, label=name)
  ax.axhline(0.0, color="0.5", lw=1, ls=":")
  ax.set_xticks(range(len(turns)))
  ax.set_xticklabels([f"k = {k}" for k in turns])
  ax.set_ylabel("held-out greedy success, after - before")
  ax.legend(fontsize=8)
  report.save_figure(fig, workdir, "paired_gain.png")
