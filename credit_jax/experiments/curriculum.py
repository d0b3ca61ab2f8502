"""Experiment: horizon curricula against direct training, and where they stop helping.

  python3 scripts/curriculum.py --config=configs/curriculum.py:small --workdir=/tmp/cur

GRPO (`credit_jax/algos/grpo.py`) with a horizon curriculum (`credit_jax/curriculum.py`):
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

Reported with 95% intervals over seeds (t-intervals; `ci95`): env steps to `level`
success at the target per method (seeds that never reach it are counted and left out of
the interval), target success at the largest env-step budget every method reached, and
for (b2) the largest distractor length each method solves (mean final success >= level).
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

from credit_jax import curriculum, networks, rollout
from credit_jax.algos import ConfigError, common, grpo
from credit_jax.experiments import curriculum_hierarchy, report

METHODS = ("direct", "fixed", "gated", "plr")


def default_config() -> ml_collections.ConfigDict:
  """The "small" run (aimed at <= 15 minutes on 2 idle CPU cores): KeyChain T = 1000;
  cue delays 0, 20, 40 at T = 60; KeyToDoor distractor phases 30 to 1000; hierarchy vs
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
  c.b1.cue_delays = (0, 20, 40)  # dependency ranges (history window cue_delay + 1)
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
  if tuple(config.a.stages)[-1] != config.a.horizon:
    raise ConfigError("config.a.stages: the last stage must be the target a.horizon")


