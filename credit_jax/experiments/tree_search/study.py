"""Exercise 5: tree search against decoding baselines on KeyChain-v0, and what search buys GRPO.

  python3 scripts/tree_search.py --config=configs/tree_search.py:small --workdir=/tmp/ts
  summary = tree_search.run(tree_search.default_config(), workdir)

Part A (`credit_jax/experiments/tree_search/vs_baselines.py`), per point (a prior: uniform,
informative or adversarial; k pivotal steps), on `num_tasks` start states: the tree
search with the prior as its policy against greedy decoding, best-of-M at several
temperatures, sampling without replacement and beam search (over sequences and over
distinct states), each at the search's compute matched on env steps and policy
evaluations, and again on wall time. Success rates carry Wilson 95% intervals; greedy and
best-of-M also have exact rates. Per point and matching, the best baseline and whether
the intervals separate it from the search.

Part B trains `search_then_train` with search on and off (the off arm is GRPO with the same
loss), seeds vmapped, and plots sampled and greedy success against updates and against
env steps (search steps included).

`config.parts` picks the parts ("ab", or "a" / "b" alone). Writes into the workdir:
metrics.jsonl (one record per point, then per update and arm), search_vs_baselines.png
(part A), training_curves.png (part B), summary.json and summary.md.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax.runtime import metrics
from credit_jax.algos import ConfigError
from credit_jax.algos import train as train_lib
from credit_jax.algos import search_then_train as stt
from credit_jax.experiments import report
from credit_jax.experiments.tree_search import vs_baselines as svb

__all__ = [
    "default_config", "markdown", "num_seeds", "plot_training", "run", "train_arms",
    "train_config", "training_summary", "validate_config",
]

def train_config(horizon: int, num_pivotal: int):
  """Part B's search-then-train recipe config: the recipe's `default_config()` on KeyChain
  with episodes of `horizon` steps and `num_pivotal` pivotal steps, 4 seeds, 40 updates.

  The same recipe alone, for scripts/train.py: configs/search_then_train_keychain.py.
  """
  c = train_lib.keychain_env(stt.default_config(), horizon, num_pivotal)
  c.seeds = 4                     # seeds vmapped in one compiled call
  c.num_updates = 40              # updates (one group rollout each)
  return c



def default_config() -> ml_collections.ConfigDict:
  """The "small" run: two priors at k = 4 (1024 tasks each), then part B at T = 10, k = 6."""
  c = ml_collections.ConfigDict()
  c.parts = "ab"                 # which parts run: a (search vs baselines), b (training)
  c.seed = 0                     # base RNG seed
  c.env_name = "KeyChain-v0"
  c.horizon = 10                 # episode length T, and the search's max_depth
  c.num_actions = 4              # A
  # Part A points (prior, k pivotal steps); priors in search_vs_baselines.PRIORS.
  c.points = (("uniform", 4), ("adversarial", 4))
  c.prior_q = 0.5                # informative/adversarial: probability of the top action
  c.adversarial_right = 0.3      # adversarial: the right key's probability when second
  c.num_tasks = 1024             # tasks (start states) per point, shared by the methods
  c.group_size = 8               # K: the exact best-of-K rate, GRPO's budget, is reported
  c.temperatures = (1.0, 0.5, 0.25)  # best-of-M sampling temperatures
  c.timing_repeats = 2           # wall time of a call: the min over this many runs
  c.max_wall_budget = 4096       # cap on a wall-time-matched M or width
  c.search = ml_collections.ConfigDict()
  c.search.simulations = 256     # per task
  c.search.selection = "puct"    # puct | ucb1
  c.search.rollout = "sample"    # sample | greedy
  c.search.exploration = 1.25    # PUCT/UCB1 constant
  # Part B: GRPO with and without search at one difficulty (random success 2.4e-4: about
  # one success per 30 updates of 128 sampled episodes).
  c.train = train_config(horizon=10, num_pivotal=6)
  c.train.num_updates = 60
  return c


def num_seeds(config) -> int:
  """Seeds vmapped in part B's compiled call (part A batches tasks, not seeds)."""
  return int(config.train.seeds)


