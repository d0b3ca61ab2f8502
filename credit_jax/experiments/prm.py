"""Process reward models (exercise 4): dense PRM shaping, how a policy games it, and fixes.

  python3 scripts/prm.py --config=configs/prm.py:small --workdir=/tmp/prm_s

GRPO on RunningSum-v0 (`credit_jax/envs/runningsum.py`) with a PRM trained on a
demonstrator's steps (`credit_jax/prm.py`). Four parts:
  A. arms over training, `seeds` seeds each (vmapped, arms of one program vmapped too):
     outcome-only; outcome + w * PRM in sum form and min form (softmin, PURE) for each w
     of `weights`; PRM-only (sum and min); sum form with the PRM retrained every
     `retrain_every` updates on the current policy's steps (ground-truth labels);
     outcome-only and min form with Dr. GRPO advantages (no std division, so a small w
     stays small next to the outcome); the per-step difference form ("step":
     `w * (p_t - p_{t-1})` added to each step's advantage, w in `step_weights`) with
     the demo PRM, retrained on truth labels, and retrained on Monte-Carlo labels
     (`mc_soft`) from the current policy. Logged per update: true success, PRM-rated score (mean P(good) over
     the policy's steps), true step accuracy and their gap, padding and surface-feature
     fractions; per seed, the env steps to 50% success (10-update moving average).
  D. best-of-N reranking (N in `rerank_N`) of the final outcome-only policies' samples:
     chosen by a PRM score (softmin over steps; the demo PRM and the on-policy retrained
     PRM of the "step retrain truth" arm), by the outcome verifier, or at random.
  B. labels: held-out accuracy/calibration of PRMs trained on truth, MC (hard, soft) and
     outcome labels, how much each rates wrong surface-feature steps; MC label cost
     (env steps) and noise (hard-label error vs truth, soft-label RMSE vs N=64) against N.
  C. compounding: a truth-trained PRM judges every step of T-step trajectories (T up to
     500); measured P(all T judgements right) against a^T, a its per-step accuracy.
Writes prm_training.png, prm_labels.png, prm_compounding.png, prm_rerank.png,
summary.json, summary.md.

The report helpers h3 builds (credit_jax/experiments/report.py, cli.py) are not on this
branch: the minimum (figure saving, summary writing, 95% intervals) is written here.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

import credit_jax as cj
from credit_jax import prm
from credit_jax.algos import grpo
from credit_jax.experiments import report

METRICS = ("success", "prm_score", "step_accuracy", "prm_gap", "padding_frac",
           "surface_frac", "surface_wrong_frac", "prm_accuracy")


def default_config() -> ml_collections.ConfigDict:
  """The experiment's config: `grpo` (the base GRPO + PRM config) and the parts' fields."""
  c = ml_collections.ConfigDict()
  g = grpo.default_config()
  g.env_name = "RunningSum-v0"    # step-verifiable running-sum chain of thought
  g.env_kwargs = dict(num_terms=3, modulus=3, horizon=6)  # N terms, sums mod M, limit T
  g.horizon = 6                   # rollout steps per episode (= T)
  g.num_updates = 500             # GRPO updates per arm
  g.num_tasks = 16                # problems per update
  g.group_size = 8                # rollouts per problem
  g.ent_coef = 0.01               # entropy bonus
  g.prm = prm.default_config()    # the PRM block (credit_jax/prm.py)
  c.grpo = g                      # base config of every arm
  c.seeds = 5                     # seeds per arm (vmapped)
  c.weights = (0.05, 0.5)         # shaping weights w of the outcome + PRM arms
  c.step_weights = (0.1, 0.3)     # w of the per-step difference ("step") arms
  c.retrain_every = 10            # updates between PRM retrainings (retrain arms)
  c.rerank_N = (1, 4, 16, 64)     # best-of-N sizes (part D)
  c.rerank_tasks = 64             # problems per seed for part D
  c.only_arms = ()                # names of the arms to run (empty: all)
  c.parts = "ABCD"                # which parts to run (A always; D needs A's arms)
  c.compounding_T = (1, 2, 5, 10, 20, 50, 100, 200, 500)  # trajectory lengths for a^T
  c.compounding_episodes = 256    # trajectories for part C
  c.mc_N = (1, 2, 4, 8, 16)       # completions per MC label (part B)
  c.label_episodes = 128          # demonstrator episodes for part B
  return c


def validate_config(c) -> None:
  grpo.validate_config(c.grpo)
  cj.algos.common.require(int(c.seeds) >= 2, "seeds", "need >= 2 for intervals")
  cj.algos.common.require(max(c.compounding_T) <= 500, "compounding_T", "max 500")


def num_seeds(c) -> int:
  """Runs vmapped in one compiled call (for launch.configure_process)."""
  return int(c.seeds) * (2 + len(c.weights))   # the largest vmapped group of arms


def arms(c):
  """[(name, form, retrain_every, weight, outcome_weight, advantage, retrain_labels)]."""
  adv, every = str(c.grpo.advantage), int(c.retrain_every)
  out = [("outcome", "sum", 0, 0.0, 1.0, adv, "truth")]
  out += [(f"sum w={w:g}", "sum", 0, w, 1.0, adv, "truth") for w in c.weights]
  out += [("PRM-only sum", "sum", 0, 1.0, 0.0, adv, "truth")]
  out += [(f"min w={w:g}", "min", 0, w, 1.0, adv, "truth") for w in c.weights]
  out += [("PRM-only min", "min", 0, 1.0, 0.0, adv, "truth")]
  out += [(f"sum w={max(c.weights):g} retrain", "sum", every, max(c.weights), 1.0, adv,
           "truth")]
  # Without GRPO's std division a small w stays small next to the outcome.
  out += [("outcome drgrpo", "min", 0, 0.0, 1.0, "drgrpo", "truth")]
  out += [(f"min w={w:g} drgrpo", "min", 0, w, 1.0, "drgrpo", "truth") for w in c.weights]
  # Per-step difference credit: the demo PRM, then retrained on the policy's steps.
  for ws in c.step_weights:
    out += [(f"step w={ws:g}", "step", 0, ws, 1.0, adv, "truth")]
    out += [(f"step w={ws:g} retrain truth", "step", every, ws, 1.0, adv, "truth")]
    out += [(f"step w={ws:g} retrain mc", "step", every, ws, 1.0, adv, "mc_soft")]
  return [a for a in out if not c.only_arms or a[0] in tuple(c.only_arms)]


ci95 = report.t_interval   # (mean, half-width of the 95% t-interval) over an axis


def part_a(c, log, workdir=None):
  """Trains every arm; returns ({arm: {metric: [seeds, U]}}, {arm: final states})."""
  results, finals = {}, {}
  groups = {}
  for arm in arms(c):
    groups.setdefault((arm[1], arm[2], arm[5], arm[6]), []).append(arm)
  for (form, retrain, advantage, labels), members in groups.items():
    g = ml_collections.ConfigDict(c.grpo.to_dict())
    g.prm.form, g.prm.retrain_every, g.advantage = form, retrain, advantage
    g.prm.retrain_labels = labels
    train = cj.algos.make_train(g)
    s, a = int(c.seeds), len(members)
    hp = {k: jnp.full((a * s,), v, jnp.float32) for k, v in train.default_hparams.items()}
    hp["prm_weight"] = jnp.repeat(jnp.array([m[3] for m in members], jnp.float32), s)
    hp["prm_outcome_weight"] = jnp.repeat(jnp.array([m[4] for m in members],
                                                    jnp.float32), s)
    keys = jnp.tile(jax.random.split(jax.random.PRNGKey(int(g.seed)), s), (a, 1))
    t0 = time.time()
    states, metrics = jax.jit(jax.vmap(train))(keys, hp)
    metrics = jax.device_get(metrics)
    log(f"  part A: {[m[0] for m in members]} ({a * s} runs) in {time.time() - t0:.0f}s")
    for i, m in enumerate(members):
      results[m[0]] = {k: np.asarray(metrics[k][i * s:(i + 1) * s]) for k in METRICS}
      if m[0] == "outcome" or m[0] == f"step w={c.step_weights[0]:g} retrain truth":
        finals[m[0]] = jax.tree.map(lambda x: x[i * s:(i + 1) * s], states)
    if workdir:   # each group's curves as soon as it is done (a long run cut short)
      np.savez(os.path.join(workdir, f"part_a_{len(results)}.npz"),
               **{f"{m[0]}|{k}": results[m[0]][k] for m in members for k in METRICS})
  return results, finals


def part_d(c, finals, log) -> Dict[str, Any]:
  """Best-of-N of the outcome arm's final policies: success of the pick, per seed."""
  from credit_jax import networks, rollout
  g = c.grpo
  env, params = cj.envs.make(g.env_name, **dict(g.env_kwargs))
  net, _ = cj.algos.common.make_network(g, env, params, value_head=False)
  shaper = prm.make_shaper(g, env, params)
  policy_fn = networks.make_policy_fn(net)
  k_max, tasks, horizon = int(max(c.rerank_N)), int(c.rerank_tasks), int(g.horizon)
  pol = finals["outcome"]
  retrained = next((v for k, v in finals.items() if k != "outcome"), None)

  def one_seed(policy_params, prm_demo, prm_on, key):
    traj = rollout.collect_groups(env, params, policy_fn, policy_params, key, tasks,
                                  k_max, horizon)                         # [T, B, K]
    ok = (jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), 0) > 0).astype(jnp.float32)
    score = lambda p: prm.aggregate(shaper.probs(p, traj.obs, traj.actions), traj.valid,
                                    "min", float(g.prm.tau))
    rankers = {"PRM (demo)": score(prm_demo), "PRM (retrained on policy)": score(prm_on),
               "verifier": ok, "random": jnp.zeros_like(ok)}
    return {name: jnp.stack([jnp.mean(prm.rerank(sc, ok, int(n))) for n in c.rerank_N])
            for name, sc in rankers.items()}

  s = int(c.seeds)
  prm_on = (retrained.aux["prm_params"] if retrained is not None
            else pol.aux["prm_params"])
  out = jax.jit(jax.vmap(one_seed))(pol.params, pol.aux["prm_params"], prm_on,
                                    jax.random.split(jax.random.PRNGKey(21), s))
  res = {name: {"N": [int(n) for n in c.rerank_N],
                "mean": [float(x) for x in ci95(np.asarray(v))[0]],
                "half": [float(x) for x in ci95(np.asarray(v))[1]]}
         for name, v in jax.device_get(out).items()}
  log(f"  part D: {json.dumps(res)}")
  return res


