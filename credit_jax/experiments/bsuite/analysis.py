"""From the cells' records to bsuite's scores, our per-length rates and their intervals.

Per (method, experiment):
  * bsuite's score (`scoring`) from every run's rows pooled (several seeds per setting
    averaged inside each group, as bsuite's analysis does with several runs), and the
    score of each seed's runs alone (mean, min, max over seeds). Only the settings of
    bsuite's sweep count (`in_sweep`): lengths 300 and 1000 are reported per length but
    would dilute a score that is a fraction of lengths; `scored_settings` says which of
    the sweep's settings a score covers (a partial sweep scores the lengths it ran, and
    `sweep_bounds` gives the per-seed mean over the whole sweep with every unrun
    setting failed, and with every one passed);
  * per setting: the right-choice rate over the whole run (what bsuite averages) and
    over the final window (the last `final_fraction` of the updates), pooled over seeds
    with a 95% Wilson interval (episodes treated as independent trials), and the seeds
    whose own final rate is >= `level`;
  * umbrella_length, memory_len: the longest length whose pooled final rate is >=
    `level`; discounting: the bonus-chain rate over all episodes (= bsuite's score) and
    over the final window, each with its Wilson interval.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np

from credit_jax.experiments import report
from credit_jax.experiments.bsuite import scoring, specs
from credit_jax.experiments import methods as horizon_methods


def cumulative(record: dict) -> Dict[str, np.ndarray]:
  """A record's per-update counts as cumulative [R, U] arrays (bsuite's log rows)."""
  e = np.cumsum(np.asarray(record["episodes"], np.int64), axis=1)
  s = np.cumsum(np.asarray(record["successes"], np.int64), axis=1)
  r = np.cumsum(np.asarray(record["return_sum"], np.float64), axis=1)
  return {"episodes": e, "successes": s, "return": r}


def bsuite_rows(records: List[dict]) -> Dict[str, np.ndarray]:
  """Every run's rows at every update: `setting`, `seed`, `episode`, `successes`,
  `total_return` ([rows] each), the columns bsuite's logger writes, and
  `total_regret` (2 per miss) and `total_perfect` (= successes)."""
  cols = {k: [] for k in ("setting", "seed", "episode", "successes", "total_return")}
  for rec in records:
    c = cumulative(rec)
    u = c["episodes"].shape[1]
    cols["setting"].append(np.repeat(rec["settings"], u))
    cols["seed"].append(np.repeat(rec["seeds"], u))
    cols["episode"].append(c["episodes"].ravel())
    cols["successes"].append(c["successes"].ravel())
    cols["total_return"].append(c["return"].ravel())
  out = {k: np.concatenate(v) for k, v in cols.items()}
  out["total_regret"] = 2.0 * (out["episode"] - out["successes"])
  out["total_perfect"] = out["successes"]
  return out


def sweep_of(experiment: str):
  """bsuite's settings of `experiment` (None: not a bsuite experiment, every setting
  scored, as discounting_chain_long)."""
  return scoring.SWEEPS.get(experiment)


def in_sweep(experiment: str, settings) -> np.ndarray:
  """[N] bool: which `settings` [N] bsuite's sweep of `experiment` holds."""
  sweep = sweep_of(experiment)
  settings = np.asarray(settings)
  return np.ones(settings.shape, bool) if sweep is None else np.isin(settings, sweep)


def score(experiment: str, rows: Dict[str, np.ndarray], config) -> float | None:
  """bsuite's score of `rows` (from `bsuite_rows`) for `experiment`, over the rows of
  bsuite's sweep (`in_sweep`); None when there are none."""
  keep = in_sweep(experiment, rows["setting"])
  if not keep.any():
    return None
  rows = {k: v[keep] for k, v in rows.items()}
  kind = specs.SCORED_AS[experiment]
  n = specs.num_episodes(experiment, config)
  if kind == "umbrella_length":
    return scoring.umbrella_length_score(rows["setting"], rows["episode"],
                                         rows["total_regret"], n)
  if kind == "memory_len":
    return scoring.memory_len_score(rows["setting"], rows["episode"],
                                    rows["total_perfect"], n)
  return scoring.discounting_chain_score(rows["episode"], rows["total_return"], n)


def _rate(successes, episodes) -> dict:
  s, n = int(successes), int(episodes)
  low, high = report.wilson_interval(s, n) if n else (float("nan"), float("nan"))
  return {"rate": s / n if n else float("nan"), "successes": s, "episodes": n,
          "wilson": [low, high]}


def per_setting(records: List[dict], config) -> Dict[int, dict]:
  """{setting: whole-run and final-window rates pooled over seeds, seeds at level}."""
  level = float(config.level)
  out: Dict[int, dict] = {}
  for rec in records:
    e = np.asarray(rec["episodes"], np.int64)
    s = np.asarray(rec["successes"], np.int64)
    w = scoring.final_window(e.shape[1], float(config.final_fraction))
    for setting in sorted(set(rec["settings"])):
      sel = np.asarray(rec["settings"]) == setting
      fe, fs = e[sel, -w:].sum(axis=1), s[sel, -w:].sum(axis=1)   # per seed
      out[int(setting)] = {
          "whole": _rate(s[sel].sum(), e[sel].sum()),
          "final": _rate(fs.sum(), fe.sum()),
          "seed_final_rates": (fs / np.maximum(fe, 1)).tolist(),
          "seeds_at_level": int(np.sum(fs >= level * fe - 1e-9)),
          "seeds": int(sel.sum())}
  return out


