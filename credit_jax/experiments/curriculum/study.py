"""Experiment: horizon curricula against direct training, and where they stop helping.

  python3 scripts/curriculum.py --config=configs/curriculum.py:small --workdir=/tmp/cur

GRPO (`credit_jax/algos/grpo.py`) with a horizon curriculum (`credit_jax/addons/curriculum.py`):
"direct" trains at the target episode length from the start; "fixed" runs a schedule of
shorter lengths first; "gated" promotes when success >= the threshold; "plr" samples
lengths by learnability p (1 - p). Every method is the same compiled program (the episode
length is a traced env param, rollouts padded to the target), so each run costs one
compile; they differ only in which length each update trains on. The x-axis is the env
steps actually taken (short episodes cost fewer), and every `eval_every` updates the
sampled policy is evaluated on `eval_episodes` fresh episodes **at the target length**.

Parts:
  (a) KeyChain-v0 at a long target T (pivotal steps anywhere in the episode, cues shown
      at the step): the curricula against direct training at equal env steps.
  (b) the failure case, a long-range dependency: (b1) KeyChain-v0 with a cue shown
      `cue_delay` steps before its pivotal step (the policy sees a window of the last
      cue_delay + 1 observations): no stage can be shorter than the dependency, so the
      curriculum's stages start at cue_delay + k; (b2) KeyToDoor-v0 with distractor
      phases of growing length, curriculum over the distractor length.

Reported with 95% intervals over seeds (credit_jax/experiments/curriculum/analysis.py):
env steps to `level` success at the target per method (seeds that never reach it are
censored: counted, left out of the interval, and at their total env steps in the ratio
below), success at the largest env-step budget every method reached, and the mean target
success over the shared env-step range. Verdicts: (a) whether a curriculum reaches
`level` in <= 1/2 the env steps of direct training; (b1, b2) each curriculum's advantage
over direct per dependency range (Welch intervals) and the first range where it stops
helping; (b2) the largest distractor length each method solves (mean final success >=
level); (c) the hierarchy's advantage over flat GRPO and PPO at equal env steps.
Writes curves_*.png, metrics.jsonl, summary.json and summary.md.
"""
from __future__ import annotations

import json
import os
from typing import Dict, List

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax.addons import curriculum
from credit_jax import nets, rollout
from credit_jax.algos import ConfigError, train as train_lib, grpo
from credit_jax.experiments.curriculum import hierarchy as curriculum_hierarchy
from credit_jax.experiments import report
from credit_jax.experiments.curriculum.analysis import (  # noqa: F401 (re-exported)
    advantage, ci95, compare, steps_to_level, stops_helping, success_at,
    summary_markdown, target_verdict)

__all__ = [
    "EXTRA_CURVES", "METHODS", "advantage", "ci95", "compare", "default_config",
    "derived", "grpo_config", "method_carry", "num_seeds", "part_a", "part_b1",
    "part_b2", "plot", "resummarize", "run", "steps_to_level", "stops_helping",
    "success_at", "summarize", "summary_markdown", "target_verdict", "train_curves",
    "validate_config",
]

METHODS = ("direct", "fixed", "gated", "plr")
# Per-evaluation curves besides env_steps and success that metrics.jsonl keeps.
EXTRA_CURVES = ("train_success", "stage_value", "episode_length", "worker_success")


