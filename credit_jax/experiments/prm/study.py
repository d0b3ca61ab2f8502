"""Process reward models (exercise 4): dense PRM shaping, how a policy games it, and fixes.

  python3 scripts/prm.py --config=configs/prm.py --workdir=/tmp/prm

GRPO on RunningSum-v0 (`credit_jax/envs/runningsum.py`) with a PRM trained on a
demonstrator's steps (`credit_jax/addons/prm.py`). Five parts (`parts`):
  A. arms over training, `seeds` seeds each (vmapped, arms of one program vmapped too):
     outcome-only; outcome + w * PRM in sum form and min form (softmin, PURE) for each w
     of `weights`; PRM-only (sum and min); sum form with the PRM retrained every
     `retrain_every` updates on the current policy's steps (ground-truth labels);
     outcome-only and min form with Dr. GRPO advantages (no std division, so a small w
     stays small next to the outcome); the per-step difference form ("step":
     `w * (p_t - p_{t-1})` added to each step's advantage, w in `step_weights`) with
     the demo PRM, retrained on truth labels, and retrained on Monte-Carlo labels
     (`mc_soft`) from the current policy. Logged per update: true success, PRM-rated
     score (mean P(good) over the policy's steps), true step accuracy and their gap,
     padding and surface-feature fractions; per seed, the env steps to 50% success
     (10-update moving average).
  D. best-of-N reranking (N in `rerank_N`) of the final outcome-only policies' samples:
     chosen by a PRM score (softmin over steps; the demo PRM and the on-policy retrained
     PRM of the "step retrain truth" arm; the demo PRM among answered samples only), by
     the outcome verifier, or at random; with what the chosen samples contain (padding
     and surface-feature fractions, length, whether they answer at all).
  B. labels: held-out accuracy/calibration of PRMs trained on truth, MC (hard, soft) and
     outcome labels, how much each rates wrong surface-feature steps; MC label cost
     (env steps) and noise (hard-label error vs truth, soft-label RMSE vs N=64) against N.
  C. compounding: a truth-trained PRM judges every step of T-step trajectories (T up to
     500); measured P(all T judgements right) against a^T, a its per-step accuracy.
  E. PPO (`ppo`, the hook `prm.make_step_shaper`): outcome-only against the per-step
     difference form with the PRM retrained on truth labels, w in `ppo_weights`, one
     vmapped program; success against env steps and env steps to 50% success.
Writes prm_training.png, prm_labels.png, prm_compounding.png, prm_rerank.png,
prm_ppo.png, summary.json and summary.md (credit_jax/experiments/prm/report.py).
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

from credit_jax import algos, envs
from credit_jax.addons import prm
from credit_jax.algos import grpo, ppo
from credit_jax.experiments.prm import report as prm_report
from credit_jax.experiments import report

__all__ = [
    "METRICS", "arms", "ci95", "compounding", "default_config", "num_seeds", "part_a",
    "part_b", "part_c", "part_d", "part_e", "ppo_config", "rerank", "run", "steps_to",
    "validate_config",
]

METRICS = ("success", "prm_score", "step_accuracy", "prm_gap", "padding_frac",
           "surface_frac", "surface_wrong_frac", "prm_accuracy")


def rerank(scores, success, n: int):
  """Best-of-n: the success `[B]` of the sample that `scores: [B, K]` ranks first among
  the first `n` of each row's K samples (ties: the first); `success: [B, K]` in {0, 1}
  (or any per-sample value to read at the pick: its length, padding fraction, ...).
  Scores = the outcome gives the verifier's pick, constant scores a random one."""
  if scores.shape != success.shape or scores.ndim != 2 or not 1 <= n <= scores.shape[1]:
    raise ValueError(f"scores {scores.shape} / success {success.shape} must be one [B, K] "
                     f"with 1 <= n={n} <= K")
  pick = jnp.argmax(scores[:, :n], axis=1)
  return jnp.take_along_axis(success[:, :n], pick[:, None], axis=1)[:, 0]


def compounding(per_step_correct, valid):
  """Whole-trajectory judgement from per-step judgements `[T, B]` (bool, right or not).

  Returns (per-step accuracy a [], fraction of trajectories judged right at every step
  []), to compare the latter with a^T.
  """
  if per_step_correct.shape != valid.shape or per_step_correct.ndim != 2:
    raise ValueError(f"per_step_correct {per_step_correct.shape} and valid "
                     f"{valid.shape} must both be [T, B]")
  w = valid.astype(jnp.float32)
  a = jnp.sum(per_step_correct * w) / jnp.maximum(jnp.sum(w), 1.0)
  whole = jnp.all(jnp.logical_or(per_step_correct, ~valid), axis=0)
  return a, jnp.mean(whole.astype(jnp.float32))


