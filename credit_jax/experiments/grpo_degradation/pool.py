"""Experiment 2's two measurements beyond one success rate: a task pool of mixed
difficulty, and the degenerate fraction during a real GRPO run.

  pool = make_pool_measure(config)(key)        # {K: {"degenerate": [S], ...}}
  recs = pool_records(jax.device_get(pool), config)
  curves = run_training(config.train)          # success, degenerate_frac: [S, U]
  out = training_summary(curves, config.train)

Pool: each task draws its success rate p from Beta(a, b) and keeps it for its group:
KeyChain with k = 1 pivotal step, A = 2 actions, and the task's own tabular policy
answering right with probability p (`degenerate_groups.biased_logits`). A group is
degenerate with probability p^K + (1 - p)^K given p, so the pool's fraction is that averaged over
the distribution, E[p^K] + E[(1 - p)^K] = B(a + K, b) / B(a, b) + B(a, b + K) / B(a, b):
larger than the formula at the mean p, since p^K + (1 - p)^K is convex in p.

Training: the `grpo` recipe (an MLP policy) on a KeyChain hard enough that no success is
expected in the first updates. Until a group has a success every advantage is 0, so the
policy does not move (no entropy bonus, no KL) and each update is a fresh draw of N K
episodes at the initial success rate p: the first success comes after a geometric
number of updates with mean 1 / (1 - (1 - p)^(N K)) ~ 1 / (N K p). `training_summary`
sets each seed's first-success update against that, and reads off the window of
updates in which at most half of the groups are degenerate.
"""
from __future__ import annotations

from typing import Dict

import jax
import jax.numpy as jnp
import numpy as np

from credit_jax import algos, envs, rollout
from credit_jax import diagnostics as dg
from credit_jax.experiments.grpo_degradation import degenerate_groups
from credit_jax.algos import train as train_lib, grpo
from credit_jax.experiments import report


def pool_analytic(a: float, b: float, group_size: int) -> float:
  """E[p^K + (1 - p)^K] for p ~ Beta(a, b), exactly (host-side)."""
  from scipy import special  # pylint: disable=g-import-not-at-top
  if not (a > 0 and b > 0 and int(group_size) >= 1):
    raise ValueError(f"need a, b > 0 and K >= 1, got a={a}, b={b}, K={group_size}")
  base = special.betaln(a, b)
  return float(np.exp(special.betaln(a + group_size, b) - base)
               + np.exp(special.betaln(a, b + group_size) - base))


def make_pool_measure(config):
  """A jitted `measure(key) -> {K: {"degenerate", "conditional", "mean_p": [S]}}`.

  Per K, seeds x num_tasks tasks, each with p ~ Beta(config.pool_beta) and one group of
  K episodes; "conditional" is the mean over the drawn tasks of p^K + (1 - p)^K (what
  the fraction should be given the draws).
  """
  env, env_params = envs.make(config.env_name, horizon=config.horizon, num_pivotal=1,
                              num_actions=2)
  a, b = (float(x) for x in config.pool_beta)
  seeds, tasks = int(config.seeds), int(config.num_tasks)

  def one_task(key, p, size):
    traj = rollout.collect_groups(env, env_params, dg.tabular_policy,
                                  degenerate_groups.biased_logits(2, p), key, 1, size,
                                  config.horizon)
    return jnp.sum(traj.rewards * traj.valid, axis=0)[0]                 # [K]

  def measure(key):
    out = {}
    for size in config.group_sizes:
      k_p, k_run = jax.random.split(jax.random.fold_in(key, size))
      p = jnp.clip(jax.random.beta(k_p, a, b, (seeds * tasks,)), 1e-6, 1.0 - 1e-6)
      rewards = jax.vmap(one_task, in_axes=(0, 0, None))(
          jax.random.split(k_run, seeds * tasks), p, size)               # [S * N, K]
      rewards = rewards.reshape(seeds, tasks, size)
      out[str(size)] = {
          "degenerate": jax.vmap(degenerate_groups.degenerate_fraction)(rewards),
          "conditional": jnp.mean(degenerate_groups.analytic_degenerate_fraction(p, size)
                                  .reshape(seeds, tasks), axis=1),
          "mean_p": jnp.mean(p.reshape(seeds, tasks), axis=1)}
    return out

  return jax.jit(measure)