def steps_to(curves, level: float, steps: int, window: int = 10):
  """Per seed (rows of `curves: [seeds, U]`): env steps until the `window`-update moving
  average first reaches `level`, or None."""
  out = []
  for row in np.asarray(curves):
    smooth = np.convolve(row, np.ones(window) / window, mode="valid")
    hit = np.nonzero(smooth >= level)[0]
    out.append(int((hit[0] + window) * steps) if hit.size else None)
  return out


def part_b(c, log) -> Dict[str, Any]:
  """Label kinds (held-out quality) and MC label cost/noise against N."""
  g = c.grpo
  env, params = cj.envs.make(g.env_name, **dict(g.env_kwargs))
  pc = ml_collections.ConfigDict(g.prm.to_dict())
  net = prm.PRM(num_actions=env.num_actions, hidden_sizes=tuple(pc.hidden_sizes))
  key = jax.random.PRNGKey(7)
  k_tr, k_ho, k_mc, k_ref, k_fit = jax.random.split(key, 5)
  pc.labels, pc.mc_rollouts = "mc_soft", 8
  train = prm.demo_data(env, params, pc, k_tr, int(pc.demo_episodes))
  held = prm.demo_data(env, params, pc, k_ho, int(c.label_episodes))
  kinds = {}
  for kind in ("truth", "mc_hard", "mc_soft", "outcome"):
    p0 = prm.init_prm(net, jax.random.PRNGKey(0), env.obs_shape[0])
    p, _ = jax.jit(lambda p, k, y: prm.train_prm(
        net, p, train, y, k, int(pc.train_steps), int(pc.batch_size), float(pc.lr))
                   )(p0, k_fit, train[kind])
    ev = prm.evaluate(net, p, held["obs"], held["actions"], held["truth"], held["valid"])
    prob = jax.nn.sigmoid(net.apply(p, held["obs"], held["actions"]))
    v = held["valid"]
    wrong_s = v & held["surface"] & ~held["step_correct"]
    right_p = v & ~held["surface"] & held["step_correct"]
    kinds[kind] = {k: float(ev[k]) for k in ("accuracy", "bce", "ece", "base_rate")}
    kinds[kind]["p_wrong_surface"] = float(jnp.sum(prob * wrong_s) / jnp.sum(wrong_s))
    kinds[kind]["p_right_plain"] = float(jnp.sum(prob * right_p) / jnp.sum(right_p))
  # MC label cost and noise against N, from the held-out demonstrator states.
  policy = prm.demo_policy(env, pc.demo_correct, pc.demo_pad, pc.demo_style_good,
                           pc.demo_style_bad)
  _, states = jax.vmap(env.reset_env, in_axes=(0, None))(
      jax.random.split(k_mc, int(c.label_episodes)), params)
  horizon = int(params.max_steps_in_episode)
  out, post = prm.run_episodes(env, params, policy, k_mc, states, horizon)
  flat = lambda x: x.reshape((-1,) + x.shape[2:])
  post, valid = jax.tree.map(flat, post), flat(out["valid"])
  truth, rew = flat(out["step_correct"]), flat(out["rewards"])
  _, ref = prm.mc_labels(env, params, policy, post, k_ref, 64, horizon, rew)
  mc = []
  for n in c.mc_N:
    hard, soft = prm.mc_labels(env, params, policy, post, jax.random.fold_in(k_mc, n),
                               int(n), horizon, rew)
    w = valid.astype(jnp.float32)
    mc.append({"N": int(n), "env_steps_per_label": int(n) * horizon,
               "hard_vs_truth_acc": float(jnp.sum(((hard > 0.5) == truth) * w) / w.sum()),
               "soft_rmse_vs_N64": float(jnp.sqrt(jnp.sum((soft - ref) ** 2 * w) / w.sum())),
               "hard_positive_rate": float(jnp.sum(hard * w) / w.sum())})
  log(f"  part B: labels {json.dumps(kinds)}")
  return {"kinds": kinds, "mc": mc}