def default_config() -> ml_collections.ConfigDict:
  """The "small" run (aimed at <= 15 minutes on 2 idle CPU cores): KeyChain T = 1000;
  cue delays 0, 20, 40, 55 at T = 60; KeyToDoor distractor phases 30 to 1000; hierarchy vs
  flat on GoalGrid 12x12, T = 120. configs/curriculum.py:full trains longer."""
  c = ml_collections.ConfigDict()
  c.seeds = 5                   # seeds vmapped side by side per run
  c.seed = 0                    # base RNG seed
  c.level = 0.9                 # success level for "env steps to level" and "solved"
  c.eval_every = 5              # updates between evaluations at the target length
  c.eval_episodes = 32          # fresh episodes per seed and evaluation
  c.threshold = 0.9             # gated: promotion threshold on training success
  c.window = 2                  # gated: updates the promotion rule averages
  c.fixed_share = 0.5           # fixed: share of the updates spent on the shorter stages

  c.grpo = ml_collections.ConfigDict()
  c.grpo.num_tasks = 8          # tasks per update
  c.grpo.group_size = 8         # rollouts per task
  c.grpo.update_epochs = 2      # passes per update
  c.grpo.num_minibatches = 2    # minibatches of whole groups
  c.grpo.lr = 3e-3              # learning rate
  c.grpo.hidden_sizes = (64, 64)  # MLP widths

  c.a = ml_collections.ConfigDict()
  c.a.horizon = 1000            # target KeyChain episode length T
  c.a.num_pivotal = 2           # pivotal steps k (A = 4: random success 1/16)
  c.a.stages = (20, 50, 100, 200, 500, 1000)  # curriculum lengths, the last the target
  c.a.num_updates = 25          # updates per method
  c.a.methods = METHODS         # methods compared

  c.b1 = ml_collections.ConfigDict()
  c.b1.horizon = 60             # KeyChain episode length T
  c.b1.num_pivotal = 1          # pivotal steps k
  c.b1.cue_delays = (0, 20, 40, 55)  # dependency ranges (history window cue_delay + 1)
  c.b1.num_stages = 3           # curriculum lengths: evenly from cue_delay + 2k to T
  c.b1.num_updates = 30         # updates per run
  c.b1.methods = ("direct", "gated")  # methods compared

  c.b2 = ml_collections.ConfigDict()
  c.b2.distractors = (30, 100, 300, 1000)  # KeyToDoor distractor-phase lengths (targets)
  c.b2.stage_fractions = (0.0, 0.1, 0.3, 1.0)  # curriculum lengths as fractions of the target
  c.b2.apple_reward = 0.1       # mean apple reward
  c.b2.apple_noise = 0.1        # apple reward noise (std)
  c.b2.num_updates = 25         # updates per run
  c.b2.methods = ("direct", "gated")  # methods compared

  c.c = curriculum_hierarchy.default_config()  # (c) hierarchy vs flat GRPO / PPO (see there)
  return c


def num_seeds(config) -> int:
  return int(config.seeds)


def validate_config(config) -> None:
  for f in ("seeds", "eval_every", "eval_episodes"):
    if int(config[f]) < 1:
      raise ConfigError(f"config.{f}: must be >= 1, got {config[f]}")
  for part in ("a", "b1", "b2", "c"):
    known = curriculum_hierarchy.METHODS if part == "c" else METHODS
    for m in config[part].methods:
      if m not in known:
        raise ConfigError(f"config.{part}.methods: {m!r} is not one of {known}")
    if int(config[part].num_updates) < int(config.eval_every):
      raise ConfigError(f"config.{part}.num_updates: must be >= eval_every")
  for k in config.c.extra_segment_lengths:
    if int(k) < 1 or int(config.c.horizon) % int(k):
      raise ConfigError(f"config.c.extra_segment_lengths: {k} must divide "
                        f"c.horizon={config.c.horizon}")
  if tuple(config.a.stages)[-1] != config.a.horizon:
    raise ConfigError("config.a.stages: the last stage must be the target a.horizon")


def grpo_config(config, env_name, env_kwargs, horizon, param, stages, num_updates,
                history_window=0):
  """The GRPO config of one setting: curriculum over `stages` (last = target) of `param`."""
  c = curriculum.add_config(grpo.default_config())
  c.env_name, c.env_kwargs, c.horizon = env_name, dict(env_kwargs), int(horizon)
  c.history_window = int(history_window)
  g = config.grpo
  c.num_tasks, c.group_size = g.num_tasks, g.group_size
  c.update_epochs, c.num_minibatches, c.lr = g.update_epochs, g.num_minibatches, g.lr
  c.network.hidden_sizes = tuple(g.hidden_sizes)
  c.num_updates, c.seeds = int(num_updates), int(config.seeds)
  cc = c.curriculum
  cc.kind, cc.param, cc.stages = "gated", param, tuple(int(s) for s in stages)
  cc.threshold, cc.window = config.threshold, config.window
  return c


def method_carry(cur, config, method, stages, num_updates):
  """The curriculum carry of `method` ("direct": the target from the first update)."""
  stages = tuple(int(s) for s in stages)
  if method == "direct":
    return cur.carry("fixed", (stages[-1],) * len(stages))
  share = int(config.fixed_share * num_updates) // max(len(stages) - 1, 1)
  return cur.carry(method, stages, (share,) * (len(stages) - 1), config.threshold)