def pool_records(out, config) -> list:
  """One dict per K: measured fraction (SE over seeds), the distribution's formula, the
  formula given the drawn p's, and the formula at the distribution's mean p."""
  a, b = (float(x) for x in config.pool_beta)
  mean_p = a / (a + b)
  recs = []
  for size in config.group_sizes:
    o = {k: np.asarray(v, np.float64) for k, v in out[str(size)].items()}
    measured = float(o["degenerate"].mean())
    analytic = pool_analytic(a, b, size)
    groups = int(config.seeds) * int(config.num_tasks)
    # Independent groups with different probabilities: the binomial SE at the pool's
    # value bounds the SE of their mean from above.
    se = float(np.sqrt(analytic * (1.0 - analytic) / groups))
    recs.append({"group_size": int(size), "groups": groups, "beta": [a, b],
                 "mean_p": mean_p, "mean_p_drawn": float(o["mean_p"].mean()),
                 "degenerate_measured": measured,
                 "degenerate_pool_analytic": analytic,
                 "degenerate_given_draws": float(o["conditional"].mean()),
                 "degenerate_at_mean_p": float(
                     degenerate_groups.analytic_degenerate_fraction(mean_p, size)),
                 "se": se, "z": (measured - analytic) / se if se > 0 else 0.0})
  return recs


def training_config(horizon: int = 10, num_pivotal: int = 5, num_actions: int = 4):
  """The `grpo` recipe on KeyChain (T = 10, k = 5, A = 4: random success 9.8e-4): 16
  tasks x 8 episodes per update, so a first success is expected after ~8 updates."""
  c = train_lib.keychain_env(grpo.default_config(), horizon, num_pivotal, num_actions)
  c.num_updates = 60              # updates per seed
  c.seeds = 16                    # seeds, vmapped in one compiled call
  c.chunk_updates = 60            # one compiled call for the whole run
  c.checkpoint_every = 0          # no checkpoints (the experiment keeps the curves only)
  return c


def run_training(c) -> Dict[str, np.ndarray]:
  """Trains `c.seeds` seeds of the recipe config `c` in one compiled call.

  Returns {"success", "degenerate_frac": [S, U] per update (sampled episodes of that
  update's rollout), "compile_seconds", "run_seconds"}.
  """
  train = algos.make_train(c)
  seeds = int(c.seeds)
  hp = {k: np.full((seeds,), float(v), np.float32) for k, v in train.default_hparams.items()}
  keys = jax.random.split(jax.random.PRNGKey(int(c.seed)), seeds)
  (_, metrics), compile_s, run_s = report.compile_and_run(jax.vmap(train), keys, hp)
  return {"success": np.asarray(metrics["success"], np.float64),
          "degenerate_frac": np.asarray(metrics["degenerate_frac"], np.float64),
          "compile_seconds": compile_s, "run_seconds": run_s}


def first_success(success: np.ndarray) -> list:
  """Per seed (rows of [S, U]), the 1-based update whose rollout had its first success
  (first entry > 0); None if none did."""
  out = []
  for row in np.asarray(success):
    hit = np.nonzero(row > 0)[0]
    out.append(None if hit.size == 0 else int(hit[0]) + 1)
  return out


