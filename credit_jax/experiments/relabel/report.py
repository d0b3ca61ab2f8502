"""Figures and summary.md of the relabeling study (credit_jax/experiments/relabel/study.py).

  grpo_<env>.png   part (b): success against env steps per relabeling mode (seed mean,
                   95% t-interval) with the median steps to the level and its bootstrap
                   interval, and the learning-rate sweep beside it (`plot_grpo`)
  summary.md       part (a)'s BitFlip table, part (b)'s results with intervals, its lr
                   sweep and the settings measured before the protocol
                   (`summary_markdown`, `grpo_markdown`, `EARLIER_SETTINGS`)

Everything here reads what the study measured (the summary dict of `study.run`, whose
per-mode entries come from `study.mode_results`); nothing is trained. Figures are drawn
off-screen (`report.figure`).
"""
from __future__ import annotations

import numpy as np

from credit_jax.experiments import report

__all__ = ["EARLIER_SETTINGS", "grpo_markdown", "plot_grpo", "summary_markdown"]


def plot_grpo(entry, modes, cfg, workdir, name):
  """grpo_<name>.png: success curves (seed mean, 95% t-interval) with the median steps to
  the level and its bootstrap interval; the lr sweep beside them."""
  fig, axes = report.figure(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [2, 1]})
  ax, axs = axes[0]
  level, per_update = float(cfg.success_level), entry["env_steps_per_update"]
  for i, mode in enumerate(modes):
    m = entry["modes"][mode]
    mean, half = np.array(m["curve_mean"]), np.array(m["curve_interval"])
    steps = np.arange(1, len(mean) + 1) * per_update
    ax.plot(steps, mean, color=f"C{i}", label=f"{mode} (lr {m['lr']:g})")
    ax.fill_between(steps, mean - half, mean + half, color=f"C{i}", alpha=0.2)
    if m["steps_to_level"] is not None:
      lo, hi = m["steps_to_level_interval"]
      hi = steps[-1] if hi is None else hi
      ax.errorbar([m["steps_to_level"]], [level + 0.03 * (i - 1)],
                  xerr=[[m["steps_to_level"] - lo], [hi - m["steps_to_level"]]],
                  fmt="o", color=f"C{i}", capsize=3, ms=4)
  ax.axhline(level, color="gray", lw=0.8, ls="--")
  ax.set(xlabel="env steps (tasks x K x horizon per update)", ylabel="success (real goals)",
         ylim=(-0.05, 1.05),
         title=f"GRPO on {entry['env_name']}, {cfg.seeds} seeds (mean, 95% CI;\n"
               f"dots: median steps to {level:.0%}, bootstrap 95% CI)")
  ax.title.set_fontsize(9)
  ax.legend(title="relabeling", fontsize=8)
  sweep = entry["lr_sweep"]
  for i, mode in enumerate(modes):
    if mode in sweep["auc"]:
      axs.plot(sweep["grid"], [sweep["auc"][mode][f"{lr:g}"] for lr in sweep["grid"]],
               "o-", color=f"C{i}", label=mode)
  axs.set(xscale="log", xlabel="learning rate", ylabel="mean success over the sweep",
          title=f"lr sweep: {sweep['seeds']} other seeds, {sweep['updates']} updates")
  axs.title.set_fontsize(9)
  axs.legend(fontsize=8)
  report.save_figure(fig, workdir, f"grpo_{name}.png", dpi=120)


# Settings measured before the protocol above (2-3 seeds, seed-mean curves, the default
# lr 3e-3 for every mode, no intervals) and not rerun under it: the ones the environments
# of GRPO_ENVS were chosen over. Reported beside the results so the selection shows.
# (setting, seeds, steps to 50% or result: none / plain / iw, relabeled / none)
EARLIER_SETTINGS = (
    ("GoalGrid 15x15, 4 corner goals, 30 steps", 2, "ratio 0.94 plain, 0.89 iw",
     "null: relabeled goals (random-walk ends) are almost never corners"),
    ("GoalGrid 15x15, every cell a goal, 30 steps", 2,
     "none at 9% after 200 updates; plain (episode, 4 goals) 50% at 138k steps",
     "positive"),
    ("GoalGrid 9x9, every cell a goal, 18 steps", 2,
     "none never in 217k steps; plain 48k; iw 53k", "positive (the setting kept)"),
    ("TextEdit, goals one random edit away (buffer 4, 3 tokens, 16 steps)", 2,
     "none 203k, plain 176k (0.87), iw 174k (0.86)", "null"),
    ("TextEdit, substitution-only goals", 2, "ratio 1.27 plain, 1.50 iw",
     "negative: relabeling slowed GRPO"),
    ("TextEdit, every buffer a goal, buffer 4, 3 tokens, 16 steps, 200 updates", 2,
     "final success none 0.16, plain 0.30, iw 0.21", "positive, none reach 50%"),
    ("TextEdit, every buffer a goal, buffer 3, 2 tokens, 12 steps, 500 updates", 3,
     "none never (final 0.48); plain 240k (final 0.84); iw never (final 0.29)",
     "positive for plain (the setting kept)"),
)