def train_curves(c, methods, key, config, log=None) -> Dict[str, dict]:
  """Trains every method x `c.seeds` seeds side by side (one compiled program), in chunks
  of `eval_every` updates, evaluating each chunk's policy at the target length.

  Returns `{method: {name: [E, S]}}`, E = 1 + num_updates / eval_every (the first at 0
  env steps, the untrained policy): `env_steps` (cumulative steps taken), `success`
  (sampled policy on `eval_episodes` fresh target-length episodes), `train_success` and
  `stage_value` (of the chunk's last update; NaN at 0 steps); and `compiles` (programs
  compiled: one, the training chunk with its evaluation at the end, whose first call
  skips the updates).
  """
  eval_every, eval_episodes = int(config.eval_every), int(config.eval_episodes)
  train = grpo.make_train(c)
  env, env_params = curriculum.make_env(c)
  cur = curriculum.Curriculum(c, env_params)
  stages = tuple(c.curriculum.stages)
  target = env_params.replace(**{c.curriculum.param: stages[-1]})
  network, _ = train_lib.make_network(c, env, env_params, value_head=False)
  policy_fn = nets.make_policy_fn(network)
  seeds, n = int(c.seeds), len(methods) * int(c.seeds)

  def evaluate(params, k):
    traj = rollout.collect_episodes(env, target, policy_fn, params, k, eval_episodes,
                                    int(c.horizon))
    returns = jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), axis=0)
    return jnp.mean(curriculum.episode_success(traj, returns).astype(jnp.float32))

  keys = jax.random.split(key, n + 1)
  state = jax.vmap(train.init)(keys[:n])
  carries = [method_carry(cur, config, m, stages, c.num_updates) for m in methods]
  carries = jax.tree.map(lambda *xs: jnp.repeat(jnp.stack(xs), seeds, axis=0), *carries)
  state = state.replace(aux={**state.aux, "curriculum": carries})

  def chunk_and_eval(s, k, train_on):   # one program: eval_every updates, the evaluation
    def skip(s):   # the first call: no update, the untrained policy's evaluation
      shapes = jax.eval_shape(lambda s_: train.run(s_, None, eval_every)[1], s)
      return s, jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
    s, m = jax.lax.cond(train_on, lambda s: train.run(s, None, eval_every), skip, s)
    return s, m, evaluate(s.params, k)

  # `train_on` is not vmapped, so the cond stays a branch (no update computed when off).
  chunk = jax.jit(jax.vmap(chunk_and_eval, in_axes=(0, 0, None)))
  out = {k: [] for k in ("env_steps", "success", "train_success", "stage_value")}
  steps, ekey = np.zeros(n), keys[n]
  ekey, sub = jax.random.split(ekey)
  _, _, succ = chunk(state, jax.random.split(sub, n), False)   # at 0 env steps
  out["success"].append(np.asarray(succ))
  out["env_steps"].append(steps.copy())
  out["train_success"].append(np.full(n, np.nan))
  out["stage_value"].append(np.full(n, np.nan))
  num_chunks = int(c.num_updates) // eval_every
  for i in range(num_chunks):
    ekey, sub = jax.random.split(ekey)
    state, m, succ = chunk(state, jax.random.split(sub, n), True)
    m = jax.device_get(m)
    steps = steps + np.sum(m["env_steps"], axis=1)
    out["success"].append(np.asarray(succ))
    out["env_steps"].append(steps.copy())
    out["train_success"].append(np.mean(m["success"], axis=1))
    out["stage_value"].append(m["curriculum_value"][:, -1])
    if log is not None:   # a line per compiled chunk (the watchdog's heartbeat)
      log(f"  chunk {i + 1}/{num_chunks}: target success {np.mean(succ):.2f}")
  res = {k: np.stack(v).reshape(-1, len(methods), seeds) for k, v in out.items()}
  return {m: {**{k: v[:, i] for k, v in res.items()}, "compiles": 1}
          for i, m in enumerate(methods)}


def plot(ax, curves: Dict[str, dict], title: str) -> None:
  for name, cv in curves.items():
    x = cv["env_steps"].mean(axis=1)
    keep = x > 0          # a log axis: the evaluation at 0 steps is in the tables only
    x, succ = x[keep], cv["success"][keep]
    m = succ.mean(axis=1)
    half = np.array([ci95(r)[1] for r in succ])
    ax.plot(x, m, label=name)
    ax.fill_between(x, np.clip(m - half, 0, 1), np.clip(m + half, 0, 1), alpha=0.2)
  ax.set_xscale("log")
  ax.set_xlabel("env steps (taken)")
  ax.set_ylabel("success at the target")
  ax.set_title(title, fontsize=9)
  ax.set_ylim(-0.02, 1.02)
  ax.legend(fontsize=7)


