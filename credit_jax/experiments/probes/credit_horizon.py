"""The credit probe's horizon axis, measured exactly: tabular REINFORCE's updates to 90%
against T, and the lambda = 1 estimator's bias against the DP gradient.

  python3 scripts/probes.py --config=configs/probes.py:credit_horizon --workdir=runs/credit_horizon
  python3 scripts/probes.py --config=configs/probes.py:gradient_bias --workdir=runs/gradient_bias

**Updates to 90%** (`study = "credit_horizon"`). On KeyChain-v0's credit probe (k = 3,
A = 4; `segment_cue_onehot`, `distinct_rules`, `distractor_cues`, no flag, no noise) at
each T of `horizons`, a tabular softmax over the (segment, cue) contexts (`network.kind`
"tabular", zero-initialised: the uniform policy) is trained by the REINFORCE recipe
(returns-to-go, leave-one-out baseline over the `episodes` of an update, Adam `lr`) for at
most `max_updates` updates, `seeds` seeds in one vmapped program. Every `check_every`
updates each seed's **exact** success probability J comes from the DP
(`credit_jax/exact.py`): no evaluation noise. A seed's time is the first checked update
with J >= `threshold`, or censored at `max_updates`. Reported per T: seeds reaching it,
the Kaplan-Meier median and restricted mean (tau = max_updates) with bootstrap intervals,
and the local log-log slopes of the mean time between consecutive T with paired bootstrap
intervals (seeds share keys across T) (`credit_jax/experiments/survival.py`).

**Estimator bias** (`study = "gradient_bias"`). At T = `bias_horizon` on the same probe, a
fixed tabular policy (logits `bias_scale` x N(0, 1) from `seed`, plus `bias_right_logit` on
each context's right action, so J is moderate and |grad J| not tiny) and its exact
gradient g* from the DP. `bias_episodes` fresh episodes (in batches of `bias_batch`) each
give the lambda = 1 estimate g_i = sum_t (G_t - b_t) grad log pi(a_t | o_t) (G_t the
return-to-go, gamma = 1; b_t the leave-one-out mean of G_t over the batch's other
episodes: unbiased by construction, which is what the measurement checks).
Reported: the relative bias along g*, ((mean g) . u - |g*|) / |g*| with u = g* / |g*|,
with a 95% interval from the batch means (a t-interval); and the relative error norm
|mean g - g*| / |g*| beside the value noise alone would give, sqrt(tr Cov / N) / |g*|.
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Tuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.flatten_util import ravel_pytree

from credit_jax import envs, exact, nets, rollout, stats
from credit_jax.experiments import survival
from credit_jax.algos import ConfigError, make_train, reinforce, train as train_lib
from credit_jax.experiments import report

__all__ = ["STUDIES", "add_fields", "first_crossing", "gradient_bias", "horizon_markdown",
           "probe_kwargs", "reinforce_config", "run", "train_horizon"]

STUDIES = ("credit_horizon", "gradient_bias")


def first_crossing(curve, steps, level: float, smooth: int = 1
                   ) -> Tuple[np.ndarray, np.ndarray]:
  """Per seed, the first step at which a learning curve reaches `level`.

  Args:
    curve: [N, P] success (or any score) of N seeds at P evaluation points.
    steps: [P] the env steps (or updates) of those points, ascending.
    level: the threshold; smooth: trailing mean over this many points first.
  Returns:
    `(times [N], events [N])`: the step of the first point whose trailing mean reaches
    `level`, True; or the last step, False (censored) for a seed that never does.
  """
  c = np.asarray(curve, np.float64)
  s = np.asarray(steps, np.float64)
  if c.ndim != 2 or s.shape != (c.shape[1],):
    raise ValueError(f"curve must be [N, P] and steps [P], got {c.shape}, {s.shape}")
  k = max(1, int(smooth))
  csum = np.cumsum(np.pad(c, ((0, 0), (1, 0))), axis=1)
  width = np.minimum(np.arange(1, c.shape[1] + 1), k)
  trailing = (csum[:, 1:] - csum[:, np.maximum(np.arange(1, c.shape[1] + 1) - k, 0)]) / width
  hit = trailing >= level
  events = hit.any(axis=1)
  first = np.where(events, hit.argmax(axis=1), c.shape[1] - 1)
  return s[first], events


def add_fields(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The fields of both measurements (module doc), added to the probes config."""
  c.table_lr = 0.05             # Adam learning rate of the tabular policy
  c.max_updates = 3000          # credit_horizon: updates per seed at most (censoring)
  c.check_every = 5             # credit_horizon: updates between exact-J checks
  c.threshold = 0.9             # credit_horizon: exact success that counts as learned
  c.min_prob = 0.0              # tabular policy's entropy floor (network.min_prob)
  c.bias_horizon = 1000         # gradient_bias: T
  c.bias_episodes = 102_400     # gradient_bias: episodes in all
  c.bias_batch = 1024           # gradient_bias: episodes per batch (one batch mean each)
  c.bias_scale = 0.5            # gradient_bias: std of the fixed policy's logits
  c.bias_right_logit = 2.0      # gradient_bias: added to each context's right action
  return c


