"""What step-level credit from restored states buys at equal env steps: a short measurement.

  XLA_FLAGS=... python3 scripts/step_credit.py --workdir=runs/step_credit [--small]

Cells: each method of `methods` at each T of `horizons` on KeyChain-v0 (k = 3, A = 4)
with the shortcut switches `switches` (default: no pivotal flag, cues at distractor steps,
a distinct rule per pivotal index: the switches an MLP policy, which has no memory, can
still pass), `seeds` seeds vmapped through `credit_jax.algos.make_train`, each for the
same `budget_env_steps` env steps per seed with every vine and branch step counted:

  grpo     GRPO, 8 tasks x K = 8 episodes of T steps per update (64 T steps)
  ppo      PPO + GAE (gamma 1, lambda 0.95), 64 environments x T steps (64 T)
  gigpo    GRPO + GiGPO's step advantages, anchors by environment state, weight 1 (64 T).
           KeyChain's state holds `all_correct` (every pivotal answer so far right), which
           no observation shows: these anchors group by hidden ground truth, an upper
           bound in the way an oracle critic is
  gigpo_obs the same with anchors by observation (what an agent sees; GiGPO's own
           setting), weight 1 (64 T)
  tree     GRPO over trees: 8 tasks x 8 leaves, b = 2, branching at T/4, T/2, 3T/4
           (8 x 3.75 T = 30 T per update)
  vine     PPO with VinePPO's advantages and no value loss (vf_coef 0): `vine_episodes`
           environments x T steps, K = `vine_k` vines every T/4 steps
           (32 T + 32 x 2 x 2.5 T = 192 T per update)

so each gets `budget // steps_per_update` updates. Settings shared with the horizon study
and the probes measurement: lr 1e-2, 2 epochs x 2 minibatches, a 64-64 tanh MLP, no
entropy bonus, grad-norm clip 1. After training each seed's sampled policy runs
`eval_episodes` fresh episodes; success is a positive return (the only reward is the
final 0/1 with these switches). A cell's rate pools seeds x episodes with a 95% Wilson
interval (a floor on the uncertainty: seeds are not draws of one rate), beside the
per-seed rates and the count of seeds at >= 90% (with its own Wilson interval).

Writes cells/<cell>.json as each cell finishes (a rerun skips them: resumable),
summary.md and step_credit_training.png (`figure`: each cell's training success against
its env steps, beside its evaluated success). A rerun with every cell present trains
nothing and rewrites both from the cells.
"""
from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax import envs, nets, rollout, stats
from credit_jax.addons import tree_groups
from credit_jax.addons import gigpo, tree_groups, vine_ppo
from credit_jax.algos import grpo, make_train, ppo
from credit_jax.algos import train as train_lib
from credit_jax.experiments import report

__all__ = ["default_config", "cells", "method_config", "run", "markdown", "figure", "METHODS"]

METHODS = ("grpo", "ppo", "gigpo", "gigpo_obs", "tree", "vine")


def default_config(small: bool = False) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seeds = 5                      # seeds per cell (vmapped)
  c.seed = 0                       # base RNG seed; every cell uses the same seed keys
  c.horizons = (100, 1000)         # KeyChain episode lengths T
  c.methods = METHODS
  c.num_pivotal = 3                # k
  c.num_actions = 4                # A
  c.switches = ml_collections.ConfigDict(
      {"pivotal_flag": False, "distractor_cues": True, "distinct_rules": True})
  c.budget_updates = 40            # the budget in GRPO updates: 40 x 64 T env steps
  c.vine_episodes = 32             # VinePPO's environments per update
  c.vine_k = 2                     # vines per vine point
  c.lr = 1e-2
  c.eval_episodes = 128            # fresh evaluation episodes per seed
  if small:
    c.seeds, c.horizons, c.budget_updates, c.eval_episodes = 2, (20,), 10, 64
  return c


def _env_kwargs(config, horizon):
  return {"horizon": int(horizon), "num_pivotal": int(config.num_pivotal),
          "num_actions": int(config.num_actions), "cue_delay": 0,
          **dict(config.switches)}


def _steps_per_update(config, method, horizon):
  if method == "tree":
    return 8 * tree_groups.tree_env_steps(2, _branch_steps(horizon), horizon)
  if method == "vine":
    every = horizon // 4
    vine_steps = sum(horizon - t for t in range(0, horizon, every))
    return int(config.vine_episodes) * (horizon + int(config.vine_k) * vine_steps)
  return 64 * horizon


