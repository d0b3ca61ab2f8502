"""The bsuite study's files: results.csv / results.md, bsuite-format logs, the score bar
figure, per-length learning curves and summary.md.

`bsuite_format/<method>.csv` holds the rows bsuite's own logger would have written (one
per run and update: `bsuite_id`, `bsuite_env`, `episode`, `total_return`,
`total_regret`, `total_perfect`, the setting column, `seed`), so bsuite's analysis
(`bsuite.experiments.<name>.analysis.score`) can score the runs itself (settings past
bsuite's sweep, lengths 300 and 1000, are written as `<name>_beyond`, so that the rows
of `<name>` are bsuite's sweep alone):

    df = pandas.read_csv("bsuite_format/ppo_mlp_g0.99_l0.95.csv")
    umbrella_length.analysis.score(df[df.bsuite_env == "umbrella_length"])
"""
from __future__ import annotations

import csv
import os
from typing import Dict, List, Optional

import numpy as np

from credit_jax.experiments import report
from credit_jax.experiments.bsuite import analysis, scoring, specs

SHORT = {"umbrella_length": "umbrella", "umbrella_distract": "umb. distract",
         "memory_len": "memory", "memory_size": "mem. size",
         "discounting_chain": "discounting", "discounting_chain_long": "discount. long"}


def write_bsuite_format(records: Dict[str, Dict[str, List[dict]]], workdir: str) -> None:
  """bsuite_format/<method>.csv: every run's cumulative totals after every update."""
  folder = os.path.join(workdir, "bsuite_format")
  os.makedirs(folder, exist_ok=True)
  names = ["chain_length", "n_distractor", "memory_length", "num_bits", "mapping_seed"]
  columns = ["bsuite_id", "bsuite_env", "episode", "total_return", "total_regret",
             "total_perfect"] + names + ["seed"]
  for method, by_exp in records.items():
    with open(os.path.join(folder, f"{method}.csv"), "w", newline="") as f:
      out = csv.writer(f)
      out.writerow(columns)
      for experiment, recs in by_exp.items():
        if not recs:
          continue
        rows = analysis.bsuite_rows(recs)
        name = specs.SETTING_NAMES[experiment]
        swept = analysis.in_sweep(experiment, rows["setting"])
        for i in range(rows["episode"].shape[0]):
          setting = int(rows["setting"][i])
          cells = {n: "" for n in names}
          cells[name] = setting
          env = experiment if swept[i] else f"{experiment}_beyond"
          out.writerow([f"{env}/{setting}", env, int(rows["episode"][i]),
                        f"{rows['total_return'][i]:.6g}", f"{rows['total_regret'][i]:g}",
                        int(rows["total_perfect"][i])] + [cells[n] for n in names]
                       + [int(rows["seed"][i])])


def write_results(summary: dict, workdir: str) -> None:
  """results.csv (per method, experiment and setting) and results.md (the tables)."""
  with open(os.path.join(workdir, "results.csv"), "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(["method", "experiment", "setting", "seed_mean_score",
                  "pooled_score", "whole_rate",
                  "final_rate", "final_wilson_low", "final_wilson_high", "final_episodes",
                  "seeds_at_level", "seeds"])
    for method, by_exp in summary.items():
      for experiment, s in by_exp.items():
        for setting, v in sorted(s["per_setting"].items()):
          fin = v["final"]
          score = "" if s["bsuite_score"] is None else f"{s['bsuite_score']:.4f}"
          mean = "" if s["seed_score_mean"] is None else f"{s['seed_score_mean']:.4f}"
          out.writerow([method, experiment, setting, mean, score,
                        f"{v['whole']['rate']:.4f}", f"{fin['rate']:.4f}",
                        f"{fin['wilson'][0]:.4f}", f"{fin['wilson'][1]:.4f}",
                        fin["episodes"], v["seeds_at_level"], v["seeds"]])
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write("\n".join(markdown_tables(summary)) + "\n")