def validate_config(config) -> None:
  """Raises ConfigError naming the field when the experiment cannot run as configured."""
  if not config.parts or set(config.parts) - set("ab"):
    raise ConfigError(f"config.parts must be made of 'a' and 'b', got {config.parts!r}")
  a = int(config.num_actions)
  if a < 2 or a & (a - 1):
    raise ConfigError(f"config.num_actions={a} must be a power of two >= 2 (uniform cues)")
  for i, point in enumerate(config.points):
    if len(point) != 2 or point[0] not in svb.PRIORS:
      raise ConfigError(f"config.points[{i}] must be (prior, k) with prior in {svb.PRIORS}, "
                       f"got {point!r}")
    if not 1 <= int(point[1]) <= config.horizon:
      raise ConfigError(f"config.points[{i}]: k={point[1]} must lie in [1, horizon="
                       f"{config.horizon}]")
  q, right = float(config.prior_q), float(config.adversarial_right)
  rest = (1.0 - q - right) / (a - 2) if a > 2 else 0.0
  if not (0.0 < right < q < 1.0 and q + right <= 1.0 and rest < right):
    raise ConfigError(f"config.prior_q={q} and config.adversarial_right={right} must "
                     "rank the right key second: 0 < right < q, q + right <= 1, and the "
                     f"other keys' share {rest:.3g} below right")
  if not config.temperatures or min(config.temperatures) <= 0:
    raise ConfigError(f"config.temperatures must be positive, got {config.temperatures}")
  for field in ("num_tasks", "group_size", "timing_repeats", "max_wall_budget"):
    if int(config[field]) < 1:
      raise ConfigError(f"config.{field} must be >= 1, got {config[field]}")
  if int(config.search.simulations) < 1:
    raise ConfigError(f"config.search.simulations must be >= 1, got "
                     f"{config.search.simulations}")
  stt.validate_config(config.train)


def train_arms(config, key, log):
  """Part B: {arm: metrics {name: [seeds, updates]}} for search on and off."""
  arms = {}
  for arm, every in (("search", int(config.train.search_every) or 1), ("grpo", 0)):
    c = config.train.copy_and_resolve_references()
    c.search_every = every
    train = stt.make_train(c)
    keys = jax.random.split(key, int(c.seeds))
    (_, m), compile_s, run_s = report.compile_and_run(jax.vmap(train), keys)
    arms[arm] = {k: np.asarray(v) for k, v in m.items()}
    log(f"train {arm:6s}: final success {arms[arm]['success'][:, -5:].mean():.3f}, greedy "
        f"{arms[arm]['greedy_success'][:, -5:].mean():.3f} (compile {compile_s:.1f}s, "
        f"run {run_s:.1f}s)")
  return arms


def _env_steps(m):
  return np.cumsum(m["sample_env_steps"] + m["search_env_steps"], axis=1)


def plot_training(arms, workdir):
  """training_curves.png: part B's success against updates and env steps; its path."""
  fig, axes = report.figure(1, 3, figsize=(15, 4.2))
  axes = axes[0]
  for i, (arm, m) in enumerate(arms.items()):
    updates = np.arange(1, m["success"].shape[1] + 1)
    steps = _env_steps(m).mean(0)
    for ax, xs, key, style in ((axes[0], updates, "success", "-"),
                               (axes[0], updates, "greedy_success", ":"),
                               (axes[1], steps, "success", "-")):
      mean = m[key].mean(0)
      ax.plot(xs, mean, style, color=f"C{i}", label=f"{arm}: {key}")
      ax.fill_between(xs, m[key].min(0), m[key].max(0), color=f"C{i}", alpha=0.12)
    axes[2].plot(updates, m["degenerate_frac"].mean(0), color=f"C{i}", label=arm)
  search = arms["search"]
  searched = search["searched_tasks"].sum(0)
  found = (search["search_found"] * search["searched_tasks"]).sum(0)
  axes[2].plot(np.arange(1, searched.shape[0] + 1),
               np.where(searched > 0, found / np.maximum(searched, 1), np.nan), "--",
               color="C0", label="search: found (of the failed tasks searched)")
  axes[0].set_xlabel("update")
  axes[1].set_xlabel("env steps (sampling + search)")
  axes[1].set_xscale("log")
  axes[2].set_xlabel("update")
  axes[0].set_ylabel("success")
  axes[2].set_ylabel("fraction")
  axes[0].set_title("success (mean; band: seed range)", fontsize=10)
  axes[1].set_title("success against compute", fontsize=10)
  axes[2].set_title("degenerate groups; search success on failed tasks", fontsize=10)
  for ax in axes:
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  return report.save_figure(fig, workdir, "training_curves.png")


def markdown(summary):
  """summary.md: part A's table and part B's, for the parts that ran."""
  s = summary
  lines = ["# Exercise 5: tree search vs baselines (KeyChain-v0)", "",
           f"{report.wall_time(s['wall_seconds'])}", ""]
  if "points" in s:
    lines += svb.markdown(s)
  if "training" in s:
    lines += _markdown_training(s["training"])
  return "\n".join(lines + [""])