def _steps_text(m):
  if m["steps_to_level"] is None:
    return f"not reached ({m['seeds_reached']}/{m['seeds']} seeds)"
  lo, hi = m["steps_to_level_interval"]
  return (f"{m['steps_to_level']:.3g} [{lo:.3g}, {'never' if hi is None else f'{hi:.3g}'}]"
          f" ({m['seeds_reached']}/{m['seeds']} seeds)")


def _ratio_text(m, mode):
  if mode == "none" or m.get("ratio_to_none") is None:
    return "—"
  lo, hi = m["ratio_to_none_interval"]
  bound = "≤ " if m["ratio_is_upper_bound"] else ""
  return f"{bound}{m['ratio_to_none']:.2f} [{lo:.2f}, {hi:.2f}]"


def grpo_markdown(summary: dict) -> list:
  """summary.md lines of part b: protocol, results with intervals, the lr sweep and the
  settings measured before."""
  level, seeds = summary["success_level"], summary["seeds"]
  lines = [f"## GRPO: env steps to {level:.0%} success", "",
           f"Per mode: the learning rate with the highest mean success in a sweep over "
           f"{summary['lr_grid']} on seeds the runs below do not use; then {seeds} seeds at "
           "that lr. A seed's steps to the level: the first update whose trailing mean "
           f"over {summary['smooth']} updates reaches it; the table gives the median over "
           "seeds with a 95% percentile bootstrap interval over seeds ('never': the bound "
           "is a seed that never got there), and the ratio of medians to no relabeling "
           "with its paired bootstrap interval (seeds censored at the run's budget; '≤' "
           "where 'none''s median was not reached, so the ratio is an upper bound). "
           "Compute: env steps = tasks x K x horizon per update; relabeled examples cost "
           "no env steps but add gradient terms to the same update. Final success: mean "
           "over the last updates and seeds, 95% t-interval.", ""]
  rows = []
  for name, r in summary["grpo"].items():
    for mode, m in r["modes"].items():
      none = mode == "none"   # no relabeled example is used: no IS weight
      rows.append((f"{r['env_name']} ({name})", mode, f"{m['lr']:g}", _steps_text(m),
                   _ratio_text(m, mode),
                   f"{m['final_success_mean']:.2f} ± {m['final_success_interval'] or 0:.2f}",
                   "—" if none else f"{m['iw_mean']:.2f}",
                   "—" if none else f"{m['iw_clip_frac']:.2f}"))
  lines += report.table(("env", "mode", "lr", "median steps to level [95% CI]",
                         "ratio to none [95% CI]", "final success", "mean IS weight",
                         "IS clipped"), rows)
  lines += ["", "Learning-rate sweep (mean success over the sweep's updates):", ""]
  rows = []
  for name, r in summary["grpo"].items():
    sw = r["lr_sweep"]
    for mode, auc in sw["auc"].items():
      rows.append((name, mode, f"{sw['seeds']} seeds x {sw['updates']} updates",
                   ", ".join(f"lr {lr}: {v:.3f}" for lr, v in auc.items()),
                   f"{r['modes'][mode]['lr']:g}"))
  lines += report.table(("env", "mode", "sweep", "mean success per lr", "chosen"), rows)
  lines += ["", "Settings measured earlier (fewer seeds, one lr, no intervals; not rerun) "
            "and what they gave, null results included: the settings above were chosen "
            "after these.", ""]
  lines += report.table(("setting", "seeds", "measured", "result"),
                        [(a, b, c, d) for a, b, c, d in EARLIER_SETTINGS])
  return lines + [""]


def summary_markdown(summary: dict) -> str:
  """A short report of the summary's headline numbers."""
  lines = ["# Hindsight relabeling", ""]
  if "bitflip" in summary:
    lines += [f"## BitFlip: DQN with and without HER (greedy success, last 10 cycles, "
              f"mean ± std over {summary['seeds']} seeds)", ""]
    lines += report.table(
        ("n", "cycles", "DQN + HER", "DQN", "wall (compile + run)"),
        [(n, r["updates"], f"{r['her']['success_mean']:.2f} ± {r['her']['success_std']:.2f}",
          f"{r['no_her']['success_mean']:.2f} ± {r['no_her']['success_std']:.2f}",
          f"{r['compile_seconds']:.0f} + {r['run_seconds']:.0f} s")
         for n, r in summary["bitflip"].items()])
    lines.append("")
  if "grpo" in summary:
    lines += grpo_markdown(summary)
  lines.append(report.wall_time(summary["wall_seconds"]))
  return "\n".join(lines) + "\n"