def default_config() -> ml_collections.ConfigDict:
  """The experiment's config: `grpo` (the base GRPO + PRM config) and the parts' fields."""
  c = ml_collections.ConfigDict()
  g = grpo.default_config()
  g.env_name = "RunningSum-v0"    # step-verifiable running-sum chain of thought
  g.env_kwargs = dict(num_terms=3, modulus=3, horizon=6)  # N terms, sums mod M, limit T
  g.horizon = 6                   # rollout steps per episode (= T)
  g.num_updates = 300             # GRPO updates per arm
  g.chunk_updates = 50            # updates per compiled call
  g.checkpoint_every = 50         # (unused by the experiment; a multiple of chunk_updates)
  g.num_tasks = 16                # problems per update
  g.group_size = 8                # rollouts per problem
  g.ent_coef = 0.01               # entropy bonus
  g.prm = prm.default_config()    # the PRM block (credit_jax/addons/prm.py)
  c.grpo = g                      # base config of every arm
  c.seeds = 5                     # seeds per arm (vmapped)
  c.weights = (0.05,)             # shaping weights w of the outcome + PRM arms
  c.step_weights = (0.1,)         # w of the per-step difference ("step") arms
  c.retrain_every = 10            # updates between PRM retrainings (retrain arms)
  c.rerank_N = (1, 4, 16, 64)     # best-of-N sizes (part D)
  c.rerank_tasks = 32             # problems per seed for part D
  c.only_arms = ()                # names of the arms to run (empty: all)
  c.parts = "ABCDE"               # which parts to run (D needs A's arms)
  c.compounding_T = (1, 2, 5, 10, 20, 50, 100, 200, 500)  # trajectory lengths for a^T
  c.compounding_episodes = 128    # trajectories for part C
  c.mc_N = (1, 2, 4, 8, 16)       # completions per MC label (part B)
  c.label_episodes = 64           # demonstrator episodes for part B
  c.ppo = ppo_config()            # part E: PPO with the PRM hook (configs/ppo_prm.py)
  c.ppo_weights = (0.1, 0.3)      # part E: w of the PPO per-step arms (w = 0: outcome only)
  return c


def ppo_config() -> ml_collections.ConfigDict:
  """PPO on the same task with the per-step PRM hook (part E, configs/ppo_prm.py)."""
  p = ppo.default_config()
  p.env_name = "RunningSum-v0"
  # As part A, with the time limit a termination: PPO would bootstrap at a truncation
  # from the value of a state it never trains on (time = T), which pays for padding.
  p.env_kwargs = dict(num_terms=3, modulus=3, horizon=6, time_limit_terminates=True)
  p.total_timesteps = 300_000     # env steps per seed
  p.num_envs = 16                 # parallel environments
  p.num_steps = 32                # steps per env per update (512 env steps per update)
  p.lr = 1e-3                     # learning rate
  p.gamma = 1.0                   # episodic task, reward only at the end
  p.chunk_updates = 65            # updates per compiled call
  p.checkpoint_every = 130        # (a multiple of chunk_updates)
  p.prm = prm.default_config()    # the PRM block (credit_jax/addons/prm.py)
  p.prm.form = "step"             # per-step difference w * (p_t - p_{t-1})
  p.prm.weight = 0.3              # light shaping (part E sets it per arm)
  p.prm.retrain_every = 10        # retrain on the policy's own steps every 10 updates
  p.prm.retrain_labels = "truth"  # with ground-truth step labels
  return p


def validate_config(c) -> None:
  req = algos.train.require
  grpo.validate_config(c.grpo)
  req(int(c.seeds) >= 2, "seeds", "need >= 2 for intervals")
  req(max(c.compounding_T) <= 500, "compounding_T", "max 500")
  parts = str(c.parts)
  req(bool(parts) and set(parts) <= set("ABCDE"), "parts",
      f"letters of 'ABCDE', got {parts!r}")
  req("D" not in parts or "A" in parts, "parts", "part D reranks part A's policies")
  if "E" in parts:
    ppo.validate_config(c.ppo)
    req(c.ppo.get("prm") is not None and bool(c.ppo.prm.enabled), "ppo.prm.enabled",
        "part E needs the PRM hook on")