def _records(part, setting, curves) -> List[dict]:
  recs = []
  for name, cv in curves.items():
    for e in range(cv["success"].shape[0]):
      recs.append({"part": part, "setting": setting, "method": name, "eval": e,   # (c): e = update
                   "env_steps": cv["env_steps"][e].tolist(),
                   "success": cv["success"][e].tolist(),
                   **{k: cv[k][e].tolist() for k in EXTRA_CURVES if k in cv}})
  return recs


def part_a(config, key, log):
  a = config.a
  kwargs = {"horizon": a.horizon, "num_pivotal": a.num_pivotal, "num_actions": 4}
  c = grpo_config(config, "KeyChain-v0", kwargs, a.horizon, "horizon", a.stages,
                  a.num_updates)
  curves = train_curves(c, tuple(a.methods), key, config, log)
  for m, cv in curves.items():
    log(f"(a) KeyChain T={a.horizon} {m}: final success {cv['success'][-1].mean():.2f} "
        f"after {cv['env_steps'][-1].mean():.3g} env steps")
  log(f"(a) {len(curves)} methods x {config.seeds} seeds: 1 compile (training + eval)")
  return {f"T={a.horizon}": curves}


def part_b1(config, key, log):
  b = config.b1
  out = {}
  for j, delay in enumerate(b.cue_delays):
    kwargs = {"horizon": b.horizon, "num_pivotal": b.num_pivotal, "num_actions": 4,
              "cue_delay": int(delay)}
    low = int(delay) + 2 * int(b.num_pivotal)
    stages = sorted(set(np.linspace(low, b.horizon, b.num_stages).astype(int).tolist()))
    c = grpo_config(config, "KeyChain-v0", kwargs, b.horizon, "horizon", stages,
                    b.num_updates, history_window=int(delay) + 1 if delay else 0)
    curves = train_curves(c, tuple(b.methods), jax.random.fold_in(key, j), config, log)
    for m, cv in curves.items():
      log(f"(b1) KeyChain T={b.horizon} cue_delay={delay} stages={stages} {m}: final "
          f"success {cv['success'][-1].mean():.2f}")
    out[f"cue_delay={delay}"] = curves
  return out


def part_b2(config, key, log):
  b = config.b2
  out = {}
  for j, length in enumerate(b.distractors):
    kwargs = {"max_distractor": int(length), "apple_reward": b.apple_reward,
              "apple_noise": b.apple_noise}
    stages = sorted(set(int(round(f * length)) for f in b.stage_fractions) | {int(length)})
    horizon = 4 + int(length) + 4
    c = grpo_config(config, "KeyToDoor-v0", kwargs, horizon, "distractor_length",
                    stages, b.num_updates)
    curves = train_curves(c, tuple(b.methods), jax.random.fold_in(key, j), config, log)
    for m, cv in curves.items():
      log(f"(b2) KeyToDoor distractor={length} stages={stages} {m}: final success "
          f"{cv['success'][-1].mean():.2f}")
    out[f"distractor={length}"] = curves
  return out


def derived(part: str, results: Dict[str, dict], level: float) -> dict:
  """The part's verdicts from its curves: (a) the target (a curriculum at <= 1/2 the env
  steps of direct), (b1, b2) each curriculum's advantage over direct per dependency range
  and the first range where it stops helping, (c) the first method's advantage over each
  other one. Advantages: mean target success over the shared env-step range
  (`curriculum_analysis.advantage`), A minus B, Welch 95% intervals."""
  out = {}
  methods = list(next(iter(results.values())))
  if part == "a" and "direct" in methods:
    out["target"] = {s: target_verdict(cv, level, 0.5) for s, cv in results.items()}
  if part in ("b1", "b2") and "direct" in methods:
    ranges = [int(s.split("=")[1]) for s in results]
    adv = {s: {m: advantage(cv, m, "direct") for m in methods if m != "direct"}
           for s, cv in results.items()}
    out["advantage"] = adv
    out["steps_ratio"] = {s: target_verdict(cv, level, 0.5) for s, cv in results.items()}
    out["stops_helping"] = {m: stops_helping([adv[s][m] for s in results], ranges)
                            for m in methods if m != "direct"}
  if part == "c" and len(methods) > 1:
    out["advantage"] = {s: {f"{methods[0]} - {m}": advantage(cv, methods[0], m)
                            for m in methods[1:]} for s, cv in results.items()}
  if part == "c":
    out["why"] = {s: curriculum_hierarchy.diagnostics(
        cv, *curriculum_hierarchy.parse_setting(s), level) for s, cv in results.items()}
  return out


