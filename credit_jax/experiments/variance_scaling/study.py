"""Experiment 1: how the policy-gradient estimator's variance grows with the horizon.

  python3 scripts/variance_scaling.py --config=configs/variance_scaling.py:small \
      --workdir=/tmp/variance_scaling
  summary = variance_scaling.run(variance_scaling.default_config(), workdir)

A uniform random policy (a tabular softmax over KeyChain contexts with zero logits, see
`credit_jax.diagnostics`) plays KeyChain-v0 at each horizon T. Per seed, N trajectories
are scored by every credit scheme and turned into N single-trajectory gradients; their
variance (trace of the covariance), SNR, bias and cosine are measured against the exact
gradient, and the credit accuracy against the pivotal mask. Schemes:

  terminal                 the episode's return on every step (REINFORCE, no discount)
  rtg_gamma{g}             returns-to-go discounted by g
  gae_zero_gamma{g}        GAE(lambda) with a zero value
  gae_fitted_gamma{g}      GAE(lambda) with V(t), a least-squares value on one-hot time
                           features fitted to the discounted returns-to-go of a separate
                           batch of trajectories (`exact.fit_time_value`)

Two reward modes are measured on the same trajectories:
  terminal  KeyChain's own reward: 1 at the last step iff every pivotal step was right.
  partial   a per-step reward wrapper, defined here and nowhere else: each pivotal step
            answered right pays 1/k at that step (`info["correct"] / k`), nothing at the
            end. KeyChain has no such option; since rewards do not change its dynamics,
            relabelling the collected rewards is the same as stepping a wrapped env.
With the terminal-only reward and gamma = 1 returns-to-go equal the terminal return at
every step, so the two estimators coincide exactly; the partial mode shows where
undiscounted returns-to-go do help (rewards before step t are dropped from its credit).

Beside the trace, the variance is split (`exact.gradient_variance_parts`) into the
part in the pivotal parameters (the cue rows of the logits, the only ones J depends on)
and the part along the exact gradient: the trace's growth with T is all in the
distractor row, whose true gradient is 0 (see summary.md for what each means for
learning speed).

The bias and SNR are against the gradient of the undiscounted objective J (the task's
success rate, or the expected number of right keys / k), so discounting and lambda show
up as bias. Every horizon is one compiled call over all seeds.

Writes into the workdir: metrics.jsonl (one record per horizon, reward mode and scheme),
variance_vs_horizon.png, snr_vs_horizon.png, credit_accuracy_vs_horizon.png,
summary.json ({"slope": {scheme: log-log slope of variance vs T}, "slope_by_view":
{reward: {trace | pivotal | along: {scheme: slope}}}, ...}) and summary.md.

The compiled measurement and its records are in `measure.py` beside this module (its
names are re-exported here); this module fits the slopes, draws and writes the report.
"""
from __future__ import annotations

import os

import jax
import ml_collections
import numpy as np

from credit_jax.experiments.variance_scaling import exact
from credit_jax.runtime import metrics
from credit_jax.algos import ConfigError
from credit_jax.experiments import report
from credit_jax.experiments.variance_scaling.measure import (
    PARTS, REWARD_MODES, STATS, make_measure, records_for, scheme_names, step_rewards)

__all__ = [
    "PARTS", "REWARD_MODES", "SLOPE_TARGET", "STATS", "VARIANCE_VIEWS",
    "default_config", "make_measure", "markdown", "num_seeds", "plot", "records_for",
    "run", "scheme_names", "slopes", "step_rewards", "summarize", "validate_config",
    "variance_parts_markdown",
]

SLOPE_TARGET = (0.8, 1.2)
# What the figure and the slopes compare: the trace and two of its parts.
VARIANCE_VIEWS = {"trace": "variance", "pivotal": "variance_pivotal",
                  "along": "variance_along"}