def training_summary(curves, c, max_degenerate: float = 0.5) -> dict:
  """Numbers of a training run: first success per seed against the waiting time, and
  the informative window (updates with at most `max_degenerate` groups degenerate)."""
  kw = c.env_kwargs
  p = float(kw.num_actions) ** -float(kw.num_pivotal)
  episodes = int(c.num_tasks) * int(c.group_size)
  per_update = 1.0 - (1.0 - p) ** episodes
  firsts = first_success(curves["success"])
  reached = np.array([f for f in firsts if f is not None], np.float64)
  mean, half = report.t_interval(reached) if reached.size else (float("nan"), float("nan"))
  informative = curves["degenerate_frac"] <= max_degenerate                  # [S, U]
  window = []
  for row in informative:
    idx = np.nonzero(row)[0]
    window.append(None if idx.size == 0 else [int(idx[0]) + 1, int(idx[-1]) + 1])
  updates = curves["success"].shape[1]
  return {
      "env_kwargs": kw.to_dict(), "num_tasks": int(c.num_tasks),
      "group_size": int(c.group_size), "updates": updates, "seeds": int(c.seeds),
      "lr": float(c.lr), "initial_success_rate": p, "episodes_per_update": episodes,
      "expected_wait_formula": 1.0 / (episodes * p),       # 1 / (tasks K p)
      "expected_wait_geometric": 1.0 / per_update,         # mean of the geometric law
      # P(no success in the run) under the geometric law, and what was seen.
      "p_never_geometric": float((1.0 - per_update) ** updates),
      "first_success_update": firsts,
      "first_success_mean": float(mean), "first_success_interval": float(half),
      "first_success_median": float(np.median(reached)) if reached.size else None,
      "seeds_with_success": int(reached.size),
      "informative_window": window,
      "informative_updates_mean": float(informative.sum(1).mean()),
      "half_success_update": first_success(curves["success"] - 0.5 + 1e-9),
      "final_success_mean": float(curves["success"][:, -5:].mean()),
      "final_degenerate_mean": float(curves["degenerate_frac"][:, -5:].mean()),
      "min_degenerate_mean": float(curves["degenerate_frac"].mean(0).min()),
      "success_curve_mean": np.round(curves["success"].mean(0), 4).tolist(),
      "degenerate_curve_mean": np.round(curves["degenerate_frac"].mean(0), 4).tolist(),
      "compile_seconds": curves["compile_seconds"], "run_seconds": curves["run_seconds"]}


def plot_training(curves, out, workdir: str, max_degenerate: float = 0.5) -> str:
  """grpo_training_window.png: success and degenerate fraction per update (seed mean,
  95% t-interval, seeds faint); degenerate fraction against success per (seed, update)
  over p^K + (1-p)^K; first-success updates against the geometric law."""
  fig, axes = report.figure(1, 3, figsize=(16, 4.4))
  ax, axd, axw = axes[0]
  succ, deg = curves["success"], curves["degenerate_frac"]
  upd = np.arange(1, succ.shape[1] + 1)
  for y, colour, label in ((succ, "C0", "success (sampled)"),
                           (deg, "C3", "degenerate groups")):
    mean, half = report.t_interval(y)
    for row in y:
      ax.plot(upd, row, color=colour, lw=0.5, alpha=0.25)
    ax.plot(upd, mean, color=colour, lw=2, label=f"{label}, mean")
    ax.fill_between(upd, mean - half, mean + half, color=colour, alpha=0.25)
  ax.axvline(out["expected_wait_formula"], color="grey", ls=":",
             label=f"1/(tasks K p) = {out['expected_wait_formula']:.1f} updates")
  ax.axhline(max_degenerate, color="grey", lw=0.6)
  ax.set(xlabel="update", ylim=(-0.03, 1.03),
         title=f"GRPO on KeyChain k={out['env_kwargs']['num_pivotal']}, "
               f"A={out['env_kwargs']['num_actions']}: {out['seeds']} seeds (95% CI)")
  ax.title.set_fontsize(9)
  ax.legend(fontsize=7)
  grid = np.linspace(0, 1, 201)
  size = out["group_size"]
  axd.scatter(succ.ravel(), deg.ravel(), s=4, alpha=0.3, label="(seed, update)")
  axd.plot(grid, np.asarray(degenerate_groups.analytic_degenerate_fraction(grid, size)), color="k",
           label=f"p^K + (1-p)^K, K={size}, every task at p")
  axd.set(xlabel="success in the update", ylabel="degenerate groups in the update",
          title="each (seed, update) against the curve for tasks of equal p")
  axd.title.set_fontsize(9)
  axd.legend(fontsize=7)
  firsts = sorted(f for f in out["first_success_update"] if f is not None)
  n = len(out["first_success_update"])
  per_update = 1.0 / out["expected_wait_geometric"]
  axw.step(firsts, np.arange(1, len(firsts) + 1) / n, where="post",
           label=f"measured ({len(firsts)}/{n} seeds)")
  axw.plot(upd, 1.0 - (1.0 - per_update) ** upd, color="k", ls="--",
           label=f"geometric, mean {out['expected_wait_geometric']:.1f}")
  axw.set(xlabel="update of the first success", ylabel="share of seeds", ylim=(0, 1.02),
          title="waiting time for a first success")
  axw.title.set_fontsize(9)
  axw.legend(fontsize=7)
  return report.save_figure(fig, workdir, "grpo_training_window.png")