def _score_cell(s) -> str:
  """A score table cell: the mean of the per-seed scores [their min, max] (pooled: the
  score of all seeds' runs pooled), and the share of bsuite's sweep it covers when that
  is not all of it."""
  if s is None or s["bsuite_score"] is None:
    return "-"
  cell = (f"{s['seed_score_mean']:.2f} [{s['seed_score_min']:.2f}, "
          f"{s['seed_score_max']:.2f}] (pooled {s['bsuite_score']:.2f})")
  if len(s["scored_settings"]) < s["sweep_size"]:
    cell += f" ({len(s['scored_settings'])}/{s['sweep_size']} settings"
    if "sweep_bounds" in s:
      cell += (f"; over the whole sweep {s['sweep_bounds'][0]:.2f} to "
               f"{s['sweep_bounds'][1]:.2f}")
    cell += ")"
  return cell


def _pct(rate: dict) -> str:
  lo, hi = rate["wilson"]
  return f"{rate['rate']:.3f} [{lo:.3f}, {hi:.3f}]"


def markdown_tables(summary: dict) -> List[str]:
  """The score table and one final-rate table per experiment, as markdown lines."""
  methods = list(summary)
  experiments = [x for x in specs.EXPERIMENTS if any(x in summary[m] for m in methods)]
  lines = ["bsuite score: the mean over seeds of each seed's score (each seed's runs "
           "scored as bsuite scores one run per setting), in brackets the per-seed "
           "scores' min-max, then the score of all seeds' runs pooled (labelled; bsuite's "
           "analysis pools whatever runs it is given); random agent: "
           + ", ".join(f"{k} {v:g}" for k, v in scoring.RANDOM_SCORES.items()), ""]
  rows = []
  for m in methods:
    row = [m]
    for x in experiments:
      s = summary[m].get(x)
      row.append(_score_cell(s))
    rows.append(row)
  lines += report.table(["method"] + experiments, rows)
  lines += ["", "Longest length whose final-window right-choice rate (pooled over seeds, "
            "95% Wilson interval) is >= the level; discounting: bonus-chain rate", ""]
  rows = []
  for m in methods:
    row = [m]
    for x in experiments:
      s = summary[m].get(x)
      if s is None:
        row.append("-")
      elif "longest_at_level" in s:
        fin = s["longest_at_level_final"]
        row.append(f"{s['longest_at_level']}" + (f" ({_pct(fin)})" if fin else ""))
      else:
        row.append(f"whole run {_pct(s['bonus_rate'])}; final "
                   f"{_pct(s['final_bonus_rate'])}")
    rows.append(row)
  lines += report.table(["method"] + experiments, rows)
  for x in experiments:
    key, column = (("per_bonus_horizon", "bonus chain's horizon")
                   if specs.SCORED_AS[x] == "discounting_chain"
                   else ("per_setting", specs.SETTING_NAMES[x]))
    settings = sorted({n for m in methods if x in summary[m]
                       for n in summary[m][x][key]}, key=int)
    lines += ["", f"{x}: final-window rate per {column} (whole-run rate; runs at level "
              f"/ runs)", ""]
    rows = []
    for n in settings:
      row = [n]
      for m in methods:
        v = summary[m].get(x, {}).get(key, {}).get(n)
        row.append("-" if v is None else
                   f"{v['final']['rate']:.2f} ({v['whole']['rate']:.2f}; "
                   f"{v['seeds_at_level']}/{v['seeds']})")
      rows.append(row)
    lines += report.table([column] + methods, rows)
  return lines + cost_table(summary) + probe_table(summary)