def default_config() -> ml_collections.ConfigDict:
  """The "small" run: T up to 3000, a few minutes on a 2-core CPU."""
  c = ml_collections.ConfigDict()
  c.env_name = "KeyChain-v0"    # the credit-assignment probe (the only env with an exact gradient)
  c.num_pivotal = 2             # pivotal steps k per episode
  c.num_actions = 4             # actions A; a power of two keeps cues exactly uniform
  c.horizons = (10, 30, 100, 300, 1000, 3000)  # episode lengths T; one compiled call each
  c.num_trajectories = 100      # trajectories per seed and horizon whose gradients are measured
  c.num_fit_trajectories = 100  # separate trajectories per seed to fit the per-step value V(t)
  c.seeds = 32                  # independent repetitions, vmapped inside each compiled call
  c.seeds_per_chunk = 8         # >0: map over chunks of this many seeds (bounds memory); 0: all at once
  c.seed = 0                    # base RNG seed
  c.discounts = (1.0, 0.99)     # gamma values for returns-to-go and GAE
  c.gae_lambda = 0.95           # lambda of both GAE schemes
  c.min_slope_horizon = 10      # the log-log slope is fitted over horizons >= this
  return c


def num_seeds(config) -> int:
  """Seeds vmapped in one compiled call (a chunk of them when chunked)."""
  return int(config.seeds_per_chunk) or int(config.seeds)


def validate_config(config) -> None:
  """Raises ConfigError naming the field when the experiment cannot run as configured."""
  a = int(config.num_actions)
  if a < 2 or a & (a - 1):
    raise ConfigError(f"config.num_actions must be a power of two >= 2 (uniform cues, so "
                     f"the exact gradient is exact), got {a}")
  if min(config.horizons) < config.num_pivotal:
    raise ConfigError(f"config.horizons must all be >= num_pivotal={config.num_pivotal}, "
                     f"got {tuple(config.horizons)}")
  for field in ("num_trajectories", "num_fit_trajectories"):
    if int(config[field]) < 2:
      raise ConfigError(f"config.{field} must be >= 2, got {config[field]}")
  chunk = int(config.seeds_per_chunk)
  if chunk < 0 or (chunk and config.seeds % chunk):
    raise ConfigError(f"config.seeds_per_chunk={chunk} must be 0 or divide "
                     f"config.seeds={config.seeds}")
  if not all(0.0 < g <= 1.0 for g in config.discounts):
    raise ConfigError(f"config.discounts must lie in (0, 1], got {tuple(config.discounts)}")
  if sum(h >= config.min_slope_horizon for h in config.horizons) < 2:
    raise ConfigError("config.min_slope_horizon leaves fewer than 2 horizons to fit a slope")


def _series(records, mode, name, key):
  rows = sorted((r for r in records if r["reward"] == mode and r["scheme"] == name),
                key=lambda r: r["horizon"])
  return (np.array([r["horizon"] for r in rows], float),
          np.array([r[key] for r in rows], float))


def slopes(records, names, mode, min_horizon, key="variance"):
  """{scheme: log-log slope of `key` against T} (NaN where a value is not positive)."""
  out = {}
  for name in names:
    t, v = _series(records, mode, name, key)
    keep = t >= min_horizon
    out[name] = (float(exact.loglog_slope(t[keep], v[keep])) if np.all(v[keep] > 0)
                 else float("nan"))
  return out


def _style(name):
  colours = {"terminal": "black", "rtg": "tab:blue", "gae_zero": "tab:orange",
             "gae_fitted": "tab:green"}
  kind = name.split("_gamma")[0]
  dashed = "_gamma" in name and not name.endswith("_gamma1")
  if kind == "terminal":  # wide and pale: rtg_gamma1 can coincide with it exactly
    return dict(color="black", lw=4, alpha=0.35, marker="o", ms=5)
  return dict(color=colours[kind], ls="--" if dashed else "-", marker="o", ms=3)