def probe_kwargs(config, horizon: int) -> dict:
  """KeyChain-v0 options of the credit probe at `horizon` (no reward noise)."""
  return dict(horizon=int(horizon), num_pivotal=int(config.num_pivotal),
              num_actions=int(config.num_actions), segment_cue_onehot=True,
              distinct_rules=True, distractor_cues=True, pivotal_flag=False)


def reinforce_config(config, horizon: int, num_updates: int) -> ml_collections.ConfigDict:
  """The REINFORCE recipe config: tabular policy, returns-to-go, leave-one-out mean."""
  c = reinforce.default_config()
  c.env_name = "KeyChain-v0"
  c.env_kwargs = ml_collections.ConfigDict(probe_kwargs(config, horizon))
  c.horizon, c.num_envs, c.num_updates = int(horizon), int(config.episodes), int(num_updates)
  c.credit, c.baseline = "rtg", "mean"
  c.lr = float(config.table_lr)
  c.network.kind, c.network.min_prob = "tabular", float(config.min_prob)
  c.seeds, c.seed = int(config.seeds), int(config.seed)
  c.chunk_updates, c.checkpoint_every = int(config.check_every), 0
  return c


def _validate(config) -> None:
  for f in ("max_updates", "check_every", "bias_episodes", "bias_batch"):
    if int(config[f]) < 1:
      raise ConfigError(f"config.{f}: must be >= 1, got {config[f]}")
  if int(config.bias_episodes) % int(config.bias_batch):
    raise ConfigError(f"config.bias_episodes: {config.bias_episodes} must be a multiple "
                      f"of config.bias_batch = {config.bias_batch}")
  if not 0.0 < float(config.threshold) <= 1.0:
    raise ConfigError(f"config.threshold: must lie in (0, 1], got {config.threshold}")


def _record(config, horizon, checks, curve, seconds, steps_per_update) -> dict:
  times, events = first_crossing(np.asarray(curve).T, np.asarray(checks),
                                          float(config.threshold))
  return {"horizon": int(horizon), "seeds": int(config.seeds), "checks": checks,
          "curve": curve, "times": times.tolist(), "events": events.tolist(),
          "max_updates": int(config.max_updates), "updates_run": int(checks[-1]),
          "episodes": int(config.episodes), "lr": float(config.table_lr),
          "min_prob": float(config.min_prob), "train_s": seconds,
          "env_steps_per_update": steps_per_update}


def train_horizon(config, horizon: int, log, save=None) -> dict:
  """Trains every seed at `horizon`; returns {"times", "events", "curve", "checks", ...}
  (a seed not at the threshold is censored at the last update run). `save(record)`, if
  given, receives the record so far at every progress line (a killed run keeps it)."""
  cfg = reinforce_config(config, horizon, int(config.max_updates))
  train = make_train(cfg)
  env, env_params = train_lib.make_env(cfg)
  network, _ = train_lib.make_network(cfg, env, env_params, value_head=False)
  apply = lambda p, o: network.apply(p, o)[0]   # noqa: E731
  value = jax.jit(jax.vmap(lambda p: exact.objective(env, env_params, apply, p)))
  seeds = int(config.seeds)
  keys = jax.random.split(jax.random.PRNGKey(int(config.seed)), seeds)
  hp = {k: jnp.full((seeds,), v, jnp.float32) for k, v in train.default_hparams.items()}
  state = jax.jit(jax.vmap(train.init))(keys, hp)
  every = int(config.check_every)
  program = jax.jit(jax.vmap(lambda s, h: train.run(s, h, every)))
  watch = report.Stopwatch()
  checks, curve, done = [], [], 0
  reached = np.zeros(seeds, bool)
  while done < int(config.max_updates) and not reached.all():
    state, _ = program(state, hp)
    done += every
    j = np.asarray(value(state.params), np.float64)
    checks.append(done), curve.append(j.tolist())
    reached |= j >= float(config.threshold)
    if len(checks) % 20 == 0 or reached.all():
      log(f"credit_horizon T={horizon}: update {done} | exact J min {j.min():.3f} median "
          f"{np.median(j):.3f} | {int(reached.sum())}/{seeds} at {config.threshold} | "
          f"{watch.seconds():.0f}s")
      if save is not None:
        save(_record(config, horizon, checks, curve, watch.seconds(),
                     train.env_steps_per_update))
  return _record(config, horizon, checks, curve, watch.seconds(),
                 train.env_steps_per_update)