def _branch_steps(horizon):
  return (horizon // 4, horizon // 2, 3 * horizon // 4)


def method_config(config, method, horizon):
  """The recipe config of `method` at T = `horizon`, for the budget's updates."""
  budget = int(config.budget_updates) * 64 * int(horizon)   # env steps per seed
  updates = budget // _steps_per_update(config, method, horizon)
  if method in ("grpo", "gigpo", "gigpo_obs", "tree"):
    c = grpo.default_config()
    c.num_tasks, c.group_size, c.num_minibatches, c.update_epochs = 8, 8, 2, 2
    c.num_updates, c.horizon = updates, int(horizon)
    if method in ("gigpo", "gigpo_obs"):
      gigpo.add_config(c, step_weight=1.0, anchor="state" if method == "gigpo" else "obs")
    elif method == "tree":
      tree_groups.add_config(c, 2, _branch_steps(horizon))
  else:
    c = ppo.default_config()
    envs_ = int(config.vine_episodes) if method == "vine" else 64
    c.num_envs, c.num_steps = envs_, int(horizon)
    c.total_timesteps = updates * envs_ * int(horizon)
    c.update_epochs, c.num_minibatches = 2, 2
    c.gamma, c.gae_lambda = 1.0, 0.95
    c.ent_coef, c.anneal_lr, c.max_grad_norm = 0.0, False, 1.0
    if method == "vine":
      vine_ppo.add_config(c, num_vines=int(config.vine_k), every=int(horizon) // 4)
      c.vf_coef = 0.0
  c.env_name = "KeyChain-v0"
  c.env_kwargs = ml_collections.ConfigDict(_env_kwargs(config, horizon))
  c.lr = float(config.lr)
  c.seeds, c.seed, c.checkpoint_every = int(config.seeds), int(config.seed), 0
  return c, updates, budget


def cells(config):
  return [(f"T{t}/{m}", int(t), m) for t in sorted(config.horizons) for m in config.methods]


def _evaluate(config, cfg, params, key):
  env, env_params = envs.make("KeyChain-v0", **_env_kwargs(config, cfg.env_kwargs.horizon))
  network, _ = train_lib.make_network(cfg, env, env_params, value_head=cfg.algo == "ppo")
  policy = nets.make_policy_fn(network, value=False)
  episodes, horizon = int(config.eval_episodes), int(cfg.env_kwargs.horizon)

  def one(p, k):
    traj = rollout.collect_episodes(env, env_params, policy, p, k, episodes, horizon)
    return jnp.sum(jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), axis=0) > 0)
  n = jax.tree.leaves(params)[0].shape[0]
  return np.asarray(jax.jit(jax.vmap(one))(params, jax.random.split(key, n)), np.int64)


def train_cell(config, name, horizon, method, log=print):
  cfg, updates, budget = method_config(config, method, horizon)
  train = make_train(cfg)
  seeds = int(config.seeds)
  keys = jax.random.split(jax.random.PRNGKey(int(config.seed)), seeds)
  start, cpu = time.perf_counter(), time.process_time()
  state, metrics = jax.jit(jax.vmap(train))(keys)
  metrics = jax.device_get(metrics)
  train_s, train_cpu = time.perf_counter() - start, time.process_time() - cpu
  steps = np.asarray(metrics.get("env_steps", np.full((seeds, updates),
                                                      train.env_steps_per_update)))
  wins = _evaluate(config, cfg, state.params, jax.random.PRNGKey(int(config.seed) + 1))
  n = int(config.eval_episodes)
  low, high = stats.wilson_interval(int(wins.sum()), n * seeds)
  solved = int(np.sum(wins >= 0.9 * n))
  s_low, s_high = stats.wilson_interval(solved, seeds)
  env, _ = envs.make("KeyChain-v0", **_env_kwargs(config, horizon))
  record = {
      "cell": name, "method": method, "horizon": horizon, "seeds": seeds,
      "updates": updates, "budget_env_steps": budget,
      "env_steps_per_seed": float(steps.sum(axis=1).mean()),
      "success": float(wins.sum()) / (n * seeds), "success_ci": [low, high],
      "success_per_seed": (wins / n).tolist(), "seeds_at_90": solved,
      "seeds_at_90_ci": [s_low, s_high], "random_success": float(env.random_success()),
      "training_success": np.asarray(metrics["success"]).mean(axis=0).tolist(),
      "train_wall_s": train_s, "train_cpu_s": train_cpu}
  if "vine_env_steps" in metrics:   # the vines' share of env_steps, reported apart
    record["vine_env_steps_per_seed"] = float(
        np.asarray(metrics["vine_env_steps"]).sum(axis=1).mean())
  log(f"{name}: {updates} updates, {record['env_steps_per_seed']:.0f} env steps/seed, "
      f"success {record['success']:.3f} [{low:.3f}, {high:.3f}], seeds >= 90%: "
      f"{solved}/{seeds} | {train_s:.0f} s wall, {train_cpu:.0f} s CPU")
  return record


