"""Part A's outputs from its cells: the prediction checks, slopes, tables, CSV and figure.

`summarise(config, records)` -> summary dict: `gae_checks` (one row per cell, policy,
critic and lambda: predicted bias along g*, measured with its 95% interval, verdict
"confirmed" when the prediction lies inside the interval), `snr_slopes` (per family,
sigma, policy and estimator: the least-squares slope of log SNR per episode against log T
over T >= `SLOPE_FROM`, with a 95% interval from the cells' bootstrap replicates, and
REINFORCE's verdict against the predicted -1).
"""
from __future__ import annotations

import csv
from typing import Dict, List

import numpy as np

from credit_jax.experiments import report

__all__ = ["SLOPE_FROM", "figures", "markdown", "summarise", "write_csv"]

SLOPE_FROM = 100    # the 1/T prediction is asymptotic: slopes use T >= this


def _group_key(r):
  return (r["family"], r["sigma"], r["policy"])


def _series(records) -> Dict[tuple, List[dict]]:
  out: Dict[tuple, List[dict]] = {}
  for r in records:
    out.setdefault(_group_key(r), []).append(r)
  return {k: sorted(v, key=lambda r: r["horizon"]) for k, v in out.items()}


def gae_checks(records) -> List[dict]:
  """One row per (cell, policy, critic, lambda). Every estimator of a cell sees the same
  episodes, so a sampling excursion moves all its rows together: `control_ok` says
  whether that cell's gae_obs_1 (REINFORCE with the observation critic as baseline,
  unbiased by construction) lies inside its own interval around 0, and `shift` is the
  measured bias minus gae_obs_1's on the same episodes (predicted: `predicted`)."""
  rows = []
  for r in records:
    base = r["estimators"]["gae_obs_1"]
    control_ok = base["bias_along_ci"][0] <= 0.0 <= base["bias_along_ci"][1]
    for lam, pred in r["gae_prediction"].items():
      for critic in ("obs", "oracle"):
        st = r["estimators"][f"gae_{critic}_{lam}"]
        lo, hi = st["bias_along_ci"]
        predicted = pred["bias_along"] if critic == "obs" else 0.0
        rows.append({"probe": r["probe"], "policy": r["policy"], "critic": critic,
                     "lambda": float(lam), "predicted": predicted,
                     "one_minus_E_lambda_d": pred["one_minus_E_lambda_d"]
                     if critic == "obs" else 0.0,
                     "measured": st["bias_along"], "ci": [lo, hi],
                     "shift": st["bias_along"] - base["bias_along"],
                     "control_ok": bool(control_ok),
                     "verdict": "confirmed" if lo <= predicted <= hi else "refuted"})
  return rows


def snr_slopes(records, start: int = SLOPE_FROM) -> List[dict]:
  rows = []
  for key, series in _series(records).items():
    series = [r for r in series if r["horizon"] >= start]
    if len(series) < 2:
      continue
    x = np.log([r["horizon"] for r in series])
    for name in series[0]["estimators"]:
      # log SNR per episode = log(snr_step x steps per episode); steps per episode = T.
      point = np.asarray([np.log(max(r["estimators"][name]["snr_step"], 1e-300)) for r in
                          series]) + x
      boot = np.stack([np.asarray(r["estimators"][name]["log_snr_boot"]) for r in series],
                      axis=1) + x                           # [B, n_T]
      slope = float(np.polyfit(x, point, 1)[0])
      bs = np.polyfit(x, boot.T, 1)[0]
      lo, hi = float(np.percentile(bs, 2.5)), float(np.percentile(bs, 97.5))
      row = {"family": key[0], "sigma": key[1], "policy": key[2], "estimator": name,
             "from_T": int(series[0]["horizon"]), "to_T": int(series[-1]["horizon"]),
             "slope": slope, "ci": [lo, hi]}
      if name == "reinforce_loo":
        # An interval wider than 1 cannot tell 1/T from 1 or 1/T^2.
        row["verdict"] = ("refuted" if not lo <= -1.0 <= hi else
                          "inconclusive" if hi - lo > 1.0 else "confirmed")
      rows.append(row)
  return rows


def summarise(config, records) -> dict:
  slim = []
  for r in records:
    s = dict(r)
    s["estimators"] = {n: {k: v for k, v in st.items() if k != "log_snr_boot"}
                       for n, st in r["estimators"].items()}
    slim.append(s)
  return {"config": config.to_dict(), "cells": slim, "gae_checks": gae_checks(records),
          "snr_slopes": snr_slopes(records)}