def horizon_markdown(records: List[dict], tau: float) -> List[str]:
  """The table per T (seeds at 90%, KM median, RMST [95%]) and the local slopes."""
  rows = []
  for r in records:
    t, e = np.asarray(r["times"]), np.asarray(r["events"], bool)
    rm, lo, hi = survival.rmst_interval(t, e, tau)
    rows.append([r["horizon"], f"{int(e.sum())}/{len(e)}",
                 f"{survival.km_quantile(t, e):.0f}", f"{rm:.0f} [{lo:.0f}, {hi:.0f}]",
                 f"{t[e].min():.0f}-{t[e].max():.0f}" if e.any() else "-"])
  lines = report.table(["T", "seeds at 90%", "KM median updates", "restricted mean "
                        f"(tau {tau:.0f}) [95%]", "range (reached)"], rows) + [""]
  if len(records) > 1:
    times = np.stack([np.asarray(r["times"], np.float64) for r in records], axis=1)
    slopes = survival.local_slopes([r["horizon"] for r in records], times)
    lines += report.table(["from T", "to T", "local slope d log(mean updates) / d log T "
                           "[95%]"], [[f"{s['from']:.0f}", f"{s['to']:.0f}",
                                       f"{s['slope']:.3f} [{s['low']:.3f}, {s['high']:.3f}]"]
                                      for s in slopes]) + [""]
  return lines


def gradient_bias(config, log) -> Dict[str, float]:
  """The lambda = 1 estimator against the DP gradient (module doc); returns the figures."""
  horizon = int(config.bias_horizon)
  env, env_params = envs.make("KeyChain-v0", **probe_kwargs(config, horizon))
  network = nets.make_table_network("tabular", env, env.obs_shape, False,
                                    float(config.min_prob))
  params = network.init(jax.random.PRNGKey(0), jnp.zeros(env.obs_shape))
  params = jax.tree.map(lambda x: float(config.bias_scale) * jax.random.normal(
      jax.random.PRNGKey(int(config.seed)), x.shape), params)
  # Context (i, c) is table row 1 + i A + c (nets/tabular.py); its right action rules[i, c].
  k, a = env.num_pivotal, env.num_actions
  rows = 1 + np.arange(k)[:, None] * a + np.arange(a)[None, :]
  params = jax.tree.map(lambda x: x.at[rows.ravel(), env.rules.ravel()].add(
      float(config.bias_right_logit)), params)
  apply = lambda p, o: network.apply(p, o)[0]   # noqa: E731
  flat, unravel = ravel_pytree(params)
  j_true = float(exact.objective(env, env_params, apply, params))
  g_true = np.asarray(ravel_pytree(exact.gradient(env, env_params, apply, params))[0],
                      np.float64)
  u = g_true / np.linalg.norm(g_true)
  policy = nets.make_policy_fn(network, value=False)
  batch = int(config.bias_batch)

  def one_batch(key):
    traj = rollout.collect_episodes(env, env_params, policy, params, key, batch, horizon)
    rtg = jnp.cumsum(traj.rewards[::-1], axis=0)[::-1]            # [T, B], gamma = 1
    # Leave-one-out baseline over the batch: independent of episode i, so unbiased.
    rtg = rtg - (rtg.sum(axis=1, keepdims=True) - rtg) / (batch - 1)

    def episode_grad(obs, actions, g):                           # obs [T, D]
      def surrogate(f):
        logits = apply(unravel(f), obs)
        return jnp.sum(g * nets.categorical_log_prob(logits, actions))
      return jax.grad(surrogate)(flat)
    grads = jax.vmap(episode_grad, in_axes=(1, 1, 1))(traj.obs, traj.actions, rtg)
    success = jnp.any(traj.info["success"] & traj.valid, axis=0)
    return grads.sum(0), (grads ** 2).sum(0), grads @ jnp.asarray(u, jnp.float32), \
        success.mean()
  step = jax.jit(one_batch)
  n_batches = int(config.bias_episodes) // batch
  sums, sq, proj, succ = 0.0, 0.0, [], []
  watch = report.Stopwatch()
  for b in range(n_batches):
    s, q, p, r = jax.device_get(step(jax.random.fold_in(jax.random.PRNGKey(
        int(config.seed) + 17), b)))
    sums, sq = sums + np.asarray(s, np.float64), sq + np.asarray(q, np.float64)
    proj.append(np.asarray(p, np.float64)), succ.append(float(r))
    if (b + 1) % 10 == 0 or b + 1 == n_batches:
      log(f"gradient_bias T={horizon}: {(b + 1) * batch} episodes | {watch.seconds():.0f}s")
  n = n_batches * batch
  mean = sums / n
  cov_trace = float(np.sum(sq / n - mean ** 2))
  norm = float(np.linalg.norm(g_true))
  batch_means = np.asarray([p.mean() for p in proj]) / norm - 1.0   # relative, per batch
  est, half = stats.t_interval(batch_means)
  est, low, high = float(est), float(est - half), float(est + half)
  return {"horizon": horizon, "episodes": n, "exact_J": j_true, "sampled_success":
          float(np.mean(succ)), "grad_norm": norm, "relative_bias_along": est,
          "relative_bias_along_ci": [low, high],
          "relative_error_norm": float(np.linalg.norm(mean - g_true)) / norm,
          "noise_only_norm": float(np.sqrt(cov_trace / n)) / norm,
          "noise_norm_per_256": float(np.sqrt(cov_trace / 256)) / norm,
          "cosine": float(mean @ g_true / (np.linalg.norm(mean) * norm)),
          "wall_s": watch.seconds()}