def _path(workdir, name):
  return os.path.join(workdir, "cells", name.replace("/", "__") + ".json")


def run(config, workdir, log=print):
  os.makedirs(os.path.join(workdir, "cells"), exist_ok=True)
  records = []
  for name, horizon, method in cells(config):
    path = _path(workdir, name)
    if os.path.exists(path):
      with open(path) as f:
        records.append(json.load(f))
      continue
    record = train_cell(config, name, horizon, method, log)
    with open(path, "w") as f:
      json.dump(record, f, indent=1)
    records.append(record)
  lines = markdown(records)
  with open(os.path.join(workdir, "summary.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
  figure(records, workdir)
  return {"records": records, "markdown": lines}


def figure(records, workdir, name="step_credit_training.png"):
  """One panel per T: each cell's training success (mean over seeds, trailing mean over a
  tenth of its updates: the same share of the budget for every method) against env steps
  per seed (every vine and branch step counted), its evaluated success with the
  Wilson interval at the end of its budget, and random success (1/A)^k. Returns the path."""
  horizons = sorted({int(r["horizon"]) for r in records})
  fig, axes = report.figure(1, len(horizons), figsize=(6.0 * len(horizons), 4.4))
  for ax, horizon in zip(axes[0], horizons):
    rows = [r for r in records if int(r["horizon"]) == horizon]
    for i, r in enumerate(rows):
      curve = np.asarray(r["training_success"], np.float64)
      window = max(1, len(curve) // 10)
      curve = np.convolve(curve, np.ones(window) / window)[:len(curve)]
      curve[:window - 1] /= np.arange(1, window) / window   # a shorter mean at the start
      steps = np.arange(1, len(curve) + 1) * r["env_steps_per_seed"] / len(curve)
      color = f"C{i}"
      ax.plot(steps, curve, color=color, lw=1.0, alpha=0.8,
              label=f"{r['method']} ({r['updates']} updates)")
      low, high = r["success_ci"]
      ax.errorbar([steps[-1] * (1.0 + 0.012 * (i + 1))], [r["success"]],
                  yerr=[[r["success"] - low], [high - r["success"]]], color=color,
                  fmt="o", ms=4, capsize=2)
    ax.axhline(rows[0]["random_success"], color="k", ls="--", lw=0.8,
               label="random policy")
    ax.set_title(f"KeyChain T = {horizon}, {rows[0]['seeds']} seeds")
    ax.set_xlabel("env steps per seed (vine and branch steps counted)")
    ax.set_ylabel("training success (trailing mean); points: evaluated")
    ax.legend(fontsize=7)
  return report.save_figure(fig, workdir, name)


def markdown(records):
  lines = ["| T | method | updates | env steps / seed | success (95% Wilson) | per seed | "
           "seeds >= 90% | train wall / CPU (s) |", "|---|---|---|---|---|---|---|---|"]
  for r in records:
    low, high = r["success_ci"]
    lines.append(
        f"| {r['horizon']} | {r['method']} | {r['updates']} | {r['env_steps_per_seed']:.3g}"
        f" | {r['success']:.3f} [{low:.3f}, {high:.3f}] | "
        f"{', '.join(f'{x:.2f}' for x in r['success_per_seed'])} | {r['seeds_at_90']}/"
        f"{r['seeds']} [{r['seeds_at_90_ci'][0]:.2f}, {r['seeds_at_90_ci'][1]:.2f}] | "
        f"{r['train_wall_s']:.0f} / {r['train_cpu_s']:.0f} |")
  return lines
