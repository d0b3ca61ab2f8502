"""Hindsight relabeling on and off: what it buys in sample efficiency.

  python3 scripts/hindsight.py --config=configs/hindsight.py --workdir=/tmp/her
  python3 scripts/hindsight.py --config=configs/hindsight.py:small --workdir=/tmp/her_s
  python3 scripts/hindsight.py --config=configs/hindsight.py --workdir=/tmp/her --parts=b

(a) BitFlip, DQN with and without HER (`future`, k = 4): final greedy success against
    the number of bits n. Both arms and all seeds of one n run in one compiled call
    (HER off is `relabel_weight = 0`, a traced value).
(b) GoalGrid and TextEdit, GRPO without relabeling, with plain relabeling and with the
    importance-weighted one: success against env steps, mean and spread over seeds, all
    modes and seeds of one environment in one compiled call.

Writes into --workdir: bitflip.png, grpo_<env>.png, summary.json (success per n and
arm; env steps to `success_level` per mode and their ratio to no relabeling; wall times)
and summary.md.

One run of the `:full` variant (jax 0.10.2, 2 shared CPU cores) hung for good in a
vmapped GRPO cell: every XLA worker thread idle, the host waiting for the result (an
Eigen thread-pool wedge others report for vmapped CPU programs). The rerun with
XLA_FLAGS=--xla_cpu_multi_thread_eigen=false finished with identical numbers.
"""
from __future__ import annotations

import json
import os
import time
from typing import Dict, Optional, Sequence

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from credit_jax import algos
from credit_jax.algos import grpo_hindsight

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "configs/hindsight.py[:variant] (none, small or full).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for figures and summaries.")
_PARTS = flags.DEFINE_string("parts", "ab", "Which parts to run: a (BitFlip), b (GRPO).")
flags.mark_flags_as_required(["config", "workdir"])


def run_arms(config, arms: Sequence[Dict[str, float]], seeds: int
             ) -> tuple[Dict[str, np.ndarray], float, float]:
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
  fn = jax.jit(jax.vmap(train))
  t0 = time.perf_counter()
  compiled = fn.lower(keys, hp).compile()
  t1 = time.perf_counter()
  _, metrics = compiled(keys, hp)
  metrics = jax.device_get(metrics)
  t2 = time.perf_counter()
  shaped = {k: np.asarray(v).reshape((len(arms), seeds) + np.shape(v)[1:])
            for k, v in metrics.items()}
  return shaped, t1 - t0, t2 - t1


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
    final = metrics["success"][:, :, -10:].mean(-1)        # [arms, seeds]
    results[str(n)] = {
        "updates": c.num_updates, "env_steps": c.num_updates * c.num_envs * c.horizon,
        "compile_seconds": compile_s, "run_seconds": run_s,
        **{arm: {"success_mean": float(final[i].mean()), "success_std": float(final[i].std()),
                 "success_per_seed": [float(x) for x in final[i]],
                 "curve_mean": metrics["success"][i].mean(0).round(4).tolist()}
           for i, arm in enumerate(arms)}}
    log(f"BitFlip n={n}: HER {final[0].mean():.2f} +- {final[0].std():.2f}, no HER "
        f"{final[1].mean():.2f} +- {final[1].std():.2f} (compile {compile_s:.0f} s, run "
        f"{run_s:.0f} s)")
  bits = [int(n) for n in cfg.bitflip_bits]
  fig, ax = plt.subplots(figsize=(5, 3.5))
  for arm, label in (("her", "DQN + HER (future, k=4)"), ("no_her", "DQN")):
    mean = np.array([results[str(n)][arm]["success_mean"] for n in bits])
    std = np.array([results[str(n)][arm]["success_std"] for n in bits])
    ax.errorbar(bits, mean, yerr=std, marker="o", capsize=3, label=label)
  ax.set(xlabel="bits n", ylabel="greedy success (last 10 cycles)", ylim=(-0.05, 1.05),
         title=f"BitFlip, {cfg.seeds} seeds")
  ax.legend()
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "bitflip.png"), dpi=120)
  plt.close(fig)
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
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for i, mode in enumerate(modes):
      mean, std = success[i].mean(0), success[i].std(0)
      ax.plot(steps, mean, label=mode)
      ax.fill_between(steps, mean - std, mean + std, alpha=0.2)
    ax.axhline(level, color="gray", lw=0.8, ls="--")
    ax.set(xlabel="env steps", ylabel="success (real goals)", ylim=(-0.05, 1.05),
           title=f"GRPO on {c.env_name}, {cfg.seeds} seeds (mean ± std)")
    ax.legend(title="relabeling")
    fig.tight_layout()
    fig.savefig(os.path.join(workdir, f"grpo_{name}.png"), dpi=120)
    plt.close(fig)
  return results


def summary_markdown(summary: dict) -> str:
  """A short report of the summary's headline numbers."""
  lines = ["# Hindsight relabeling", ""]
  if "bitflip" in summary:
    lines += ["## BitFlip: DQN with and without HER (greedy success, last 10 cycles)", "",
              "| n | cycles | DQN + HER | DQN | wall (compile + run) |", "|---|---|---|---|---|"]
    for n, r in summary["bitflip"].items():
      lines.append(f"| {n} | {r['updates']} | {r['her']['success_mean']:.2f} ± "
                   f"{r['her']['success_std']:.2f} | {r['no_her']['success_mean']:.2f} ± "
                   f"{r['no_her']['success_std']:.2f} | {r['compile_seconds']:.0f} + "
                   f"{r['run_seconds']:.0f} s |")
    lines.append("")
  if "grpo" in summary:
    level = summary["success_level"]
    lines += [f"## GRPO: env steps to {level:.0%} success (trailing mean over "
              f"{summary['smooth']} updates of the seed mean)", "",
              "| env | mode | steps to level | ratio to none | final success | "
              "mean IS weight | IS clipped |", "|---|---|---|---|---|---|---|"]
    for name, r in summary["grpo"].items():
      for mode, m in r["modes"].items():
        ratio = "—" if m["ratio_to_none"] is None else f"{m['ratio_to_none']:.2f}"
        steps = "not reached" if m["steps_to_level"] is None else str(m["steps_to_level"])
        iw = ("— | —" if mode == "none"   # no relabeled example is used
              else f"{m['iw_mean']:.2f} | {m['iw_clip_frac']:.2f}")
        lines.append(f"| {r['env_name']} ({name}) | {mode} | {steps} | {ratio} | "
                     f"{m['final_success_mean']:.2f} ± {m['final_success_std']:.2f} | {iw} |")
    lines.append("")
  lines.append(f"Total wall time: {summary['wall_seconds']:.0f} s.")
  return "\n".join(lines) + "\n"


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  cfg, workdir = _CONFIG.value, os.path.abspath(_WORKDIR.value)
  os.makedirs(workdir, exist_ok=True)
  t0 = time.perf_counter()
  summary: Dict[str, object] = {"success_level": float(cfg.success_level),
                                "smooth": int(cfg.smooth), "seeds": int(cfg.seeds)}
  if "a" in _PARTS.value:
    summary["bitflip"] = part_a(cfg, workdir, print)
  if "b" in _PARTS.value:
    summary["grpo"] = part_b(cfg, workdir, print)
  summary["wall_seconds"] = time.perf_counter() - t0
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
  with open(os.path.join(workdir, "summary.md"), "w") as f:
    f.write(summary_markdown(summary))
  print(f"wrote {workdir}/summary.md ({summary['wall_seconds']:.0f} s)")


if __name__ == "__main__":
  app.run(main)