def summarize(results: Dict[str, dict], level: float, workdir: str,
              part_seconds: Dict[str, float], wall_seconds: float) -> dict:
  """Figures, metrics.jsonl, summary.json and summary.md from the parts' curves
  `results` (`{part: {setting: {method: curve}}}`); returns the summary."""
  summary = {"parts": {}, "derived": {}, "part_seconds": dict(part_seconds),
             "level": level}
  records = []
  # float64 throughout, so that `resummarize` (curves read back from JSON) gives the
  # same numbers as the run itself.
  results = {p: {s: {m: {k: (v if k == "compiles" else np.asarray(v, np.float64))
                         for k, v in cv.items()} for m, cv in res.items()}
                 for s, res in part.items()} for p, part in results.items()}
  for name, res in results.items():
    summary["parts"][name] = {s: compare(cv, level) for s, cv in res.items()}
    summary["derived"][name] = derived(name, res, level)
    for s, cv in res.items():
      records += _records(name, s, cv)
    fig, axes = report.figure(1, len(res), figsize=(4.2 * len(res), 3.6))
    for ax, (s, cv) in zip(axes[0], res.items()):
      plot(ax, cv, f"({name}) {s}")
    report.save_figure(fig, workdir, f"curves_{name}.png")
  if "b2" in summary["parts"]:
    solved = {}
    for m in next(iter(summary["parts"]["b2"].values())):
      ok = [int(s.split("=")[1]) for s, r in summary["parts"]["b2"].items()
            if r[m]["final_success"][0] >= level]
      solved[m] = max(ok) if ok else "none"
    summary["solved"] = solved
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    for r in records:
      f.write(json.dumps(r) + "\n")
  summary["wall_seconds"] = wall_seconds
  return report.write_summary(workdir, summary, summary_markdown(summary, level))


def run(config, workdir: str, log=print) -> dict:
  """Runs the parts with `methods`, writes the figures and summaries; returns the summary."""
  validate_config(config)
  os.makedirs(workdir, exist_ok=True)
  watch = report.Stopwatch()
  key = jax.random.PRNGKey(int(config.seed))
  results, seconds = {}, {}
  parts = (("a", part_a), ("b1", part_b1), ("b2", part_b2),
           ("c", curriculum_hierarchy.part_c))
  for name, fn in parts:
    if not config[name].methods:
      continue
    start = watch.seconds()
    results[name] = fn(config, jax.random.fold_in(key, ord(name[-1])), log)
    seconds[name] = watch.seconds() - start
    log(f"part {name} done at {watch.seconds():.0f}s")
  return summarize(results, float(config.level), workdir, seconds, watch.seconds())


def resummarize(run_dir: str, workdir: str) -> dict:
  """Recomputes every figure, table and verdict of a finished run in `run_dir` from its
  metrics.jsonl (the curves; no training) into `workdir`, keeping its level, wall time
  and seconds per part: for a run made before a measurement was added.

    python3 -c "from credit_jax.experiments import curriculum as c; c.resummarize('RUN', 'OUT')"
  """
  old = report.read_summary(run_dir)
  results = {}
  with open(os.path.join(run_dir, "metrics.jsonl")) as f:
    for line in f:
      r = json.loads(line)
      cv = results.setdefault(r["part"], {}).setdefault(r["setting"], {}).setdefault(
          r["method"], {"compiles": 1})
      for k in ("env_steps", "success") + EXTRA_CURVES:
        if k in r:
          cv.setdefault(k, []).append(r[k])
  for res in results.values():
    for methods in res.values():
      for cv in methods.values():
        for k, v in cv.items():
          if k != "compiles":
            cv[k] = np.asarray(v, np.float64)
  os.makedirs(workdir, exist_ok=True)
  return summarize(results, float(old["level"]), workdir, old.get("part_seconds", {}),
                   float(old["wall_seconds"]))