def num_seeds(c) -> int:
  """Runs vmapped in one compiled call (for launch.configure_process)."""
  return int(c.seeds) * max(2 + len(c.weights), 1 + len(c.ppo_weights))


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
    train = algos.make_train(g)
    s, a = int(c.seeds), len(members)
    hp = {k: jnp.full((a * s,), v, jnp.float32) for k, v in train.default_hparams.items()}
    hp["prm.weight"] = jnp.repeat(jnp.array([m[3] for m in members], jnp.float32), s)
    hp["prm.outcome_weight"] = jnp.repeat(jnp.array([m[4] for m in members],
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
  """Best-of-N of the outcome arm's final policies: success of the pick, per seed, and
  what the picked samples contain (`FEATURES`), for each ranker."""
  from credit_jax import nets, rollout
  g = c.grpo
  env, params = envs.make(g.env_name, **dict(g.env_kwargs))
  net, _ = algos.train.make_network(g, env, params, value_head=False)
  shaper = prm.make_shaper(g, env, params)
  policy_fn = nets.make_policy_fn(net)
  k_max, tasks, horizon = int(max(c.rerank_N)), int(c.rerank_tasks), int(g.horizon)
  pol = finals["outcome"]
  retrained = next((v for k, v in finals.items() if k != "outcome"), None)

  def one_seed(policy_params, prm_demo, prm_on, key):
    traj = rollout.collect_groups(env, params, policy_fn, policy_params, key, tasks,
                                  k_max, horizon)                         # [T, B, K]
    valid, info = traj.valid, traj.info
    ok = (jnp.sum(jnp.where(valid, traj.rewards, 0.0), 0) > 0).astype(jnp.float32)
    length = jnp.sum(valid.astype(jnp.float32), 0)                        # [B, K]
    frac = lambda x: jnp.sum(jnp.logical_and(x, valid), 0) / jnp.maximum(length, 1.0)
    answered = jnp.any(jnp.logical_and(traj.terminated, valid), 0).astype(jnp.float32)
    score = lambda p: prm.aggregate(shaper.probs(p, traj.obs, traj.actions), valid,
                                    "min", float(g.prm.tau))
    demo = score(prm_demo)
    feats = {"success": ok, "answered": answered, "length": length,
             "padding": frac(info["padding"]), "surface": frac(info["surface"]),
             "wrong_surface": frac(info["surface"] & ~info["step_correct"]),
             "step_accuracy": frac(info["step_correct"]), "demo_prm_score": demo}
    # The demo PRM among answered samples only (a format check, no verifier): a score
    # in [0, 1] plus 2 for an answer ranks every answered sample first.
    rankers = {"PRM (demo)": demo, "PRM (retrained on policy)": score(prm_on),
               "PRM (demo), answered only": demo + 2.0 * answered,
               "verifier": ok, "random": jnp.zeros_like(ok)}
    return {name: {f: jnp.stack([jnp.mean(rerank(sc, v, int(n))) for n in c.rerank_N])
                   for f, v in feats.items()} for name, sc in rankers.items()}

  s = int(c.seeds)
  prm_on = (retrained.aux["prm_params"] if retrained is not None
            else pol.aux["prm_params"])
  out = jax.device_get(jax.jit(jax.vmap(one_seed))(
      pol.params, pol.aux["prm_params"], prm_on, jax.random.split(jax.random.PRNGKey(21), s)))
  res = {}
  for name, per in out.items():
    ci = {f: ci95(np.asarray(v)) for f, v in per.items()}
    res[name] = {"N": [int(n) for n in c.rerank_N],
                 "mean": [float(x) for x in ci["success"][0]],
                 "half": [float(x) for x in ci["success"][1]],
                 "features": {f: {"mean": [float(x) for x in m], "half": [float(x) for x in h]}
                              for f, (m, h) in ci.items()}}
  log(f"  part D: {json.dumps({k: v['mean'] for k, v in res.items()})}")
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
  env, params = envs.make(g.env_name, **dict(g.env_kwargs))
  pc = ml_collections.ConfigDict(g.prm.to_dict())
  net = prm.PRM(num_actions=env.num_actions, hidden_sizes=tuple(pc.hidden_sizes))
  key = jax.random.PRNGKey(7)
  k_tr, k_ho, k_mc, k_ref, k_fit = jax.random.split(key, 5)
  pc.labels, pc.mc_rollouts = "mc_soft", 8
  demo = jax.jit(lambda k, n: prm.demo_data(env, params, pc, k, n), static_argnums=1)
  train = demo(k_tr, int(pc.demo_episodes))
  held = demo(k_ho, int(c.label_episodes))
  kinds = {}
  fit = jax.jit(lambda p, k, y: prm.train_prm(   # one compile for the four label kinds
      net, p, train, y, k, int(pc.train_steps), int(pc.batch_size), float(pc.lr)))
  for kind in ("truth", "mc_hard", "mc_soft", "outcome"):
    p0 = prm.init_prm(net, jax.random.PRNGKey(0), env.obs_shape[0])
    p, _ = fit(p0, k_fit, train[kind])
    ev = prm.evaluate(net, p, held["obs"], held["actions"], held["truth"], held["valid"])
    prob = jax.nn.sigmoid(net.apply(p, held["obs"], held["actions"]))
    v = held["valid"]
    wrong_s = v & held["surface"] & ~held["step_correct"]
    right_p = v & ~held["surface"] & held["step_correct"]
    kinds[kind] = {k: float(ev[k]) for k in ("accuracy", "bce", "ece", "base_rate")}
    kinds[kind]["p_wrong_surface"] = float(jnp.sum(prob * wrong_s) / jnp.sum(wrong_s))
    kinds[kind]["p_right_plain"] = float(jnp.sum(prob * right_p) / jnp.sum(right_p))
  # MC label cost and noise against N, from fresh demonstrator states (one program).
  policy = prm.demo_policy(env, pc.demo_correct, pc.demo_pad, pc.demo_style_good,
                           pc.demo_style_bad)
  horizon = int(params.max_steps_in_episode)

  def mc_table(k_mc, k_ref):
    _, states = jax.vmap(env.reset_env, in_axes=(0, None))(
        jax.random.split(k_mc, int(c.label_episodes)), params)
    out, post = prm.run_episodes(env, params, policy, k_mc, states, horizon)
    flat = lambda x: x.reshape((-1,) + x.shape[2:])
    post, w = jax.tree.map(flat, post), flat(out["valid"]).astype(jnp.float32)
    truth, rew = flat(out["step_correct"]), flat(out["rewards"])
    _, ref = prm.mc_labels(env, params, policy, post, k_ref, 64, horizon, rew)
    rows = []
    for n in c.mc_N:
      hard, soft = prm.mc_labels(env, params, policy, post, jax.random.fold_in(k_mc, n),
                                 int(n), horizon, rew)
      rows.append({"hard_vs_truth_acc": jnp.sum(((hard > 0.5) == truth) * w) / w.sum(),
                   "soft_rmse_vs_N64": jnp.sqrt(jnp.sum((soft - ref) ** 2 * w) / w.sum()),
                   "hard_positive_rate": jnp.sum(hard * w) / w.sum()})
    return rows
  mc = [{"N": int(n), "env_steps_per_label": int(n) * horizon,
         **{k: float(v) for k, v in row.items()}}
        for n, row in zip(c.mc_N, jax.jit(mc_table)(k_mc, k_ref))]
  log(f"  part B: labels {json.dumps(kinds)}")
  return {"kinds": kinds, "mc": mc}


def part_c(c, log) -> Dict[str, Any]:
  """Compounding: P(a PRM judges all T steps right) vs a^T."""
  g = c.grpo
  t_max = int(max(c.compounding_T))
  m = int(g.env_kwargs.modulus)
  env, params = envs.make("RunningSum-v0", num_terms=t_max, modulus=m, horizon=t_max)
  pc = ml_collections.ConfigDict(g.prm.to_dict())
  pc.labels, pc.demo_pad = "truth", 0.0     # no padding: every trajectory has T_max steps
  net = prm.PRM(num_actions=env.num_actions, hidden_sizes=tuple(pc.hidden_sizes))
  n_ep = int(c.compounding_episodes)
  demo = jax.jit(lambda k, n: prm.demo_data(env, params, pc, k, n), static_argnums=1)
  tr = demo(jax.random.PRNGKey(11), max(n_ep // 8, 8))
  p0 = prm.init_prm(net, jax.random.PRNGKey(0), env.obs_shape[0])
  p, _ = jax.jit(lambda p: prm.train_prm(net, p, tr, tr["truth"], jax.random.PRNGKey(12),
                                         4 * int(pc.train_steps), int(pc.batch_size),
                                         float(pc.lr)))(p0)
  ho = demo(jax.random.PRNGKey(13), n_ep)
  prob = jax.nn.sigmoid(net.apply(p, ho["obs"], ho["actions"]))
  ok = ((prob > 0.5) == ho["step_correct"]).reshape(t_max, n_ep)   # [T, episodes]
  valid = ho["valid"].reshape(t_max, n_ep)
  rows = []
  for t in c.compounding_T:
    a, whole = compounding(ok[:t], valid[:t])
    a, whole = float(a), float(whole)
    rows.append({"T": int(t), "a": a, "a^T": a ** t, "measured": whole,
                 "measured_se": float(np.sqrt(max(whole * (1 - whole), 0) / n_ep))})
  log(f"  part C: {rows}")
  return {"rows": rows, "episodes": n_ep}


def part_e(c, log) -> Dict[str, Any]:
  """PPO outcome-only (w = 0) against per-step PRM shaping (w in `ppo_weights`), one
  vmapped program: {arm: success [seeds, U]} and the env steps per update."""
  p = c.ppo
  train = algos.make_train(p)
  names = ["PPO outcome"] + [f"PPO step w={w:g} retrain {p.prm.retrain_labels}"
                             for w in c.ppo_weights]
  ws = (0.0,) + tuple(float(w) for w in c.ppo_weights)
  s, a = int(c.seeds), len(ws)
  hp = {k: jnp.full((a * s,), v, jnp.float32) for k, v in train.default_hparams.items()}
  hp["prm.weight"] = jnp.repeat(jnp.array(ws, jnp.float32), s)
  keys = jnp.tile(jax.random.split(jax.random.PRNGKey(int(p.seed)), s), (a, 1))
  t0 = time.time()
  _, metrics = jax.jit(jax.vmap(train))(keys, hp)
  metrics = jax.device_get(metrics)
  log(f"  part E: {names} ({a * s} runs) in {time.time() - t0:.0f}s")
  keep = ("success", "prm_score", "step_accuracy", "padding_frac", "surface_frac")
  curves = {n: {k: np.asarray(metrics[k][i * s:(i + 1) * s]) for k in keep}
            for i, n in enumerate(names)}
  return {"curves": curves, "steps_per_update": int(train.env_steps_per_update)}


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


def _finals(curves: Dict[str, Dict[str, np.ndarray]], steps: int, budget: int):
  """Last-10-update means with 95% intervals, and steps to 50% success, per arm."""
  speed = _speed_rows(curves, steps, budget)
  final = {}
  for name, r in curves.items():
    final[name] = {k: tuple(float(x) for x in ci95(v[:, -10:].mean(axis=1)))
                   for k, v in r.items()}
    final[name]["steps_to_50pct"] = speed[name]
  return final, speed


def run(config, workdir: str, log=print) -> Dict[str, Any]:
  """Runs the parts in `config.parts`; writes figures, summary.json and summary.md."""
  validate_config(config)
  os.makedirs(workdir, exist_ok=True)
  t0 = time.time()
  parts = str(config.parts)
  res_a, finals = part_a(config, log, workdir) if "A" in parts else ({}, {})
  if "A" in parts and "outcome" not in res_a:
    raise ValueError("only_arms must include 'outcome' (the reference arm)")
  res_d = part_d(config, finals, log) if "D" in parts else {}
  res_b = part_b(config, log) if "B" in parts else {"kinds": {}, "mc": []}
  res_c = part_c(config, log) if "C" in parts else {"rows": []}
  res_e = part_e(config, log) if "E" in parts else {}
  prm_report.figures(config, res_a, res_b, res_c, res_d, res_e, workdir)
  g = config.grpo
  steps = int(g.num_tasks) * int(g.group_size) * int(g.horizon)
  budget = steps * int(g.num_updates)
  final, _ = _finals(res_a, steps, budget)
  ppo_summary = {}
  if res_e:
    e_steps = res_e["steps_per_update"]
    e_budget = e_steps * next(iter(res_e["curves"].values()))["success"].shape[1]
    e_final, e_speed = _finals(res_e["curves"], e_steps, e_budget)
    ppo_summary = {"final": e_final, "steps_to_50pct": e_speed, "steps_per_update": e_steps,
                   "budget_env_steps": e_budget}
  summary = {"final": final, "labels": res_b, "compounding": res_c, "rerank": res_d,
             "ppo": ppo_summary, "budget_env_steps": budget, "wall_s": time.time() - t0}
  md = prm_report.markdown(config, summary)
  report.write_summary(workdir, summary, md)
  log(md)
  return summary