def cost_table(summary: dict) -> List[str]:
  """Per (method, experiment): compiled programs, compile and run seconds, real env
  steps (padding excluded) and the steps the programs computed, and real env steps/s."""
  rows = []
  for m, by_exp in summary.items():
    for x, s in by_exp.items():
      seeds = len(s["seed_scores"])
      real = s["env_steps_per_seed"] * seeds
      rows.append([m, x, s["programs"], f"{s['compile_s']:.0f}", f"{s['run_s']:.0f}",
                   f"{real:,}", f"{s['program_steps_per_seed'] * seeds:,}",
                   f"{real / max(s['run_s'], 1e-9):,.0f}"])
  return (["", "Cost: compiled programs, their compile and run seconds, env steps of "
           "real episodes (all seeds) and the steps the programs computed (padding "
           "included), real env steps per second of run time", ""]
          + report.table(["method", "experiment", "programs", "compile s", "run s",
                          "env steps", "program steps", "env steps/s"], rows))


def probe_table(summary: dict) -> List[str]:
  """The umbrella critic probe per (method, experiment, setting) as markdown lines:
  V(right) - V(wrong) at step 2 at a quarter, half and all of training (mean over
  seeds), the per-seed final values and the gap a critic knowing the sign gives."""
  rows = []
  for m, by_exp in summary.items():
    for x, s in by_exp.items():
      for setting, p in sorted(s.get("critic_probe", {}).items()):
        c = p["curve"]
        at = [c[max(0, int(round(f * len(c))) - 1)] for f in (0.25, 0.5, 1.0)]
        rows.append([m, x, setting] + [f"{v:+.3f}" for v in at]
                    + [", ".join(f"{v:+.2f}" for v in p["seed_final"]),
                       f"{p['ideal']:.3f}"])
  if not rows:
    return []
  return (["", "Umbrella critic probe (PPO MLP): V(right) - V(wrong) at step 2, mean "
           "over seeds, after 25% / 50% / 100% of the episodes; a critic that knows "
           "the final reward's sign gives 2 gamma^(L - 2)", ""]
          + report.table(["method", "experiment", "setting", "25%", "50%", "end",
                          "per-seed end", "2 gamma^(L-2)"], rows))


def probe_figure(summary: dict, workdir: str) -> Optional[str]:
  """critic_probe.png: the probe's curve per setting, one panel per (method,
  experiment) that has it; None when none has."""
  panels = [(m, x, s["critic_probe"]) for m, by_exp in summary.items()
            for x, s in by_exp.items() if s.get("critic_probe")]
  if not panels:
    return None
  fig, axes = report.figure(1, len(panels), figsize=(4.4 * len(panels), 3.6))
  for ax, (m, x, probe) in zip(axes[0], panels):
    settings = sorted(probe)
    for c, setting in zip(_colours(len(settings)), settings):
      p = probe[setting]
      ax.plot(p["episodes"], p["curve"], color=c, lw=1, label=str(setting))
    ax.axhline(0.0, color="k", lw=0.6)
    ax.set_title(f"{m}\n{x}", fontsize=8)
    ax.set_xlabel("episodes per run")
    ax.set_ylabel("V(right) - V(wrong) at step 2")
    ax.legend(title=specs.SETTING_NAMES[x], fontsize=6, ncol=2)
  return report.save_figure(fig, workdir, "critic_probe.png")