def ci95(x) -> tuple:
  """(mean, half-width of a 95% t-interval) of the finite entries of `x` (censored runs
  are inf and left out; `reached` in the summary counts them)."""
  x = np.asarray(x, np.float64)
  x = x[np.isfinite(x)]
  mean, half = report.t_interval(x)
  return float(mean), float(half)


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

  Returns `{method: {name: [E, S]}}`: `env_steps` (cumulative steps taken), `success`
  (sampled policy on `eval_episodes` fresh target-length episodes), `train_success`,
  `stage_value`; and `compiles` (programs compiled: one, the training chunk with its
  evaluation at the end).
  """
  eval_every, eval_episodes = int(config.eval_every), int(config.eval_episodes)
  train = grpo.make_train(c)
  env, env_params = curriculum.make_env(c)
  cur = curriculum.Curriculum(c, env_params)
  stages = tuple(c.curriculum.stages)
  target = env_params.replace(**{c.curriculum.param: stages[-1]})
  network, _ = common.make_network(c, env, env_params, value_head=False)
  policy_fn = networks.make_policy_fn(network)
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

  def chunk_and_eval(s, k):   # one program: eval_every updates, then the evaluation
    s, m = train.run(s, None, eval_every)
    return s, m, evaluate(s.params, k)

  chunk = jax.jit(jax.vmap(chunk_and_eval))
  out = {k: [] for k in ("env_steps", "success", "train_success", "stage_value")}
  steps, ekey = np.zeros(n), keys[n]
  num_chunks = int(c.num_updates) // eval_every
  for i in range(num_chunks):
    ekey, sub = jax.random.split(ekey)
    state, m, succ = chunk(state, jax.random.split(sub, n))
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


def steps_to_level(curve, level) -> np.ndarray:
  """[S] env steps of the first evaluation with success >= level (inf: never)."""
  hit = curve["success"] >= level
  first = np.argmax(hit, axis=0)
  steps = curve["env_steps"][first, np.arange(hit.shape[1])]
  return np.where(hit.any(axis=0), steps, np.inf)


def success_at(curve, budget) -> np.ndarray:
  """[S] target success at the last evaluation within `budget` env steps (nan if none)."""
  ok = curve["env_steps"] <= budget
  idx = np.where(ok.any(axis=0), ok.shape[0] - 1 - np.argmax(ok[::-1], axis=0), -1)
  vals = curve["success"][np.maximum(idx, 0), np.arange(ok.shape[1])]
  return np.where(idx >= 0, vals, np.nan)


def compare(curves: Dict[str, dict], level: float) -> Dict[str, dict]:
  """Per method: steps to level (CI over the seeds that reach it), success at the
  largest budget every method reached, final success."""
  budget = min(float(np.min(cv["env_steps"][-1])) for cv in curves.values())
  rows = {}
  for name, cv in curves.items():
    st = steps_to_level(cv, level)
    rows[name] = {
        "steps_to_level": ci95(st), "reached": int(np.isfinite(st).sum()),
        "seeds": int(st.size), "budget": budget,
        "success_at_budget": ci95(success_at(cv, budget)),
        "final_success": ci95(cv["success"][-1]),
        "final_env_steps": float(np.mean(cv["env_steps"][-1])),
        "compiles": cv["compiles"]}
  return rows


def plot(ax, curves: Dict[str, dict], title: str) -> None:
  for name, cv in curves.items():
    x = cv["env_steps"].mean(axis=1)
    m = cv["success"].mean(axis=1)
    half = np.array([ci95(r)[1] for r in cv["success"]])
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
                   **{k: cv[k][e].tolist() for k in ("train_success", "stage_value")
                      if k in cv}})
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


def _fmt(ci, scale=1.0, digits=3, suffix=""):
  mean, half = ci
  if not np.isfinite(mean):
    return "-"
  if not np.isfinite(half):
    return f"{mean / scale:.{digits}g}{suffix}"
  return f"{mean / scale:.{digits}g}{suffix} ± {half / scale:.2g}{suffix}"


def summary_markdown(summary: dict, level: float) -> str:
  lines = ["# Horizon curricula vs direct training (GRPO)", "",
           "Each setting is one compiled program for all its methods and seeds (the episode "
           "length and the method are traced; rollouts padded to the target), so a "
           "schedule of any number of stages costs 1 compile (training chunk and its "
           "evaluation in one program). In (a, b) success is the sampled policy's on "
           f"fresh episodes at the target length; intervals are 95% t-intervals over "
           f"seeds; steps to {level:.0%} only over the seeds that reached it.", ""]
  for part, title in (("a", "(a) KeyChain, long target"),
                      ("b1", "(b1) KeyChain with a cue_delay dependency"),
                      ("b2", "(b2) KeyToDoor, growing distractor phase"),
                      ("c", "(c) manager/worker vs flat GRPO and PPO, equal env steps "
                            "(training success of the sampled policy)")):
    if part not in summary["parts"]:
      continue
    lines += [f"## {title}", ""]
    rows = []
    for setting, methods in summary["parts"][part].items():
      for m, r in methods.items():
        rows.append([setting, m, f"{r['reached']}/{r['seeds']}",
                     _fmt(r["steps_to_level"], 1e3, suffix="k"),
                     f"{r['budget'] / 1e3:.3g}k", _fmt(r["success_at_budget"]),
                     _fmt(r["final_success"]), f"{r['final_env_steps'] / 1e3:.3g}k"])
    lines += report.table(
        ["setting", "method", f"seeds at {level:.0%}", f"env steps to {level:.0%}",
         "equal budget", "success at budget", "final success", "final env steps"], rows)
    lines.append("")
    lines.append(f"![{part}](curves_{part}.png)")
    lines.append("")
  if "solved" in summary:
    lines += ["Largest distractor length solved (mean final success >= "
              f"{level:.0%}): " + ", ".join(f"{m}: {v}" for m, v in
                                            summary["solved"].items()), ""]
  lines.append(report.wall_time(summary["wall_seconds"]))
  return "\n".join(lines)


def run(config, workdir: str, log=print) -> dict:
  """Runs the parts with `methods`, writes the figures and summaries; returns the summary."""
  validate_config(config)
  os.makedirs(workdir, exist_ok=True)
  watch = report.Stopwatch()
  key = jax.random.PRNGKey(int(config.seed))
  summary = {"parts": {}, "level": config.level}
  records = []
  parts = (("a", part_a), ("b1", part_b1), ("b2", part_b2),
           ("c", curriculum_hierarchy.part_c))
  for name, fn in parts:
    if not config[name].methods:
      continue
    results = fn(config, jax.random.fold_in(key, ord(name[-1])), log)
    summary["parts"][name] = {s: compare(cv, config.level) for s, cv in results.items()}
    for s, cv in results.items():
      records += _records(name, s, cv)
    fig, axes = report.figure(1, len(results), figsize=(4.2 * len(results), 3.6))
    for ax, (s, cv) in zip(axes[0], results.items()):
      plot(ax, cv, f"({name}) {s}")
    report.save_figure(fig, workdir, f"curves_{name}.png")
    log(f"part {name} done at {watch.seconds():.0f}s")
  if "b2" in summary["parts"]:
    solved = {}
    for m in config.b2.methods:
      ok = [int(s.split("=")[1]) for s, r in summary["parts"]["b2"].items()
            if r[m]["final_success"][0] >= config.level]
      solved[m] = max(ok) if ok else "none"
    summary["solved"] = solved
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    for r in records:
      f.write(json.dumps(r) + "\n")
  summary["wall_seconds"] = watch.seconds()
  return report.write_summary(workdir, summary, summary_markdown(summary, config.level))