def _fmt(x, ci=None, digits=3):
  if ci is None:
    return f"{x:.{digits}f}"
  return f"{x:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def markdown(config, summary, records, seconds: float) -> str:
  lines = ["# Horizon answer, part A: the anatomy of the gradient", "",
           f"{config.episodes} episodes per (probe, policy) and set; intervals: 95% "
           f"bootstrap over episodes (groups for grpo / rloo), {config.bootstrap} "
           f"resamples. bias along g*: (mean g . u - |g*|) / |g*|; SNR per env step: "
           f"(mean g . u)^2 / Var(g . u) / steps per unit.", ""]
  checks = summary["gae_checks"]
  n_conf = sum(c["verdict"] == "confirmed" for c in checks)
  kept = [c for c in checks if c["control_ok"]]
  k_conf = sum(c["verdict"] == "confirmed" for c in kept)
  lines += [f"## GAE bias predictions: {n_conf} of {len(checks)} confirmed; {k_conf} of "
            f"{len(kept)} in cells whose unbiased gae_obs_1 lies in its own interval", ""]
  lines += report.table(
      ["probe", "policy", "critic", "lambda", "1 - E[lambda^d]", "predicted bias along g*",
       "measured [95%]", "shift from gae_obs_1", "verdict", "cell's control in interval"],
      [[c["probe"], c["policy"], c["critic"], f"{c['lambda']:g}",
        f"{c['one_minus_E_lambda_d']:.3f}", f"{c['predicted']:.3f}",
        _fmt(c["measured"], c["ci"]), f"{c['shift']:.3f}", c["verdict"],
        "yes" if c["control_ok"] else "no"] for c in checks]) + [""]
  slopes = summary["snr_slopes"]
  lines += [f"## SNR per episode against T: log-log slopes (T >= {SLOPE_FROM})", "",
            "REINFORCE's predicted slope: -1."]
  lines += report.table(
      ["family", "sigma", "policy", "estimator", "T range", "slope [95%]", "verdict"],
      [[s["family"], f"{s['sigma']:g}", s["policy"], s["estimator"],
        f"{s['from_T']}-{s['to_T']}", _fmt(s["slope"], s["ci"], 2),
        s.get("verdict", "")] for s in slopes]) + [""]
  for key, series in _series(records).items():
    names = list(series[0]["estimators"])
    lines += [f"## {key[0]} sigma {key[1]:g}, policy {key[2]} (exact success "
              f"{series[0]['exact_success']:.3f})", ""]
    head = ["estimator"] + [f"T={r['horizon']}" for r in series]
    lines += ["bias along g* [95%] (cosine)", ""]
    lines += report.table(head, [[n] + [
        f"{_fmt(r['estimators'][n]['bias_along'], r['estimators'][n]['bias_along_ci'], 2)}"
        f" ({r['estimators'][n]['cosine']:.2f})" for r in series] for n in names]) + [""]
    lines += ["SNR per env step [95%]", ""]
    lines += report.table(head, [[n] + [
        f"{r['estimators'][n]['snr_step']:.2e} [{r['estimators'][n]['snr_step_ci'][0]:.1e}, "
        f"{r['estimators'][n]['snr_step_ci'][1]:.1e}]" for r in series] for n in names])
    lines += [""]
  lines.append(report.wall_time(seconds))
  return "\n".join(lines) + "\n"


def write_csv(path: str, records) -> None:
  fields = ["probe", "family", "sigma", "horizon", "policy", "exact_success", "exact_J",
            "grad_norm", "estimator", "units", "steps_per_unit", "bias_along",
            "bias_along_lo", "bias_along_hi", "rel_err", "noise_floor", "cosine",
            "var_along", "snr_step", "snr_step_lo", "snr_step_hi"]
  with open(path, "w", newline="") as f:
    out = csv.writer(f)
    out.writerow(fields)
    for r in records:
      for name, st in r["estimators"].items():
        out.writerow([r["probe"], r["family"], r["sigma"], r["horizon"], r["policy"],
                      r["exact_success"], r["exact_J"], r["grad_norm"], name, st["units"],
                      st["steps_per_unit"], st["bias_along"], *st["bias_along_ci"],
                      st["rel_err"], st["noise_floor"], st["cosine"], st["var_along"],
                      st["snr_step"], *st["snr_step_ci"]])


def figures(workdir: str, config, records, summary) -> List[str]:
  """anatomy.png: SNR per env step against T (probe sigma 0 and the corridor, the
  middle policy) and GAE's bias along g* with the observation critic against its
  prediction."""
  del summary
  series = _series(records)
  policy = f"success{float(config.targets[0]):g}"
  fig, axes = report.figure(1, 3, figsize=(17, 4.8))
  for ax, key, title in ((axes[0, 0], ("probe", 0.0, policy), "credit probe, sigma 0"),
                         (axes[0, 1], ("corridor", 0.0, policy), "corridor")):
    if key not in series:
      continue
    s = series[key]
    t = [r["horizon"] for r in s]
    for name in s[0]["estimators"]:
      if name.startswith("gae_obs") and name != "gae_obs_1":
        continue
      if name.startswith("gae_oracle") and name not in ("gae_oracle_1", "gae_oracle_0.9"):
        continue
      ax.loglog(t, [max(r["estimators"][name]["snr_step"], 1e-12) for r in s], "o-",
                label=name, ms=3)
    ax.set_xlabel("T (L)")
    ax.set_ylabel("SNR per env step")
    ax.set_title(f"{title}, policy {policy}")
    ax.legend(fontsize=7)
  ax = axes[0, 2]
  key = ("probe", 0.0, policy)
  if key in series:
    s = series[key]
    t = [r["horizon"] for r in s]
    for lam in config.lambdas:
      name = f"gae_obs_{float(lam):g}"
      y = [r["estimators"][name]["bias_along"] for r in s]
      lo = [r["estimators"][name]["bias_along_ci"][0] for r in s]
      hi = [r["estimators"][name]["bias_along_ci"][1] for r in s]
      line = ax.semilogx(t, y, "o", label=f"measured lambda {float(lam):g}")[0]
      ax.fill_between(t, lo, hi, color=line.get_color(), alpha=0.2)
      ax.semilogx(t, [r["gae_prediction"][f"{float(lam):g}"]["bias_along"] for r in s],
                  "--", color=line.get_color())
    ax.set_xlabel("T")
    ax.set_ylabel("relative bias along g*")
    ax.set_title("GAE, observation critic: measured (dots, 95%) vs predicted (dashed)")
    ax.legend(fontsize=7)
  return [report.save_figure(fig, workdir, "anatomy.png")]
