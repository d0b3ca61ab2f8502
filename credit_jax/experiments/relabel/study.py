"""Hindsight relabeling on and off: what it buys in sample efficiency.

  python3 scripts/relabel.py --config=configs/relabel.py --workdir=/tmp/her
  python3 scripts/relabel.py --config=configs/relabel.py --workdir=/tmp/her \
      --config.parts=b
  summary = relabel.run(relabel.default_config(), workdir)

(a) BitFlip, DQN with and without HER (`future`, k = 4): final greedy success against
    the number of bits n. Both arms and all seeds of one n run in one compiled call
    (HER off is `relabel_weight = 0`, a traced value).
(b) GoalGrid and TextEdit, GRPO without relabeling, with plain relabeling and with the
    importance-weighted one: success against env steps. Protocol: per mode, the lr
    with the highest mean success in a small sweep (`lr_grid`, on seeds of its own,
    over the first half of the updates); then `seeds` (8) seeds per mode at that lr on
    fresh keys; env steps to `success_level` per seed, their median with a bootstrap
    interval over seeds and the paired ratio of medians to no relabeling. All (mode,
    lr) cells of a sweep, and all modes and seeds of a run, are one compiled call.
    The settings tried before these (null results included) are listed in
    `EARLIER_SETTINGS` and reported beside the results.

The figures of part (b) and summary.md are drawn in `report.py` beside this module
(its names are re-exported here).

Writes into the workdir: bitflip.png, grpo_<env>.png, summary.json (success per n and
arm; per env and mode: the chosen lr and the sweep, env steps to `success_level` per
seed, their median and interval, the ratio to no relabeling and its interval; wall
times) and summary.md.

One run of the `:full` variant (jax 0.10.2, 2 shared CPU cores) hung for good in a
vmapped GRPO cell: every XLA worker thread idle, the host waiting for the result (an
Eigen thread-pool wedge others report for vmapped CPU programs). The rerun with
XLA_FLAGS=--xla_cpu_multi_thread_eigen=false finished with identical numbers (the
script's XLA flags come from `credit_jax.runtime.launch.configure_process`).
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax import algos
from credit_jax.algos import ConfigError, dqn, grpo_relabel
from credit_jax.experiments import report
from credit_jax.experiments.relabel.report import (EARLIER_SETTINGS, grpo_markdown,
                                                     plot_grpo, summary_markdown)

__all__ = [
    "EARLIER_SETTINGS", "GRPO_ENVS", "SWEEP_SEED_OFFSET", "bootstrap_interval",
    "default_config", "dqn_config", "grpo_config", "grpo_markdown", "mode_results",
    "num_seeds", "part_a", "part_b", "plot_grpo", "run", "run_arms", "steps_to_level",
    "summary_markdown", "sweep_lr", "validate_config",
]


def dqn_config(num_bits=15, her=True):
  """DQN(+HER) on BitFlip-v0 with `num_bits` bits (the HER paper's experiment): the
  recipe's `default_config()` with n bits, episodes of n steps, and `her=False` turning
  relabeling off (`relabel_weight = 0`).

  Part (a)'s recipe config; alone, for scripts/train.py: configs/dqn_bitflip.py.
  """
  c = dqn.default_config()
  c.env_kwargs.num_bits = num_bits  # n; the episode limit is n steps
  c.horizon = num_bits            # steps per episode (the env's limit)
  c.relabel_weight = 1.0 if her else 0.0  # 0: plain DQN, no HER
  return c


GRPO_ENVS = {
    # Sparse reward must be the bottleneck (HER's premise) and relabeled goals must be
    # goals the task poses. GoalGrid: 9x9 open grid, goal ANY cell (targets="all"), 18
    # steps; random policy: 13% success (first 3 updates), and goals are one-hot, so
    # each goal must be learnt from its own rare successes. The settings tried before
    # (null results included) are in EARLIER_SETTINGS.
    "GoalGrid-v0": dict(env_kwargs={"size": 9, "targets": "all",
                                    "max_steps_in_episode": 18},
                        horizon=18, num_updates=150),
    # TextEdit: every buffer (length 0..3, tokens from 2) other than the start (2 tokens)
    # is a goal (goal_edits="all", the analogue of GoalGrid's fix), 12 steps; random
    # policy: 5.5% success (first 3 updates). Earlier settings: EARLIER_SETTINGS.
    "TextEdit-v0": dict(env_kwargs={"buffer_len": 3, "vocab_size": 2, "start_len": 2,
                                    "num_edits": 1, "goal_edits": "all"},
                        horizon=12, num_updates=300),
}


def grpo_config(env_name="GoalGrid-v0", relabel="plain"):
  """GRPO (+ hindsight relabeling, `relabel` in none | plain | iw) on a goal env of
  `GRPO_ENVS`: the recipe's `default_config()` with that env's options, episode length
  and number of updates.

  Part (b)'s recipe config per environment; GoalGrid alone, for scripts/train.py:
  configs/grpo_relabel_goalgrid.py.
  """
  c = grpo_relabel.default_config()
  c.env_name = env_name           # a goal environment
  c.env_kwargs = ml_collections.ConfigDict(dict(GRPO_ENVS[env_name]["env_kwargs"]))
  c.relabel = relabel             # none | plain | iw (importance-weighted)
  c.num_updates = GRPO_ENVS[env_name]["num_updates"]  # updates (one group rollout each)
  c.horizon = GRPO_ENVS[env_name]["horizon"]  # rollout steps per episode
  return c



def default_config() -> ml_collections.ConfigDict:
  """BitFlip n in {5, 10, 15}; GoalGrid with every cell a goal, TextEdit with every
  buffer a goal; 8 seeds per arm after a learning-rate sweep per arm (part b alone:
  about 15 minutes on a 2-core CPU)."""
  c = ml_collections.ConfigDict()
  c.parts = "ab"                  # which parts run: a (BitFlip DQN +- HER), b (GRPO modes)
  c.seeds = 8                     # seeds per cell, vmapped in one compiled call
  c.success_level = 0.5           # "env steps to reach this success rate" in the summary
  c.smooth = 5                    # ... read off a trailing mean over this many updates
  c.bootstrap_samples = 2000      # resamples of the seeds for the steps-to-level intervals
  # (a) BitFlip: DQN with and without HER (relabel_weight 0), one compile per n.
  c.bitflip_bits = (5, 10, 15)    # n values
  # DQN cycles (updates) per bit: n = 15 -> 300 (one seed on CPU solved n = 15 at 100
  # cycles: 0.93, and 1.0 at 200).
  c.cycles_per_bit = 20
  c.dqn = dqn_config()            # template; num_bits, horizon, num_updates set per n
  # (b) GRPO with relabeling modes none | plain | iw, all in one compile per env.
  c.modes = ("none", "plain", "iw")
  # Learning rate per mode, chosen by a sweep on seeds the reported runs do not use
  # (keys from seed + SWEEP_SEED_OFFSET), over the first `sweep_update_fraction` of the
  # updates: the lr with the highest mean success over those updates (area under the
  # learning curve, defined even where no seed reaches success_level).
  c.lr_grid = (1e-3, 3e-3, 1e-2)  # () or one value: no sweep, every mode at that lr
  c.sweep_seeds = 2               # seeds per (mode, lr) in the sweep
  c.sweep_update_fraction = 0.5   # share of num_updates the sweep runs
  c.grpo = ml_collections.ConfigDict(
      {name.split("-")[0].lower(): grpo_config(name) for name in GRPO_ENVS})
  return c


def num_seeds(config) -> int:
  """Cells vmapped in one compiled call: arms (or relabeling modes) x seeds."""
  return max(2, len(config.modes)) * int(config.seeds)


def validate_config(config) -> None:
  """Raises ConfigError naming the field when the experiment cannot run as configured."""
  if not config.parts or set(config.parts) - set("ab"):
    raise ConfigError(f"config.parts must be made of 'a' and 'b', got {config.parts!r}")
  for field in ("seeds", "smooth", "cycles_per_bit", "sweep_seeds", "bootstrap_samples"):
    if int(config[field]) < 1:
      raise ConfigError(f"config.{field} must be >= 1, got {config[field]}")
  if not 0.0 < config.success_level <= 1.0:
    raise ConfigError(f"config.success_level must lie in (0, 1], got {config.success_level}")
  if any(not lr > 0.0 for lr in config.lr_grid):
    raise ConfigError(f"config.lr_grid must hold positive learning rates, got "
                      f"{tuple(config.lr_grid)}")
  if not 0.0 < config.sweep_update_fraction <= 1.0:
    raise ConfigError(f"config.sweep_update_fraction must lie in (0, 1], got "
                      f"{config.sweep_update_fraction}")
  if min(config.bitflip_bits) < 1:
    raise ConfigError(f"config.bitflip_bits must all be >= 1, got {config.bitflip_bits}")
  bad = [m for m in config.modes if m not in grpo_relabel.MODES]
  if bad or not config.modes:
    raise ConfigError(f"config.modes must be a non-empty subset of {grpo_relabel.MODES}, "
                      f"got {tuple(config.modes)}")
  for name, recipe in [("dqn", config.dqn)] + [(f"grpo.{k}", v) for k, v in
                                               config.grpo.items()]:
    try:
      algos.validate_config(recipe)
    except ConfigError as e:
      raise ConfigError(str(e).replace("config.", f"config.{name}.", 1)) from None


def run_arms(config, arms: Sequence[Dict[str, float]], seeds: int
             ) -> Tuple[Dict[str, np.ndarray], float, float]:
  """Trains `config` once per (arm, seed) in one compiled, vmapped call.

  Args:
    arms: per arm, hparam overrides (e.g. `{"relabel_weight": 0.0}`).
  Returns:
    (metrics {name: [arms, seeds, updates]}, compile seconds, run seconds).
  """
  train = algos.make_train(config)
  hp = {k: np.stack([np.full((seeds,), arm.get(k, float(v)), np.float32) for arm in arms])
        .reshape(-1) for k, v in train.default_hparams.items()}
  keys = jax.random.split(jax.random.PRNGKey(int(config.seed)), seeds)
  keys = jnp.tile(keys, (len(arms), 1))         # arm a, seed s uses key s: paired arms
  (_, metrics), compile_s, run_s = report.compile_and_run(jax.vmap(train), keys, hp)
  shaped = {k: np.asarray(v).reshape((len(arms), seeds) + np.shape(v)[1:])
            for k, v in metrics.items()}
  return shaped, compile_s, run_s


def steps_to_level(success: np.ndarray, steps_per_update: int, level: float,
                   smooth: int) -> Optional[int]:
  """Env steps at the first update whose trailing `smooth`-update mean of `success`
  ([updates]) reaches `level`; None if it never does."""
  success = np.asarray(success, np.float64)
  window = max(1, min(int(smooth), len(success)))
  trailing = np.convolve(success, np.ones(window) / window, mode="valid")
  hit = np.nonzero(trailing >= level)[0]
  return None if hit.size == 0 else int((hit[0] + window) * steps_per_update)


def part_a(cfg, workdir: str, log) -> dict:
  """BitFlip DQN with and without HER, success against n."""
  arms = {"her": {"relabel_weight": float(cfg.dqn.relabel_weight) or 1.0},
          "no_her": {"relabel_weight": 0.0}}
  results = {}
  for n in cfg.bitflip_bits:
    c = cfg.dqn.copy_and_resolve_references()
    c.env_kwargs.num_bits, c.horizon = int(n), int(n)
    c.num_updates = int(cfg.cycles_per_bit) * int(n)
    metrics, compile_s, run_s = run_arms(c, list(arms.values()), int(cfg.seeds))
    # DQN's `greedy_success`: its greedy policy's episodes (`success` is the
    # epsilon-greedy behaviour policy's; the recipe contract in docs/RECIPES.md).
    final = metrics["greedy_success"][:, :, -10:].mean(-1)  # [arms, seeds]
    results[str(n)] = {
        "updates": c.num_updates, "env_steps": c.num_updates * c.num_envs * c.horizon,
        "compile_seconds": compile_s, "run_seconds": run_s,
        **{arm: {"success_mean": float(final[i].mean()), "success_std": float(final[i].std()),
                 "success_per_seed": [float(x) for x in final[i]],
                 "curve_mean": metrics["greedy_success"][i].mean(0).round(4).tolist()}
           for i, arm in enumerate(arms)}}
    log(f"BitFlip n={n}: HER {final[0].mean():.2f} +- {final[0].std():.2f}, no HER "
        f"{final[1].mean():.2f} +- {final[1].std():.2f} (compile {compile_s:.0f} s, run "
        f"{run_s:.0f} s)")
  bits = [int(n) for n in cfg.bitflip_bits]
  fig, axes = report.figure(figsize=(5, 3.5))
  ax = axes[0, 0]
  for arm, label in (("her", "DQN + HER (future, k=4)"), ("no_her", "DQN")):
    mean = np.array([results[str(n)][arm]["success_mean"] for n in bits])
    std = np.array([results[str(n)][arm]["success_std"] for n in bits])
    ax.errorbar(bits, mean, yerr=std, marker="o", capsize=3, label=label)
  ax.set(xlabel="bits n", ylabel="greedy success (last 10 cycles)", ylim=(-0.05, 1.05),
         title=f"BitFlip, {cfg.seeds} seeds")
  ax.legend()
  report.save_figure(fig, workdir, "bitflip.png", dpi=120)
  return results


SWEEP_SEED_OFFSET = 1_000_003   # the lr sweep's keys: seed + this (disjoint from the runs')


def bootstrap_interval(values, stat=np.median, num_samples: int = 2000,
                       confidence: float = 0.95, seed: int = 0) -> Tuple[float, float, float]:
  """`(stat(values), low, high)`: a percentile bootstrap over the seeds (axis 0).

  Args:
    values: [S] or [S, C] floats, one row per seed (columns resampled together, so a
      paired statistic such as a ratio of two arms' medians keeps its pairing); +inf
      marks a seed that never got there (a median is still defined).
    stat: `[S, ...] -> float`.
  Returns:
    Python floats; the bounds are order statistics of the resampled `stat` (no
    interpolation, so an infinite bound stays infinite rather than NaN).
  """
  x = np.asarray(values, np.float64)
  if x.ndim not in (1, 2) or x.shape[0] < 1:
    raise ValueError(f"values must be [S] or [S, C] with S >= 1, got {x.shape}")
  rng = np.random.default_rng(seed)
  idx = rng.integers(0, x.shape[0], size=(int(num_samples), x.shape[0]))
  stats = np.array([stat(x[i]) for i in idx], np.float64)
  alpha = 0.5 * (1.0 - confidence)
  return (float(stat(x)), float(np.quantile(stats, alpha, method="lower")),
          float(np.quantile(stats, 1.0 - alpha, method="higher")))


def _finite_or_none(x):
  return None if not np.isfinite(x) else float(x)


def _median_ratio(pair):
  return float(np.median(pair[:, 0]) / np.median(pair[:, 1]))


def sweep_lr(cfg, c, modes, log) -> Tuple[Dict[str, float], dict]:
  """The lr per mode: each (mode, lr of `cfg.lr_grid`) on `cfg.sweep_seeds` seeds of
  their own, the first `sweep_update_fraction` of the updates; the lr with the highest
  mean success. Returns ({mode: lr}, {"auc": {mode: {lr: mean success}}, ...})."""
  grid = [float(x) for x in cfg.lr_grid]
  if len(grid) <= 1:
    lr = grid[0] if grid else float(c.lr)
    return {m: lr for m in modes}, {"grid": [lr], "auc": {}, "seeds": 0, "updates": 0}
  s = c.copy_and_resolve_references()
  s.num_updates = max(int(cfg.smooth), int(round(cfg.sweep_update_fraction * c.num_updates)))
  s.seed = int(c.seed) + SWEEP_SEED_OFFSET
  arms = [{**grpo_relabel.mode_hparams(m, float(c.relabel_weight)), "lr": lr}
          for m in modes for lr in grid]
  metrics, compile_s, run_s = run_arms(s, arms, int(cfg.sweep_seeds))
  auc = metrics["success"].mean(axis=(1, 2)).reshape(len(modes), len(grid))
  chosen = {m: grid[int(np.argmax(auc[i]))] for i, m in enumerate(modes)}
  log(f"  lr sweep ({s.num_updates} updates, {cfg.sweep_seeds} seeds): " + ", ".join(
      f"{m} -> {chosen[m]:g}" for m in modes) + f" (compile {compile_s:.0f} s, run "
      f"{run_s:.0f} s)")
  return chosen, {"grid": grid, "seeds": int(cfg.sweep_seeds), "updates": int(s.num_updates),
                  "auc": {m: {f"{lr:g}": float(auc[i, j]) for j, lr in enumerate(grid)}
                          for i, m in enumerate(modes)},
                  "compile_seconds": compile_s, "run_seconds": run_s}


def mode_results(success, per_update, cfg, lr, base_steps=None) -> dict:
  """One mode's numbers from its [seeds, updates] success curves: per-seed env steps to
  `success_level` (+inf if never), their median with a bootstrap interval over seeds,
  and the paired ratio of medians to `base_steps` ([seeds], the "none" arm), each seed's
  steps censored at the run's budget (one update past its end)."""
  level, smooth = float(cfg.success_level), int(cfg.smooth)
  seeds, updates = success.shape
  per_seed = [steps_to_level(x, per_update, level, smooth) for x in success]
  steps = np.array([np.inf if v is None else v for v in per_seed], np.float64)
  med, lo, hi = bootstrap_interval(steps, num_samples=cfg.bootstrap_samples)
  final = success[:, -smooth:].mean(-1)
  final_mean, final_half = report.t_interval(final)
  curve_mean, curve_half = report.t_interval(success)
  out = {"lr": float(lr), "steps_to_level": _finite_or_none(med),
         "steps_to_level_interval": [_finite_or_none(lo), _finite_or_none(hi)],
         "steps_to_level_per_seed": per_seed,
         "seeds_reached": int(np.isfinite(steps).sum()), "seeds": int(seeds),
         "final_success_mean": float(final_mean),
         "final_success_interval": float(final_half) if seeds > 1 else None,
         "final_success_std": float(final.std()),
         "curve_mean": np.round(curve_mean, 4).tolist(),
         "curve_interval": np.round(np.nan_to_num(curve_half), 4).tolist()}
  if base_steps is not None:
    budget = float((updates + 1) * per_update)
    pair = np.stack([np.minimum(steps, budget), np.minimum(base_steps, budget)], 1)
    ratio, rlo, rhi = bootstrap_interval(pair, _median_ratio, cfg.bootstrap_samples)
    reached = np.isfinite(med)
    out.update(
        ratio_to_none=ratio if reached else None,
        ratio_to_none_interval=[rlo, rhi] if reached else None,
        # "none"'s median not reached: its steps are the budget, so the ratio is an
        # upper bound (relabeling at least this much faster).
        ratio_is_upper_bound=bool(reached and not np.isfinite(np.median(base_steps))))
  return out


def part_b(cfg, workdir: str, log) -> dict:
  """GRPO with relabeling modes, success against env steps, per environment: the lr per
  mode from a sweep, then `cfg.seeds` seeds per mode on fresh keys."""
  modes = list(cfg.modes)
  results = {}
  for name, c in cfg.grpo.items():
    lrs, sweep = sweep_lr(cfg, c, modes, log)
    arms = [{**grpo_relabel.mode_hparams(m, float(c.relabel_weight)), "lr": lrs[m]}
            for m in modes]
    metrics, compile_s, run_s = run_arms(c, arms, int(cfg.seeds))
    per_update = c.num_tasks * c.group_size * c.horizon
    success = metrics["success"]                           # [modes, seeds, updates]
    entry = {"env_name": c.env_name, "env_kwargs": c.env_kwargs.to_dict(),
             "updates": c.num_updates, "env_steps_per_update": per_update,
             "num_tasks": int(c.num_tasks), "group_size": int(c.group_size),
             "horizon": int(c.horizon), "lr_sweep": sweep,
             "compile_seconds": compile_s, "run_seconds": run_s, "modes": {}}
    base = None
    if "none" in modes:
      none = mode_results(success[modes.index("none")], per_update, cfg, lrs["none"])
      base = np.array([np.inf if v is None else v for v in none["steps_to_level_per_seed"]])
    for i, mode in enumerate(modes):
      entry["modes"][mode] = {
          **mode_results(success[i], per_update, cfg, lrs[mode], base),
          **{k: float(metrics[k][i].mean()) for k in
             ("iw_mean", "iw_clip_frac", "log_rho_mean", "relabeled_frac")}}
    results[name] = entry
    log(f"GRPO {c.env_name}: median steps to {cfg.success_level:.0%} " + ", ".join(
        f"{m} {entry['modes'][m]['steps_to_level']} ({entry['modes'][m]['seeds_reached']}/"
        f"{cfg.seeds} seeds)" for m in modes)
        + f" (compile {compile_s:.0f} s, run {run_s:.0f} s)")
    plot_grpo(entry, modes, cfg, workdir, name)
  return results


def run(config, workdir: str, log=print) -> dict:
  """Runs the parts named by `config.parts`; writes figures and summaries into `workdir`.

  Returns the summary (also summary.json): "bitflip" {n: per arm the final greedy
  success} for part a, "grpo" {env: per mode the env steps to `success_level` and their
  ratio to no relabeling} for part b.
  """
  validate_config(config)
  workdir = os.path.abspath(workdir)
  os.makedirs(workdir, exist_ok=True)
  watch = report.Stopwatch()
  summary: Dict[str, object] = {"success_level": float(config.success_level),
                                "smooth": int(config.smooth), "seeds": int(config.seeds),
                                "lr_grid": [float(x) for x in config.lr_grid],
                                "bootstrap_samples": int(config.bootstrap_samples)}
  if "a" in config.parts:
    summary["bitflip"] = part_a(config, workdir, log)
  if "b" in config.parts:
    summary["grpo"] = part_b(config, workdir, log)
  summary["wall_seconds"] = watch.seconds()
  report.write_summary(workdir, summary, summary_markdown(summary))
  log(f"wrote {workdir}/summary.md ({summary['wall_seconds']:.0f} s)")
  return summary