def part_c(c, log) -> Dict[str, Any]:
  """Compounding: P(a PRM judges all T steps right) vs a^T."""
  g = c.grpo
  t_max = int(max(c.compounding_T))
  m = int(g.env_kwargs.modulus)
  env, params = cj.envs.make("RunningSum-v0", num_terms=t_max, modulus=m, horizon=t_max)
  pc = ml_collections.ConfigDict(g.prm.to_dict())
  pc.labels, pc.demo_pad = "truth", 0.0     # no padding: every trajectory has T_max steps
  net = prm.PRM(num_actions=env.num_actions, hidden_sizes=tuple(pc.hidden_sizes))
  n_ep = int(c.compounding_episodes)
  tr = prm.demo_data(env, params, pc, jax.random.PRNGKey(11), max(n_ep // 8, 8))
  p0 = prm.init_prm(net, jax.random.PRNGKey(0), env.obs_shape[0])
  p, _ = jax.jit(lambda p: prm.train_prm(net, p, tr, tr["truth"], jax.random.PRNGKey(12),
                                         4 * int(pc.train_steps), int(pc.batch_size),
                                         float(pc.lr)))(p0)
  ho = prm.demo_data(env, params, pc, jax.random.PRNGKey(13), n_ep)
  prob = jax.nn.sigmoid(net.apply(p, ho["obs"], ho["actions"]))
  ok = ((prob > 0.5) == ho["step_correct"]).reshape(t_max, n_ep)   # [T, episodes]
  valid = ho["valid"].reshape(t_max, n_ep)
  rows = []
  for t in c.compounding_T:
    a, whole = prm.compounding(ok[:t], valid[:t])
    a, whole = float(a), float(whole)
    rows.append({"T": int(t), "a": a, "a^T": a ** t, "measured": whole,
                 "measured_se": float(np.sqrt(max(whole * (1 - whole), 0) / n_ep))})
  log(f"  part C: {rows}")
  return {"rows": rows, "episodes": n_ep}


def _figures(c, res_a, res_b, res_c, workdir):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  steps = int(c.grpo.num_tasks) * int(c.grpo.group_size) * int(c.grpo.horizon)
  panels = ("success", "prm_score", "prm_gap", "padding_frac", "surface_frac",
            "surface_wrong_frac")
  fig, axes = plt.subplots(2, 3, figsize=(15, 8))
  for ax, k in zip(axes.flat, panels):
    for i, (name, r) in enumerate(res_a.items()):
      mean, half = ci95(r[k])
      x = (np.arange(mean.shape[0]) + 1) * steps
      ax.plot(x, mean, label=name, linestyle="-" if i < 10 else "--")  # 10 colours
      ax.fill_between(x, mean - half, mean + half, alpha=0.2)
    ax.set_title(k)
    ax.set_xlabel("env steps")
  axes[0, 0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "prm_training.png"), dpi=100)
  plt.close(fig)
  if not res_c["rows"]:   # parts B and C not run
    return
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  ns = [r["N"] for r in res_b["mc"]]
  axes[0].plot(ns, [r["hard_vs_truth_acc"] for r in res_b["mc"]], "o-")
  axes[0].set(xscale="log", xlabel="N completions", title="MC hard label agreement with truth")
  axes[1].plot(ns, [r["soft_rmse_vs_N64"] for r in res_b["mc"]], "o-")
  axes[1].set(xscale="log", xlabel="N completions", title="MC soft label RMSE vs N=64")
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "prm_labels.png"), dpi=100)
  plt.close(fig)
  fig, ax = plt.subplots(figsize=(6, 4))
  ts = [r["T"] for r in res_c["rows"]]
  ax.plot(ts, [max(r["a^T"], 1e-6) for r in res_c["rows"]], "o--", label="a^T")
  ax.plot(ts, [max(r["measured"], 1e-6) for r in res_c["rows"]], "s-",
          label="measured (floor 1e-6)")
  ax.set(xscale="log", yscale="log", xlabel="T", ylabel="P(all T steps judged right)",
         title=f"compounding (a = {res_c['rows'][-1]['a']:.3f} at T=500)")
  ax.legend()
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "prm_compounding.png"), dpi=100)
  plt.close(fig)