def plot(records, names, rows, workdir, filename):
  """A figure with one column per reward mode and one row per spec in `rows`.

  Each row is a dict: key (the record field against T), ylabel, log_y, and optionally
  err (the field drawn as error bars, default key + "_se"), upper_err_only (bars above
  the point only), slope_of ({mode: {scheme: slope}} for the legend) and reference
  ((label, T -> y) drawn dotted). Writes the PNG `workdir/filename`; returns its path.
  """
  titles = {"terminal": "reward 1 at the end iff all keys right",
            "partial": "per-step reward: 1/k per right key"}
  fig, axes = report.figure(len(rows), len(REWARD_MODES), figsize=(13, 4.6 * len(rows)))
  horizons = np.array(sorted({r["horizon"] for r in records}), float)
  for row, axs in zip(rows, axes):
    for ax, mode in zip(axs, REWARD_MODES):
      for name in names:
        t, y = _series(records, mode, name, row["key"])
        err_key = row.get("err", row["key"] + "_se")
        err = _series(records, mode, name, err_key)[1] if err_key in records[0] else None
        if err is not None and row.get("upper_err_only"):
          err = np.stack([np.zeros_like(err), err])
        slope = row.get("slope_of")
        label = name if slope is None else f"{name} (slope {slope[mode][name]:.2f})"
        ax.errorbar(t, y, yerr=err, label=label, capsize=2, **_style(name))
      if "reference" in row:
        label, curve = row["reference"]
        ax.plot(horizons, curve(horizons), color="grey", ls=":", lw=1.2, label=label)
      ax.set_xscale("log")
      if row["log_y"]:
        ax.set_yscale("log")
      ax.set_xlabel("horizon T")
      ax.set_ylabel(row["ylabel"])
      ax.set_title(titles[mode], fontsize=10)
      ax.grid(alpha=0.3, which="both")
      ax.legend(fontsize=7, loc="best")
  return report.save_figure(fig, workdir, filename)


def summarize(config, records, elapsed):
  names = scheme_names(config.discounts)
  slope = {m: slopes(records, names, m, config.min_slope_horizon) for m in REWARD_MODES}
  t, term = _series(records, "terminal", "terminal", "variance")
  targets = {"terminal_slope": {
      "value": slope["terminal"]["terminal"], "target": list(SLOPE_TARGET),
      "met": SLOPE_TARGET[0] <= slope["terminal"]["terminal"] <= SLOPE_TARGET[1]}}
  discounted = [g for g in config.discounts if g < 1.0]
  for g in discounted:
    _, rtg = _series(records, "terminal", f"rtg_gamma{g:g}", "variance")
    ratio = rtg / term
    targets[f"rtg_gamma{g:g}_below_terminal_for_T>=30"] = {
        "ratio_by_T": {str(int(h)): float(x) for h, x in zip(t, ratio)},
        "met": bool(np.all(ratio[t >= 30] < 1.0))}
  if 1.0 in config.discounts:
    diffs = [r["max_abs_diff_terminal_rtg1"] for r in records if r["reward"] == "terminal"]
    targets["terminal_equals_rtg_gamma1_terminal_reward"] = {
        "max_abs_gradient_difference": float(max(diffs)), "met": float(max(diffs)) == 0.0}
    _, p_term = _series(records, "partial", "terminal", "variance")
    _, p_rtg = _series(records, "partial", "rtg_gamma1", "variance")
    targets["partial_reward_rtg_gamma1_over_terminal"] = {
        "ratio_by_T": {str(int(h)): float(x) for h, x in zip(t, p_rtg / p_term)}}
  by_view = {m: {view: slopes(records, names, m, config.min_slope_horizon, key)
                  for view, key in VARIANCE_VIEWS.items()} for m in REWARD_MODES}
  terminal_by_t = {m: {"horizon": [int(h) for h in t], **{
      key: [float(x) for x in _series(records, m, "terminal", key)[1]]
      for key in ("variance", "variance_pivotal", "variance_distractor", "variance_along",
                  "variance_along_se", "snr_along", "true_norm_sq")}}
      for m in REWARD_MODES}
  return {"slope": slope["terminal"], "slope_partial_reward": slope["partial"],
          "slope_by_view": by_view, "terminal_estimator_by_T": terminal_by_t,
          "targets": targets, "horizons": [int(h) for h in t],
          "seeds": int(config.seeds), "trajectories_per_seed": int(config.num_trajectories),
          "num_pivotal": int(config.num_pivotal), "num_actions": int(config.num_actions),
          "gae_lambda": float(config.gae_lambda), "wall_seconds": elapsed}


