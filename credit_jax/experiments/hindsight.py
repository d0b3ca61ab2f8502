"""Hindsight relabeling on and off: what it buys in sample efficiency.

  python3 scripts/hindsight.py --config=configs/hindsight.py --workdir=/tmp/her
  python3 scripts/hindsight.py --config=configs/hindsight.py --workdir=/tmp/her \
      --config.parts=b
  summary = hindsight.run(hindsight.default_config(), workdir)

(a) BitFlip, DQN with and without HER (`future`, k = 4): final greedy success against
    the number of bits n. Both arms and all seeds of one n run in one compiled call
    (HER off is `relabel_weight = 0`, a traced value).
(b) GoalGrid and TextEdit, GRPO without relabeling, with plain relabeling and with the
    importance-weighted one: success against env steps, mean and spread over seeds, all
    modes and seeds of one environment in one compiled call.

Writes into the workdir: bitflip.png, grpo_<env>.png, summary.json (success per n and
arm; env steps to `success_level` per mode and their ratio to no relabeling; wall times)
and summary.md.

One run of the `:full` variant (jax 0.10.2, 2 shared CPU cores) hung for good in a
vmapped GRPO cell: every XLA worker thread idle, the host waiting for the result (an
Eigen thread-pool wedge others report for vmapped CPU programs). The rerun with
XLA_FLAGS=--xla_cpu_multi_thread_eigen=false finished with identical numbers (the
script's XLA flags come from `credit_jax.launch.configure_process`).
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax import algos
from credit_jax.algos import ConfigError, dqn, grpo_hindsight
from credit_jax.experiments import report


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
    # each goal must be learnt from its own rare successes. Measured (2 seeds, 300
    # updates): none reaches 50% at 217k env steps, plain ("final", 1 goal) at 48k,
    # "episode" with 2 goals at 46k, iw at 53k. With the default 4 corner targets (15x15,
    # 30 steps) relabeling bought nothing (ratio 0.94): relabeled goals (random-walk end
    # cells) are almost never corners, so they taught goals the task never asks for;
    # with all 225 cells as goals on that grid, plain GRPO stayed at 9% for 200 updates
    # while relabeling ("episode", 4 goals) reached 50% at 138k steps.
    "GoalGrid-v0": dict(env_kwargs={"size": 9, "targets": "all",
                                    "max_steps_in_episode": 18},
                        horizon=18, num_updates=150),
    # TextEdit: every buffer (length 0..3, tokens from 2) other than the start (2 tokens)
    # is a goal (goal_edits="all", the analogue of GoalGrid's fix), 12 steps; random
    # policy: 5.5% success (first 3 updates). Measured (3 seeds, parts "b"): none
    # reaches 50% at 585k env steps (final 0.48), plain at 240k (ratio 0.41, final
    # 0.84), iw never in the seed mean (seeds at 674k, 143k, never; it stays near 0.33,
    # final 0.29; 600 updates: the same steps, final 0.32). Rerun on later code (other
    # random streams, the README's command): none never in 500 updates (final 0.24),
    # plain at 250k (final 0.87), iw never (final 0.35). 2 seeds, buffer of 4 (3
    # tokens to start, 16 steps, 200 updates, random 1.7%): none never (final 0.16),
    # plain 0.30, iw 0.21.
    # Before: one random edit away (goal_edits="any", buffer of 4, 3 tokens, 16 steps;
    # random 3.6%), 2 seeds, 150 updates: none 203k, plain 176k (ratio 0.87), iw 174k
    # (0.86); fading relabeling out over success 0.1-0.3: plain 0.79, iw 1.13. The buffers
    # random editing submits are often several edits away (or the start itself), goals
    # that task never poses. With substitution-only goals (random 0.6%) relabeling slowed
    # GRPO down (ratios 1.27 plain / 1.50 iw with "final", 1.93 plain with "episode" x 2).
    "TextEdit-v0": dict(env_kwargs={"buffer_len": 3, "vocab_size": 2, "start_len": 2,
                                    "num_edits": 1, "goal_edits": "all"},
                        horizon=12, num_updates=500),
}


def grpo_config(env_name="GoalGrid-v0", relabel="plain"):
  """GRPO (+ hindsight relabeling, `relabel` in none | plain | iw) on a goal env of
  `GRPO_ENVS`: the recipe's `default_config()` with that env's options, episode length
  and number of updates.

  Part (b)'s recipe config per environment; GoalGrid alone, for scripts/train.py:
  configs/grpo_hindsight_goalgrid.py.
  """
  c = grpo_hindsight.default_config()
  c.env_name = env_name           # a goal environment
  c.env_kwargs = ml_collections.ConfigDict(dict(GRPO_ENVS[env_name]["env_kwargs"]))
  c.relabel = relabel             # none | plain | iw (importance-weighted)
  c.num_updates = GRPO_ENVS[env_name]["num_updates"]  # updates (one group rollout each)
  c.horizon = GRPO_ENVS[env_name]["horizon"]  # rollout steps per episode
  return c



def default_config() -> ml_collections.ConfigDict:
  """BitFlip n in {5, 10, 15}; GoalGrid with every cell a goal, TextEdit with every
  buffer a goal; 3 seeds (about 4 minutes on a 2-core CPU)."""
  c = ml_collections.ConfigDict()
  c.parts = "ab"                  # which parts run: a (BitFlip DQN +- HER), b (GRPO modes)
  c.seeds = 3                     # seeds per cell, vmapped in one compiled call
  c.success_level = 0.5           # "env steps to reach this success rate" in the summary
  c.smooth = 5                    # ... read off a trailing mean over this many updates
  # (a) BitFlip: DQN with and without HER (relabel_weight 0), one compile per n.
  c.bitflip_bits = (5, 10, 15)    # n values
  # DQN cycles (updates) per bit: n = 15 -> 300 (one seed on CPU solved n = 15 at 100
  # cycles: 0.93, and 1.0 at 200).
  c.cycles_per_bit = 20
  c.dqn = dqn_config()            # template; num_bits, horizon, num_updates set per n
  # (b) GRPO with relabeling modes none | plain | iw, all in one compile per env.
  c.modes = ("none", "plain", "iw")
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
  for field in ("seeds", "smooth", "cycles_per_bit"):
    if int(config[field]) < 1:
      raise ConfigError(f"config.{field} must be >= 1, got {config[field]}")
  if not 0.0 < config.success_level <= 1.0:
    raise ConfigError(f"config.success_level must lie in (0, 1], got {config.success_level}")
  if min(config.bitflip_bits) < 1:
    raise ConfigError(f"config.bitflip_bits must all be >= 1, got {config.bitflip_bits}")
  bad = [m for m in config.modes if m not in grpo_hindsight.MODES]
  if bad or not config.modes:
    raise ConfigError(f"config.modes must be a non-empty subset of {grpo_hindsight.MODES}, "
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


def part_b(cfg, workdir: str, log) -> dict:
  """GRPO with relabeling modes, success against env steps, per environment."""
  modes = list(cfg.modes)
  level, smooth = float(cfg.success_level), int(cfg.smooth)
  results = {}
  for name, c in cfg.grpo.items():
    arms = [grpo_hindsight.mode_hparams(m, float(c.relabel_weight)) for m in modes]
    metrics, compile_s, run_s = run_arms(c, arms, int(cfg.seeds))
    per_update = c.num_tasks * c.group_size * c.horizon
    success = metrics["success"]                           # [modes, seeds, updates]
    steps = np.arange(1, success.shape[-1] + 1) * per_update
    entry = {"env_name": c.env_name, "env_kwargs": c.env_kwargs.to_dict(),
             "updates": c.num_updates, "env_steps_per_update": per_update,
             "compile_seconds": compile_s, "run_seconds": run_s, "modes": {}}
    for i, mode in enumerate(modes):
      to_level = steps_to_level(success[i].mean(0), per_update, level, smooth)
      entry["modes"][mode] = {
          "steps_to_level": to_level,
          "steps_to_level_per_seed": [steps_to_level(s, per_update, level, smooth)
                                      for s in success[i]],
          "final_success_mean": float(success[i, :, -smooth:].mean()),
          "final_success_std": float(success[i, :, -smooth:].mean(-1).std()),
          "curve_mean": success[i].mean(0).round(4).tolist(),
          "curve_std": success[i].std(0).round(4).tolist(),
          **{k: float(metrics[k][i].mean()) for k in
             ("iw_mean", "iw_clip_frac", "log_rho_mean", "relabeled_frac")}}
    base = entry["modes"].get("none", {}).get("steps_to_level")
    for mode in modes:
      m = entry["modes"][mode]
      m["ratio_to_none"] = (m["steps_to_level"] / base
                            if base and m["steps_to_level"] else None)
    results[name] = entry
    log(f"GRPO {c.env_name}: steps to {level:.0%} " + ", ".join(
        f"{m} {entry['modes'][m]['steps_to_level']}" for m in modes)
        + f" (compile {compile_s:.0f} s, run {run_s:.0f} s)")
    fig, axes = report.figure(figsize=(5.5, 3.5))
    ax = axes[0, 0]
    for i, mode in enumerate(modes):
      mean, std = success[i].mean(0), success[i].std(0)
      ax.plot(steps, mean, label=mode)
      ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
    ax.axhline(level, color="gray", lw=0.8, ls="--")
    ax.set(xlabel="env steps", ylabel="success (real goals)", ylim=(-0.05, 1.05),
           title=f"GRPO on {c.env_name}, {cfg.seeds} seeds (mean ± std)")
    ax.legend(title="relabeling")
    report.save_figure(fig, workdir, f"grpo_{name}.png", dpi=120)
  return results


def summary_markdown(summary: dict) -> str:
  """A short report of the summary's headline numbers."""
  lines = ["# Hindsight relabeling", ""]
  if "bitflip" in summary:
    lines += ["## BitFlip: DQN with and without HER (greedy success, last 10 cycles)", ""]
    lines += report.table(
        ("n", "cycles", "DQN + HER", "DQN", "wall (compile + run)"),
        [(n, r["updates"], f"{r['her']['success_mean']:.2f} ± {r['her']['success_std']:.2f}",
          f"{r['no_her']['success_mean']:.2f} ± {r['no_her']['success_std']:.2f}",
          f"{r['compile_seconds']:.0f} + {r['run_seconds']:.0f} s")
         for n, r in summary["bitflip"].items()])
    lines.append("")
  if "grpo" in summary:
    level = summary["success_level"]
    lines += [f"## GRPO: env steps to {level:.0%} success (trailing mean over "
              f"{summary['smooth']} updates of the seed mean)", ""]
    rows = []
    for name, r in summary["grpo"].items():
      for mode, m in r["modes"].items():
        none = mode == "none"   # no relabeled example is used: no IS weight
        rows.append((
            f"{r['env_name']} ({name})", mode,
            "not reached" if m["steps_to_level"] is None else m["steps_to_level"],
            "—" if m["ratio_to_none"] is None else f"{m['ratio_to_none']:.2f}",
            f"{m['final_success_mean']:.2f} ± {m['final_success_std']:.2f}",
            "—" if none else f"{m['iw_mean']:.2f}", "—" if none else f"{m['iw_clip_frac']:.2f}"))
    lines += report.table(("env", "mode", "steps to level", "ratio to none",
                           "final success", "mean IS weight", "IS clipped"), rows)
    lines.append("")
  lines.append(report.wall_time(summary["wall_seconds"]))
  return "\n".join(lines) + "\n"



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
                                "smooth": int(config.smooth), "seeds": int(config.seeds)}
  if "a" in config.parts:
    summary["bitflip"] = part_a(config, workdir, log)
  if "b" in config.parts:
    summary["grpo"] = part_b(config, workdir, log)
  summary["wall_seconds"] = watch.seconds()
  report.write_summary(workdir, summary, summary_markdown(summary))
  log(f"wrote {workdir}/summary.md ({summary['wall_seconds']:.0f} s)")
  return summary