def _write(path: str, record: dict) -> None:
  with open(path + ".tmp", "w") as f:
    json.dump(record, f)
  os.replace(path + ".tmp", path)


def run(config, workdir: str, log=print) -> dict:
  """Runs `config.study` ("credit_horizon" or "gradient_bias"); writes summary.json/.md."""
  _validate(config)
  os.makedirs(os.path.join(workdir, "cells"), exist_ok=True)
  watch = report.Stopwatch()
  if config.study == "gradient_bias":
    out = gradient_bias(config, log)
    lines = report.table(["T", "episodes", "exact J", "norm(g*)", "relative bias along "
                          "g* [95%]", "norm(mean g - g*) / norm(g*)", "noise alone would give",
                          "noise per 256 episodes", "cosine"],
                         [[out["horizon"], out["episodes"], f"{out['exact_J']:.4f}",
                           f"{out['grad_norm']:.4g}",
                           f"{out['relative_bias_along']:.3f} [{out['relative_bias_along_ci'][0]:.3f}, "
                           f"{out['relative_bias_along_ci'][1]:.3f}]",
                           f"{out['relative_error_norm']:.3f}",
                           f"{out['noise_only_norm']:.3f}",
                           f"{out['noise_norm_per_256']:.2f}", f"{out['cosine']:.3f}"]])
    summary = {"gradient_bias": out}
  else:
    records = []
    for horizon in sorted(int(t) for t in config.horizons):
      path = os.path.join(workdir, "cells", f"T{horizon}.json")
      partial = path.replace(".json", ".partial.json")
      if os.path.exists(path):
        with open(path) as f:
          records.append(json.load(f))
        continue
      if not bool(config.new_cells):   # tabulate what a stopped run saved, censored
        if os.path.exists(partial):
          with open(partial) as f:
            records.append(json.load(f))
        continue
      rec = train_horizon(config, horizon, log,
                          save=lambda r, p=partial: _write(p, r))
      _write(path, rec)
      records.append(rec)
    # Restricted means share one tau: the budget, or where a stopped run censored seeds.
    tau = min([float(config.max_updates)] + [float(r["updates_run"]) for r in records
                                              if not all(r["events"])])
    lines = horizon_markdown(records, tau)
    summary = {"records": records}
  report.write_summary(workdir, summary, "\n".join(lines + [report.wall_time(
      watch.seconds())]))
  return summary