def _rerank_figure(res_d, workdir):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(6, 4))
  for name, r in res_d.items():
    m, h = np.asarray(r["mean"]), np.asarray(r["half"])
    ax.errorbar(r["N"], m, yerr=h, marker="o", capsize=3, label=name)
  ax.set(xscale="log", xlabel="N samples", ylabel="success of the chosen sample",
         title="best-of-N (outcome-only policies; 95% CI over seeds)")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(os.path.join(workdir, "prm_rerank.png"), dpi=100)
  plt.close(fig)


def _speed_rows(res_a, steps, budget):
  """Per arm: env steps to 50% success per seed (censored at the budget)."""
  rows = {}
  for name, r in res_a.items():
    per = steps_to(r["success"], 0.5, steps)
    reached = [x for x in per if x is not None]
    cens = np.array([budget if x is None else x for x in per], np.float64)
    mean, half = ci95(cens)
    rows[name] = {"per_seed": per, "reached": len(reached), "seeds": len(per),
                  "mean_censored": float(mean), "half": float(half),
                  "median_censored": float(np.median(cens))}
  return rows


def run(config, workdir: str, log=print) -> Dict[str, Any]:
  """Runs parts A-C; writes figures, summary.json and summary.md into `workdir`."""
  validate_config(config)
  os.makedirs(workdir, exist_ok=True)
  t0 = time.time()
  res_a, finals = part_a(config, log, workdir)
  if "outcome" not in res_a:
    raise ValueError("only_arms must include 'outcome' (the reference arm)")
  parts = str(config.parts)
  res_d = part_d(config, finals, log) if "D" in parts else {}
  res_b = part_b(config, log) if "B" in parts else {"kinds": {}, "mc": []}
  res_c = part_c(config, log) if "C" in parts else {"rows": []}
  _figures(config, res_a, res_b, res_c, workdir)
  if res_d:
    _rerank_figure(res_d, workdir)
  steps = int(config.grpo.num_tasks) * int(config.grpo.group_size) * int(config.grpo.horizon)
  budget = steps * int(config.grpo.num_updates)
  speed = _speed_rows(res_a, steps, budget)
  final = {}
  for name, r in res_a.items():
    final[name] = {}
    for k in METRICS:
      mean, half = ci95(r[k][:, -10:].mean(axis=1))
      final[name][k] = (float(mean), float(half))
    final[name]["steps_to_50pct"] = speed[name]
  summary = {"final": final, "labels": res_b, "compounding": res_c, "rerank": res_d,
             "budget_env_steps": budget, "wall_s": time.time() - t0}
  with open(os.path.join(workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
  md = ["# PRM experiment", "",
        f"GRPO on RunningSum-v0 {dict(config.grpo.env_kwargs)}, {config.seeds} seeds, "
        f"{config.grpo.num_updates} updates ({steps} env steps each); last-10-update means "
        "with 95% t-intervals over seeds.", "",
        "| arm | success | PRM score | step acc | gap | padding | surface | wrong surface "
        "| seeds at 50% |", "|" + "---|" * 9]
  for name, f in final.items():
    cell = lambda k: f"{f[k][0]:.3f} ± {f[k][1]:.3f}"
    sp = speed[name]
    md.append(f"| {name} | " + " | ".join(cell(k) for k in (
        "success", "prm_score", "step_accuracy", "prm_gap", "padding_frac",
        "surface_frac", "surface_wrong_frac")) + f" | {sp['reached']}/{sp['seeds']} |")
  base = speed["outcome"]
  md += ["", f"## Env steps to 50% success (10-update moving average; a seed that never "
         f"gets there counts as the budget, {budget})", "",
         "| arm | per seed | mean ± 95% CI (censored) | median | median / outcome's |",
         "|---|---|---|---|---|"]
  for name, sp in speed.items():
    md.append(f"| {name} | {sp['per_seed']} | {sp['mean_censored']:.0f} ± {sp['half']:.0f} "
              f"| {sp['median_censored']:.0f} | "
              f"{sp['median_censored'] / base['median_censored']:.2f} |")
  md += ["", "## Best-of-N (outcome-only policies, success of the chosen sample)", "",
         "| ranker | " + " | ".join(f"N={n}" for n in config.rerank_N) + " |",
         "|" + "---|" * (1 + len(config.rerank_N))]
  for name, r in res_d.items():
    md.append(f"| {name} | " + " | ".join(f"{m:.3f} ± {h:.3f}" for m, h in zip(
        r["mean"], r["half"])) + " |")
  md += ["", "## PRM label kinds (held-out demonstrator steps)", "",
         "| labels | accuracy | BCE | ECE | P(good) wrong+surface | P(good) right+plain |",
         "|---|---|---|---|---|---|"]
  for k, v in res_b["kinds"].items():
    md.append(f"| {k} | {v['accuracy']:.3f} | {v['bce']:.3f} | {v['ece']:.3f} | "
              f"{v['p_wrong_surface']:.3f} | {v['p_right_plain']:.3f} |")
  md += ["", "## MC labels against N", "",
         "| N | env steps / label | hard label = truth | soft RMSE vs N=64 |", "|---|---|---|---|"]
  for r in res_b["mc"]:
    md.append(f"| {r['N']} | {r['env_steps_per_label']} | {r['hard_vs_truth_acc']:.3f} | "
              f"{r['soft_rmse_vs_N64']:.3f} |")
  md += ["", "## Compounding", "", "| T | a | a^T | measured |", "|---|---|---|---|"]
  for r in res_c["rows"]:
    md.append(f"| {r['T']} | {r['a']:.4f} | {r['a^T']:.3g} | {r['measured']:.3g} |")
  md += ["", f"Wall time {time.time() - t0:.0f} s."]
  with open(os.path.join(workdir, "summary.md"), "w") as f:
    f.write("\n".join(md) + "\n")
  log("\n".join(md))
  return summary