def variance_parts_markdown(s):
  """summary.md lines: the trace beside the variance in the pivotal parameters and along
  the exact gradient, and what each means for learning speed."""
  v = s["slope_by_view"]
  lines = ["", "## Where the variance lies", "",
           "Log-log slopes against T of the trace, of the variance in the pivotal "
           "parameters (the logits of the cue rows, the only ones J depends on) and of the "
           "variance along the exact gradient (Var(g . u), u = grad J / |grad J|):", ""]
  lines += report.table(
      ("scheme", "trace", "pivotal", "along grad J", "trace (per-step reward)",
       "pivotal (per-step)", "along (per-step)"),
      [(n,) + tuple(f"{v[m][view][n]:.2f}" for m in REWARD_MODES
                    for view in VARIANCE_VIEWS) for n in s["slope"]])
  lines += ["", "The terminal-reward estimator, per T (terminal-only reward; distractor = "
            "trace - pivotal; SNR along = |grad J|^2 / variance along):", ""]
  b = s["terminal_estimator_by_T"]["terminal"]
  lines += report.table(
      ("T", "trace", "pivotal", "distractor", "along grad J", "SNR along"),
      [(t, f"{b['variance'][i]:.4g}", f"{b['variance_pivotal'][i]:.4g}",
        f"{b['variance_distractor'][i]:.4g}",
        f"{b['variance_along'][i]:.4g} +- {b['variance_along_se'][i]:.2g}",
        f"{b['snr_along'][i]:.3g}") for i, t in enumerate(b["horizon"])])
  lines += [
      "", "What each means for learning speed (measured here: estimator statistics at a "
      "fixed policy; learning speed itself is the horizon study's measurement):",
      "- Along grad J: the noise in the only direction that changes J to first order. "
      "The trajectories a step needs to move J reliably scale with 1 / SNR along; "
      "where this variance is flat in T, so is the batch a first-order step needs.",
      "- Pivotal parameters: noise in the parameters J depends on. A step of size eta "
      "loses about eta^2 x curvature x this variance to second order, so it bounds the "
      "usable step size of a tabular policy.",
      "- Trace: adds the distractor parameters, whose true gradient is 0. In the tabular "
      "policy they never touch J, so their noise costs nothing; in a network the "
      "distractor steps' score terms move weights the pivotal decisions share, and then "
      "the trace, linear in T, is what caps the step size. The trace is the worst case "
      "over parameterisations, not the cost every policy pays."]
  return lines