def summarize_experiment(experiment: str, records: List[dict], config) -> dict:
  """The summary of one method on one experiment (see the module docstring)."""
  rows = bsuite_rows(records)
  seeds = sorted(set(int(v) for v in rows["seed"]))
  per_seed = [score(experiment, {k: v[rows["seed"] == j] for k, v in rows.items()},
                    config) for j in seeds]
  settings = per_setting(records, config)
  scored = [n for n in settings if in_sweep(experiment, [n])[0]]
  sweep = sweep_of(experiment)
  known = [v for v in per_seed if v is not None]
  out = {"bsuite_score": score(experiment, rows, config),
         "scored_settings": scored,
         "sweep_size": len(sweep) if sweep is not None else len(scored),
         "seed_scores": per_seed,
         "seed_score_mean": float(np.mean(known)) if known else None,
         "seed_score_min": float(np.min(known)) if known else None,
         "seed_score_max": float(np.max(known)) if known else None,
         "per_setting": settings,
         "env_steps_per_seed": int(sum(r["env_steps_per_seed"] for r in records)),
         "program_steps_per_seed": int(sum(r["program_steps_per_seed"]
                                           for r in records)),
         "programs": len(records),
         "compile_s": float(sum(r["compile_s"] for r in records)),
         "run_s": float(sum(r["run_s"] for r in records))}
  unrun = out["sweep_size"] - len(scored)
  if known and unrun > 0 and specs.SCORED_AS[experiment] != "discounting_chain":
    # A partial sweep: the per-seed mean over bsuite's whole sweep lies between every
    # unrun setting failing and every one passing.
    passed = np.rint(np.asarray(known) * len(scored))
    out["sweep_bounds"] = [float(np.mean(passed) / out["sweep_size"]),
                           float(np.mean(passed + unrun) / out["sweep_size"])]
  probe = critic_probe(experiment, records)
  if probe:
    out["critic_probe"] = probe
  if specs.SCORED_AS[experiment] == "discounting_chain":
    def pooled(part):
      return _rate(sum(v[part]["successes"] for v in settings.values()),
                   sum(v[part]["episodes"] for v in settings.values()))
    out["bonus_rate"] = pooled("whole")
    out["final_bonus_rate"] = pooled("final")
    # Mapping seeds with one bonus chain are one environment: their rates pooled per
    # the bonus chain's reward horizon (bsuite's "optimal_horizon").
    horizons = specs.horizons_of(experiment, config)
    by_horizon: Dict[int, dict] = {}
    for m, v in settings.items():
      h = by_horizon.setdefault(int(horizons[m % len(horizons)]),
                                {"whole": [0, 0], "final": [0, 0], "seeds_at_level": 0,
                                 "seeds": 0})
      for part in ("whole", "final"):
        h[part][0] += v[part]["successes"]
        h[part][1] += v[part]["episodes"]
      h["seeds_at_level"] += v["seeds_at_level"]
      h["seeds"] += v["seeds"]
    out["per_bonus_horizon"] = {
        k: {"whole": _rate(*h["whole"]), "final": _rate(*h["final"]),
            "seeds_at_level": h["seeds_at_level"], "seeds": h["seeds"]}
        for k, h in sorted(by_horizon.items())}
  else:
    lengths = sorted(settings)
    longest = scoring.longest_at_level(
        lengths, [settings[n]["final"]["successes"] for n in lengths],
        [settings[n]["final"]["episodes"] for n in lengths], float(config.level))
    out["longest_at_level"] = longest
    out["longest_at_level_final"] = settings[longest]["final"] if longest else None
  return out


def critic_probe(experiment: str, records: List[dict]) -> Dict[int, dict]:
  """{setting: the umbrella critic probe} from records that carry `critic_gap`
  (runner.py): per seed the gap V(right) - V(wrong) at step 2 after each chunk, their
  mean curve, the final mean, and the gap a critic that knows the final reward's sign
  gives, 2 gamma^(L - 2) (gamma from the method's name)."""
  out: Dict[int, dict] = {}
  for rec in records:
    if "critic_gap" not in rec:
      continue
    gamma = horizon_methods.parse(specs.split_gru(rec["method"])[0])[1]["gamma"]
    gaps = np.asarray(rec["critic_gap"], np.float64)            # [R, chunks]
    for setting in sorted(set(rec["settings"])):
      sel = np.asarray(rec["settings"]) == setting
      length = (specs.UMBRELLA_DISTRACT_LENGTH if experiment == "umbrella_distract"
                else int(setting))
      if length < 2:      # no step 2: the umbrella choice is the last step
        continue
      curve = gaps[sel].mean(axis=0)
      out[int(setting)] = {"episodes": list(rec["probe_episodes"]),
                           "curve": curve.tolist(), "final": float(curve[-1]),
                           "seed_final": gaps[sel, -1].tolist(),
                           "ideal": float(2.0 * gamma ** (length - 2))}
  return out


def summarize(records: Dict[str, Dict[str, List[dict]]], config) -> dict:
  """{method: {experiment: summarize_experiment(...)}} over the records present."""
  return {m: {x: summarize_experiment(x, recs, config) for x, recs in by_exp.items()
              if recs}
          for m, by_exp in records.items()}