def score_figure(summary: dict, workdir: str) -> str:
  """scores.png: bsuite-style bars, one group per experiment, one bar per method
  (the mean of the per-seed scores; whiskers: their range), the random agent dashed."""
  methods = list(summary)
  experiments = [x for x in specs.EXPERIMENTS if any(x in summary[m] for m in methods)]
  fig, axes = report.figure(1, 1, figsize=(2.2 + 1.6 * len(experiments), 4.0))
  ax = axes[0, 0]
  width = 0.8 / max(len(methods), 1)
  for i, m in enumerate(methods):
    xs, ys, lo, hi = [], [], [], []
    for j, x in enumerate(experiments):
      s = summary[m].get(x)
      if s is None or s["bsuite_score"] is None:
        continue
      xs.append(j + (i - (len(methods) - 1) / 2) * width)
      ys.append(s["seed_score_mean"])
      lo.append(s["seed_score_mean"] - s["seed_score_min"])
      hi.append(s["seed_score_max"] - s["seed_score_mean"])
    ax.bar(xs, ys, width, yerr=[np.maximum(lo, 0), np.maximum(hi, 0)], capsize=2,
           label=m)
  for j, x in enumerate(experiments):
    base = scoring.RANDOM_SCORES[specs.SCORED_AS[x]]
    ax.plot([j - 0.45, j + 0.45], [base, base], "k--", lw=1)
  ax.set_xticks(range(len(experiments)))
  ax.set_xticklabels([SHORT[x] for x in experiments])
  ax.set_ylim(0, 1.02)
  ax.set_ylabel("bsuite score (mean of per-seed scores)")
  ax.set_title("bsuite score per experiment (dashed: random agent)")
  ax.legend(fontsize=7, loc="upper right")
  return report.save_figure(fig, workdir, "scores.png")


def curve_figures(records: Dict[str, Dict[str, List[dict]]], config,
                  workdir: str) -> List[str]:
  """curves_<experiment>.png: per method a panel, per setting a line (discounting: per
  bonus chain's horizon, its mapping seeds pooled): the success rate per update (pooled
  over runs, a trailing mean over `config.curve_smooth` updates) against episodes."""
  paths = []
  methods = list(records)
  for x in specs.EXPERIMENTS:
    present = [m for m in methods if records[m].get(x)]
    if not present:
      continue
    fig, axes = report.figure(1, len(present), figsize=(4.2 * len(present), 3.6),
                              sharey=True)
    discounting = specs.SCORED_AS[x] == "discounting_chain"
    horizons = specs.horizons_of(x, config) if discounting else None
    for ax, m in zip(axes[0], present):
      lines = {}   # setting -> [successes per update, episodes per update, runs]
      for rec in records[m][x]:
        e = np.asarray(rec["episodes"], np.float64)
        s = np.asarray(rec["successes"], np.float64)
        for setting in sorted(set(rec["settings"])):
          sel = np.asarray(rec["settings"]) == setting
          label = horizons[setting % len(horizons)] if discounting else setting
          acc = lines.setdefault(label, [0.0, 0.0, 0])
          acc[0] = acc[0] + s[sel].sum(0)
          acc[1] = acc[1] + e[sel].sum(0)
          acc[2] += int(sel.sum())
      settings = sorted(lines)
      k = max(1, int(config.curve_smooth))
      for c, setting in zip(_colours(len(settings)), settings):
        s, e, runs = lines[setting]
        rate = _trailing(s, k) / np.maximum(_trailing(e, k), 1)
        ax.plot(np.cumsum(e) / runs, rate, color=c, lw=1, label=str(setting))
      ax.set_title(m, fontsize=9)
      ax.set_xlabel("episodes per run")
      ax.axhline(float(config.level), color="k", ls=":", lw=0.8)
    axes[0, 0].set_ylabel("success rate")
    name = "bonus chain's horizon" if discounting else specs.SETTING_NAMES[x]
    axes[0, -1].legend(title=name, fontsize=6, ncol=2, loc="lower right")
    fig.suptitle(f"{x}: learning curves per {name}")
    paths.append(report.save_figure(fig, workdir, f"curves_{x}.png"))
  return paths


def _trailing(x: np.ndarray, k: int) -> np.ndarray:
  c = np.concatenate([[0.0], np.cumsum(x)])
  i = np.arange(1, x.shape[0] + 1)
  return c[i] - c[np.maximum(i - k, 0)]


def _colours(n: int):
  from matplotlib import colormaps  # pylint: disable=g-import-not-at-top
  cmap = colormaps["viridis"]
  return [cmap(i / max(n - 1, 1)) for i in range(n)]