def markdown(summary, records):
  """summary.md: what was measured, the targets, and a table per point."""
  s, tg = summary, summary["targets"]
  p = 1.0 / s["num_actions"] ** s["num_pivotal"]
  lines = [
      "# Experiment 1: policy-gradient variance against horizon (KeyChain-v0)", "",
      f"Uniform random policy, k = {s['num_pivotal']} pivotal steps, A = "
      f"{s['num_actions']} actions (success rate {p:.4f}), {s['seeds']} seeds x "
      f"{s['trajectories_per_seed']} trajectories per horizon, GAE lambda = "
      f"{s['gae_lambda']}. Variance is the trace of the covariance of one trajectory's "
      "gradient estimate; SNR = ||true gradient||^2 / mean squared error; bias and "
      "cosine are against the exact gradient of the undiscounted objective. Compute per "
      "horizon: seeds x (trajectories + value-fitting trajectories) episodes of T env "
      "steps at a fixed (uniform) policy; no learning happens.", "",
      "## Fitted log-log slope of variance against T", ""]
  lines += report.table(
      ("scheme", "slope (terminal reward)", "slope (per-step reward)"),
      [(name, f"{v:.3f}", f"{s['slope_partial_reward'][name]:.3f}")
       for name, v in s["slope"].items()])
  t = tg["terminal_slope"]
  lines += ["", "## Targets", "",
            f"- Terminal-reward estimator: slope {t['value']:.3f}, target "
            f"[{t['target'][0]}, {t['target'][1]}]: {'met' if t['met'] else 'NOT met'}. "
            "Each distractor step adds an independent, zero-mean score term, so the "
            "variance grows linearly in T while the signal stays fixed."]
  for key, v in tg.items():
    if key.endswith("_below_terminal_for_T>=30"):
      ratios = ", ".join(f"T={h}: {x:.3f}" for h, x in v["ratio_by_T"].items())
      lines.append(f"- {key.split('_below')[0]} / terminal variance ({ratios}): "
                   f"{'below 1 at every T >= 30 (met)' if v['met'] else 'NOT below 1 at every T >= 30'}. "
                   "Discounting caps the credited window at about 1/(1 - gamma) steps, "
                   "at the price of bias: early pivotal steps get almost no credit.")
  if "terminal_equals_rtg_gamma1_terminal_reward" in tg:
    v = tg["terminal_equals_rtg_gamma1_terminal_reward"]
    ratios = ", ".join(f"T={h}: {x:.3f}" for h, x in
                       tg["partial_reward_rtg_gamma1_over_terminal"]["ratio_by_T"].items())
    lines.append(
        f"- With gamma = 1 and the terminal-only reward, returns-to-go and the terminal "
        f"reward give identical estimates (largest per-trajectory gradient difference "
        f"{v['max_abs_gradient_difference']:g}): with one reward at the end there is no "
        "past reward to drop. With the per-step reward (1/k per right key, paid at its "
        f"step) undiscounted returns-to-go help: rtg_gamma1 / terminal variance {ratios}.")
  lines += variance_parts_markdown(s)
  gae = [n for n in s["slope"] if n.startswith("gae")]
  last = [r for r in records if r["reward"] == "terminal" and r["horizon"] == max(s["horizons"])]
  rel = {r["scheme"]: r for r in last}
  gae_slopes = ", ".join(f"{s['slope'][n]:.2f}" for n in gae)
  acc = {m: {r["scheme"]: r["credit_accuracy"] for r in records
             if r["reward"] == m and r["horizon"] == max(s["horizons"])} for m in REWARD_MODES}
  acc_text = {m: ", ".join(f"{n} {v:.4f}" for n, v in acc[m].items()) for m in acc}
  lines += [
      "", "## Reading the figures", "",
      f"- GAE's variance grows with slopes {gae_slopes} against the terminal reward's "
      f"{s['slope']['terminal']:.2f}, "
      "because credit decays as (gamma lambda)^distance: only the last ~1/(1 - gamma lambda) "
      "steps before the reward are credited. Under the terminal-only reward those steps "
      "rarely hold a pivotal one, and a value of the observation cannot see whether the "
      "earlier keys were right, so the signal goes with the noise: at "
      f"T = {max(s['horizons'])} the relative bias |E g - grad J| / |grad J| is "
      + ", ".join(f"{n} {rel[n]['rel_bias']:.2f}" for n in gae)
      + " (1 means no signal left; noise floor "
      f"{max(rel[n]['rel_bias_noise'] for n in gae):.2f}). Its per-trajectory SNR "
      "(|grad J|^2 / MSE) can still beat the unbiased estimators', but averaging more "
      "trajectories never removes that bias.",
      f"- Credit accuracy (share of |credit| on the pivotal steps; k/T = "
      f"{s['num_pivotal'] / max(s['horizons']):.4f} when spread evenly) at T = "
      f"{max(s['horizons'])}: terminal-only reward: {acc_text['terminal']}; per-step "
      f"reward: {acc_text['partial']}. With one reward at the end no scheme can tell "
      "which steps mattered; a reward paid at the pivotal step lets the schemes that "
      "weight steps near a reward (GAE, discounting) put their credit there.",
      "", "## Per-horizon figures (terminal reward)", ""]
  lines += report.table(
      ("T", "scheme", "variance", "SNR", "cosine", "bias / |grad J| (noise floor)",
       "credit accuracy"),
      [(r["horizon"], r["scheme"], f"{r['variance']:.4g} +- {r['variance_se']:.2g}",
        f"{r['snr']:.3g}", f"{r['cosine']:.3f}",
        f"{r['rel_bias']:.2f} ({r['rel_bias_noise']:.2f})", f"{r['credit_accuracy']:.4f}")
       for r in records if r["reward"] == "terminal"])
  lines += ["", report.wall_time(s["wall_seconds"]), ""]
  return "\n".join(lines)