def _markdown_training(t):
  lines = [
      "## GRPO with and without search", "",
      f"KeyChain T = {t['horizon']}, k = {t['num_pivotal']} (random success "
      f"{t['episode_success']:.2e}), {t['num_updates']} updates x {t['num_tasks']} tasks x "
      f"K = {t['group_size']}, {t['seeds']} seeds; search on every "
      f"{t['search_every']} update(s), {t['search_simulations']} simulations on up to "
      f"{t['search_tasks']} all-failed tasks, weight {t['search_weight']}.", ""]
  lines += report.table(
      ("arm", "sampled success (last 5 updates)", "greedy success", "env steps",
       "search found (failed tasks)", "searched log-prob / step"),
      [(arm, f"{r['success_last5']:.3f}", f"{r['greedy_success_last5']:.3f}",
        f"{r['env_steps']:.3g}", f"{r['search_found']:.3f}", f"{r['searched_logp_step']:.3f}")
       for arm, r in t["arms"].items()])
  return lines


def training_summary(train_config, arms):
  """Part B's summary: the run's shape and per arm its final rates and mean curves."""
  tc = train_config
  def arm_summary(m):
    ran, found = m["search_ran"] > 0, m["search_found"] > 0
    return {"success_last5": float(m["success"][:, -5:].mean()),
            "greedy_success_last5": float(m["greedy_success"][:, -5:].mean()),
            "env_steps": float(_env_steps(m)[:, -1].mean()),
            "search_found": float(m["search_found"][ran].mean()) if ran.any() else 0.0,
            "searched_logp_step": (float(m["searched_logp_step"][found].mean())
                                   if found.any() else 0.0),
            "success_curve": m["success"].mean(0).tolist(),
            "greedy_success_curve": m["greedy_success"].mean(0).tolist()}
  return {
      "horizon": int(tc.env_kwargs.horizon), "num_pivotal": int(tc.env_kwargs.num_pivotal),
      "episode_success": float((1.0 / tc.env_kwargs.num_actions)
                               ** tc.env_kwargs.num_pivotal),
      "num_updates": int(tc.num_updates), "num_tasks": int(tc.num_tasks),
      "group_size": int(tc.group_size), "seeds": int(tc.seeds),
      "search_every": int(tc.search_every) or 1, "search_tasks": int(tc.search_tasks),
      "search_simulations": int(tc.search_simulations),
      "search_weight": float(tc.search_weight),
      "arms": {arm: arm_summary(m) for arm, m in arms.items()}}


def _part_a(config, key, writer, log):
  """Part A: one dict per point (`search_vs_baselines.measure_point`), logged, recorded."""
  points = svb.measure_points(config, key, log)
  writer.write_records([
      {"update": i + 1, "part": "A", "prior": p["prior"], "num_pivotal": p["num_pivotal"],
       "episode_success": p["episode_success"], "search_success": p["search"]["success"],
       "search_env_steps": p["search"]["env_steps"],
       **{f"best_{m}_success": p["best"][m]["success"] for m in svb.MATCHINGS}}
      for i, p in enumerate(points)])
  return points


def run(config, workdir: str, log=print) -> dict:
  """Runs the parts named by `config.parts`; writes metrics, figures and summaries.

  Returns the summary (also summary.json): the setup, "points" (part A, one dict per
  point, `search_vs_baselines.measure_point`) and "training" (part B, `training_summary`).
  """
  validate_config(config)
  os.makedirs(workdir, exist_ok=True)
  key = jax.random.key(config.seed)
  watch = report.Stopwatch()
  summary = {"horizon": int(config.horizon), "num_actions": int(config.num_actions),
             "num_tasks": int(config.num_tasks), "group_size": int(config.group_size),
             "simulations": int(config.search.simulations),
             "selection": config.search.selection, "rollout": config.search.rollout,
             "prior_q": float(config.prior_q),
             "adversarial_right": float(config.adversarial_right),
             "temperatures": [float(t) for t in config.temperatures],
             "load_average": float(os.getloadavg()[0])}
  with metrics.MetricsWriter(workdir, tensorboard=False) as writer:
    if "a" in config.parts:
      summary["points"] = _part_a(config, key, writer, log)
      svb.plot(summary["points"], workdir, summary["load_average"])
    if "b" in config.parts:
      arms = train_arms(config, jax.random.fold_in(key, 10_000), log)
      first = len(summary.get("points", ()))
      for arm, m in arms.items():
        mean = {k: v.mean(0) for k, v in m.items()}
        writer.write_records(
            [{"update": first + u + 1, "part": "B", "arm": arm, "train_update": u + 1,
              **{k: float(v[u]) for k, v in mean.items()}}
             for u in range(m["success"].shape[1])])
      plot_training(arms, workdir)
      summary["training"] = training_summary(config.train, arms)
  summary["wall_seconds"] = watch.seconds()
  return report.write_summary(workdir, summary, markdown(summary))