def run(config, workdir: str, log=print) -> dict:
  """Runs the experiment; writes metrics, figures and summaries into `workdir`.

  Returns the summary (also summary.json): {"slope": {scheme: log-log slope of the
  variance against T, terminal reward}, "slope_partial_reward": {...}, "targets": ...}.
  """
  validate_config(config)
  os.makedirs(workdir, exist_ok=True)
  names = scheme_names(config.discounts)
  key = jax.random.key(config.seed)
  records, watch = [], report.Stopwatch()
  with metrics.MetricsWriter(workdir, tensorboard=False) as writer:
    for i, horizon in enumerate(config.horizons):
      lap = report.Stopwatch()
      # A fresh key per horizon, so errors are independent across the points of a slope.
      out = make_measure(config, int(horizon))(jax.random.fold_in(key, int(horizon)))
      recs = records_for(int(horizon), out, names, config.num_trajectories,
                         len(records) + 1)
      writer.write_records(recs)
      records += recs
      head = {r["scheme"]: r["variance"] for r in recs if r["reward"] == "terminal"}
      log(f"horizon {horizon:>6} ({i + 1}/{len(config.horizons)}) | "
          f"{lap.seconds():5.1f}s | variance terminal {head['terminal']:.4g} | "
          + " | ".join(f"{n} {head[n]:.4g}" for n in names[1:3]))
  summary = summarize(config, records, watch.seconds())
  views = summary["slope_by_view"]
  labels = {"trace": "variance of one trajectory's gradient\n(trace, all parameters)",
            "pivotal": "variance in the pivotal parameters\n(trace over the cue rows)",
            "along": "variance along the exact gradient\nVar(g . grad J / |grad J|)"}
  plot(records, names, [dict(
      key=key, ylabel=labels[view], log_y=True,
      slope_of={m: views[m][view] for m in REWARD_MODES})
      for view, key in VARIANCE_VIEWS.items()], workdir, "variance_vs_horizon.png")
  plot(records, names, [
      dict(key="snr", ylabel="SNR = |true grad|^2 / MSE (one trajectory)", log_y=True),
      dict(key="rel_bias", err="rel_bias_noise", log_y=False, upper_err_only=True,
           ylabel="|E g - true grad| / |true grad|\n(bar: noise floor, resolved above it)")],
       workdir, "snr_vs_horizon.png")
  plot(records, names, [dict(
      key="credit_accuracy", ylabel="share of |credit| on pivotal steps", log_y=True,
      reference=("k/T: credit spread evenly", lambda t: config.num_pivotal / t))],
       workdir, "credit_accuracy_vs_horizon.png")
  report.write_summary(workdir, summary, markdown(summary, records))
  log("slopes (terminal reward): " + ", ".join(
      f"{k} {v:.3f}" for k, v in summary["slope"].items()))
  return summary
