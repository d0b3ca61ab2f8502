"""Experiment: learned credit (RUDDER, HCA, COCOA) against GRPO and PPO + GAE.

Two parts, both on environments with ground truth:

  * **learning** (`config.cells`): each method trained on KeyChain-v0 (the horizon
    study's k and A, cues at the step) at each T of `horizons`, and on the linear
    key-to-door at each L of `lengths`, `seeds` seeds vmapped, `episodes` whole
    episodes per update and `updates` updates for every method: equal env steps
    (`updates * episodes * T` per seed; nothing else steps the environment). After
    training, each seed's policy is evaluated on `eval_episodes` fresh episodes by the
    task's own success (KeyChain: reward 1; the corridor: the treasure, `info["success"]`,
    not a positive return, which apples give). Reported per cell: the final success of
    each seed with a Wilson interval over the pooled episodes, the updates each seed took
    to a training success of `level` (censored at `updates`), wall time.
  * **gradients** (`config.probe`): at a fixed memoryless policy that answers each
    pivotal step right with probability `probe.q` (success q^k), the single-episode
    gradients of REINFORCE, RUDDER (its predictor trained on `probe.fit_updates` batches
    of that policy's episodes), HCA and COCOA (exact, from KeyChain's dynamics, and
    learned the same way) against KeyChain's exact gradient: relative bias, noise, SNR,
    cosine and the share of credit on the pivotal steps (`probe.py`).

Methods, every one a recipe of credit_jax/algos with the registry's features
(`credit_jax/addons/features.py`): "reinforce" (returns-to-go with a leave-one-out
baseline), "rudder" (REINFORCE on the redistributed rewards), "rudder_ppo" (PPO on whole
episodes, `rollout = "episodes"`, + GAE over them, lambda 0.95, 2 full-batch epochs),
"hca", "cocoa" (REINFORCE with their credit), "grpo_k8" and "ppo_mlp_g1_l0.95" (configured
as the horizon study configures them, `experiments/methods.py`).
"""
from __future__ import annotations

import time
from typing import Callable, Dict

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax import envs, nets, rollout, stats
from credit_jax.addons import hindsight_credit, rudder
from credit_jax.algos import make_train as recipe_train, ppo, reinforce, train as train_lib
from credit_jax.experiments import report
from credit_jax.experiments import methods as horizon_methods
from credit_jax.experiments.report import updates_to_level
from credit_jax.experiments.learned_credit import probe as learned_probe

__all__ = ["METHODS", "cell_config", "default_config", "episode_success", "evaluate",
           "num_seeds", "probe_gradients", "run", "run_cell", "validate_config"]

LEARNED_METHODS = ("reinforce", "rudder", "rudder_ppo", "hca", "cocoa")
RECIPE_METHODS = ("grpo_k8", "ppo_mlp_g1_l0.95")
METHODS = LEARNED_METHODS + RECIPE_METHODS


def default_config() -> ml_collections.ConfigDict:
  """The measurement of docs/results/learned_credit.md; every field commented."""
  c = ml_collections.ConfigDict()
  c.seeds = 5                     # seeds per cell (vmapped)
  c.seed = 0                      # base RNG seed
  c.num_pivotal, c.num_actions = 3, 4   # KeyChain's k and A (random success 1/64)
  c.episodes = 32                 # episodes per update, every method
  c.hidden_sizes = (64, 64)       # every policy's MLP
  c.methods = METHODS             # see the module doc
  c.cells = ("keychain:100", "lktd:103")  # env:T cells of the learning part
  c.updates = 60                  # updates per seed and cell (equal env steps)
  c.level = 0.9                   # training success counted as solved
  c.eval_episodes = 256           # fresh episodes per seed for the final success
  c.lrs = ml_collections.ConfigDict({"program": 1e-2, "hca": 3e-3, "grpo": 3e-3,
                                     "ppo": 3e-3})   # the lr of each family
  c.lktd_ent_coef = 0.01          # entropy bonus of every method on the corridor
  c.lktd_updates = 200            # updates per seed on the corridor (every method)
  c.lktd_lr = 1e-3                # lr of every method on the corridor (faster rates
                                  # collapse the key cell onto the apples' actions)
  c.probe = ml_collections.ConfigDict()
  c.probe.horizons = (100, 1000)  # KeyChain T of the gradient part ( () : skip it)
  c.probe.q = 0.5                 # the probe policy's chance per pivotal step
  c.probe.episodes = 256          # single-episode gradients per estimate
  c.probe.fit_updates = 60        # batches the learned models train on first
  c.probe.fit_episodes = 32       # episodes per such batch
  return c


def num_seeds(config) -> int:
  return int(config.seeds)


def validate_config(config) -> None:
  unknown = [m for m in config.methods if m not in METHODS]
  if unknown:
    raise ValueError(f"config.methods: unknown {unknown}; known: {METHODS}")
  for cell in config.cells:
    env, _, size = str(cell).partition(":")
    if env not in ("keychain", "lktd") or not size.isdigit():
      raise ValueError(f"config.cells: {cell!r} must be keychain:<T> or lktd:<L>")


def cell_config(method: str, env: str, size: int, config) -> ml_collections.ConfigDict:
  """The config of `method` on cell (`env`, `size`), at the study's budget."""
  if method in RECIPE_METHODS:
    spec = ml_collections.ConfigDict({
        "episodes": config.episodes, "num_pivotal": config.num_pivotal,
        "num_actions": config.num_actions, "hidden_sizes": config.hidden_sizes,
        "seeds": config.seeds, "seed": config.seed, "chunk_updates": config.updates})
    family = "grpo" if method.startswith("grpo") else "ppo"
    c = horizon_methods.recipe_config(method, size, spec, config.lrs[family],
                                      config.updates)
  else:
    c = _learned_config(method, int(config.episodes), size, int(config.updates))
    c.lr = float(config.lrs["hca" if method == "hca" else "program"])
    c.network.hidden_sizes = tuple(config.hidden_sizes)
    c.env_kwargs = ml_collections.ConfigDict(
        {"horizon": size, "num_pivotal": int(config.num_pivotal),
         "num_actions": int(config.num_actions), "cue_delay": 0})
  if env == "lktd":
    c.env_name = "LinearKeyToDoor-v0"
    c.env_kwargs = ml_collections.ConfigDict({"length": size})
    c.ent_coef, c.lr = float(config.lktd_ent_coef), float(config.lktd_lr)
    if c.algo == "ppo":
      c.num_steps = size
    else:
      c.horizon = size
  return c


def _learned_config(method: str, episodes: int, size: int, updates: int):
  """REINFORCE (returns-to-go, leave-one-out baseline, gamma 1) with the method's
  feature, or for "rudder_ppo" PPO on whole episodes (GAE lambda 0.95, 2 full-batch
  epochs, no value clip, no annealing, gradient norm 1) with RUDDER."""
  if method == "rudder_ppo":
    c = ppo.default_config()
    c.rollout, c.num_envs, c.num_steps = "episodes", episodes, size
    c.total_timesteps = updates * episodes * size
    c.update_epochs, c.num_minibatches, c.clip_value_loss = 2, 1, False
    c.gamma, c.gae_lambda, c.ent_coef, c.anneal_lr, c.max_grad_norm = \
        1.0, 0.95, 0.0, False, 1.0
    c.chunk_updates = 25
    train_lib.checkpoint_at_end(c)
  else:
    c = reinforce.default_config()
    c.num_envs, c.num_updates, c.horizon = episodes, updates, size
  c.env_name = "KeyChain-v0"
  if method.startswith("rudder"):
    rudder.add_config(c)
  if method in ("hca", "cocoa"):
    hindsight_credit.add_config(c, method)
  return c


def episode_success(traj) -> jax.Array:
  """[B] float: each episode's success (`info["success"]` at any valid step where the
  env reports it, else a positive return)."""
  info = traj.info if isinstance(traj.info, dict) else {}
  if "success" in info:
    return jnp.any(info["success"] & traj.valid, axis=0).astype(jnp.float32)
  return (jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), 0) > 0).astype(jnp.float32)


def _network(cfg):
  env, env_params = train_lib.make_env(cfg)
  value = cfg.algo == "ppo" or (cfg.algo == "reinforce" and reinforce.needs_value(cfg))
  network, _ = train_lib.make_network(cfg, env, env_params, value_head=value)
  return env, env_params, network


def evaluate(cfg, params, key, episodes: int):
  """([S] each seed's success on `episodes` fresh episodes (`episode_success`),
  [S] the share of their pivotal steps answered right: the corridor's key)."""
  env, env_params, network = _network(cfg)
  policy = nets.make_policy_fn(network)
  horizon = int(env.horizon)

  def one(p, k):
    traj = rollout.collect_episodes(env, env_params, policy, p, k, int(episodes), horizon)
    piv = traj.info["pivotal"] & traj.valid
    right = jnp.sum(traj.info["correct"] & piv) / jnp.maximum(jnp.sum(piv), 1)
    return episode_success(traj).mean(), right

  seeds = jax.tree.leaves(params)[0].shape[0]
  success, right = jax.jit(jax.vmap(one))(params, jax.random.split(key, seeds))
  return np.asarray(success), np.asarray(right)


def run_cell(method: str, env: str, size: int, config, log: Callable) -> Dict:
  cfg = cell_config(method, env, size, config)
  if env == "lktd":
    cfg.num_updates = int(config.lktd_updates)
    if cfg.algo == "ppo":
      cfg.total_timesteps = int(config.lktd_updates) * int(config.episodes) * size
  train = recipe_train(cfg)
  keys = jax.random.split(jax.random.key(int(config.seed)), int(config.seeds))
  t0 = time.time()
  state, metrics = jax.jit(jax.vmap(train))(keys)
  jax.block_until_ready(metrics)
  train_s = time.time() - t0
  final, right = evaluate(cfg, state.params, jax.random.key(int(config.seed) + 1),
                          int(config.eval_episodes))
  n = int(config.eval_episodes) * final.size
  lo, hi = stats.wilson_interval(int(round(final.sum() * config.eval_episodes)), n)
  success = np.asarray(metrics["success"]).T                         # [U, S]
  updates, censored = updates_to_level(success, float(config.level), 3)
  if env == "lktd" and method in RECIPE_METHODS:
    # The recipes count a positive return as success, which the corridor's apples give.
    updates, censored = np.zeros(0, int), np.zeros(0, bool)
  out = {"method": method, "env": env, "size": size, "final": final.tolist(),
         "final_mean": float(final.mean()), "wilson": [float(lo), float(hi)],
         "pivotal_right": float(right.mean()),
         "updates_to_level": updates.tolist(), "censored": censored.tolist(),
         "env_steps_per_seed": int(train.env_steps_per_update * train.num_updates),
         "wall_s": round(train_s, 1)}
  if env == "lktd":
    out["return_mean"] = float(np.asarray(metrics["return"])[:, -5:].mean())
  for k in ("rudder_pivotal_share", "rudder_explained", "hca_credit_mass_pivotal",
            "cocoa_credit_mass_pivotal"):
    if k in metrics:
      last = np.asarray(metrics[k])[:, -5:]
      out[k] = float(np.nanmean(last)) if np.isfinite(last).any() else float("nan")
  log(f"{method} {env}:{size}: final {out['final_mean']:.3f} [{lo:.3f}, {hi:.3f}] "
      f"pivotal right {out['pivotal_right']:.3f}, solved {int((~censored).sum())}/"
      f"{censored.size}, {train_s:.0f} s")
  return out


def _probe_actor(num_actions: int, q: float):
  """A memoryless linear actor on KeyChain observations answering right with prob q:
  logits = beta * cue one-hot (0 at distractor steps)."""
  beta = float(np.log(q * (num_actions - 1) / (1.0 - q)))
  w = np.zeros((num_actions + 2, num_actions), np.float32)
  w[:num_actions] = beta * np.eye(num_actions)
  return (jnp.asarray(w), jnp.zeros((num_actions,), jnp.float32))


def _linear_logits(params, obs):
  w, b = params
  return obs @ w + b


def probe_gradients(horizon: int, config, log: Callable) -> Dict:
  """The gradient part (module doc) at KeyChain T = `horizon`."""
  p = config.probe
  env, env_params = envs.make("KeyChain-v0", horizon=horizon,
                              num_pivotal=int(config.num_pivotal),
                              num_actions=int(config.num_actions))
  a = int(config.num_actions)
  actor = _probe_actor(a, float(p.q))
  obs_size = a + 2
  collect = jax.jit(lambda k, n: learned_probe.collect(env, env_params, _linear_logits,
                                                       actor, k, n), static_argnums=1)
  t0 = time.time()
  rd_model = rudder.Rudder(rudder.add_config(ml_collections.ConfigDict()).rudder, a,
                           obs_size, horizon)
  cfgs = {k: hindsight_credit.add_config(ml_collections.ConfigDict(), k)[k]
          for k in ("hca", "cocoa")}
  models = {k: hindsight_credit.Hindsight(k, cfgs[k], a, obs_size, (1.0,)) for k in cfgs}
  carries = {"rudder": rd_model.init(jax.random.key(1)),
             **{k: m.init(jax.random.key(2)) for k, m in models.items()}}

  @jax.jit
  def fit(carries, key, u):
    traj = collect(key, int(p.fit_episodes))
    cols = rudder.columns_of(traj, a, True)
    _, c_r, _ = rd_model.step(carries["rudder"], cols, 3e-3, 0.5, key, u)
    logits = _linear_logits(actor, traj.obs)
    out = {"rudder": c_r}
    for k, m in models.items():
      out[k] = m.train(carries[k], traj, 1.0, float(cfgs[k].lr), key, logits)[0]
    return out

  for u in range(int(p.fit_updates)):
    carries = fit(carries, jax.random.key(100 + u), u)
  fit_s = time.time() - t0
  traj = collect(jax.random.key(7), int(p.episodes))
  rows = {}
  for name, kw in (("reinforce", {}),
                   ("rudder", {"rudder": rd_model,
                               "rudder_params": carries["rudder"]["rudder_params"]}),
                   ("rudder_r", {"rudder": rd_model,
                                 "rudder_params": carries["rudder"]["rudder_params"]}),
                   ("hca_exact", {}), ("cocoa_exact", {}),
                   ("hca", {"hindsight": models["hca"],
                            "hindsight_params": carries["hca"]["hca_params"]}),
                   ("cocoa", {"hindsight": models["cocoa"],
                              "hindsight_params": carries["cocoa"]["cocoa_params"]})):
    method = name if name == "rudder_r" else name.split("_")[0]
    credit = learned_probe.credit_of(method, traj, _linear_logits, actor, env=env, **kw)
    s = learned_probe.estimator_stats(env, _linear_logits, actor, traj, credit)
    rows[name] = {k: float(v) for k, v in s.items()}
  log(f"probe T = {horizon}: " + ", ".join(
      f"{k} snr {v['snr']:.3g} bias {v['bias']:.2f} pivotal {v['credit_on_pivotal']:.2f}"
      for k, v in rows.items()) + f" ({time.time() - t0:.0f} s, fit {fit_s:.0f} s)")
  return {"horizon": horizon, "rows": rows, "wall_s": round(time.time() - t0, 1)}


def _solved(r) -> str:
  if not r["censored"]:
    return "n/a"
  return f"{sum(not c for c in r['censored'])}/{len(r['censored'])}"


def _markdown(summary) -> str:
  lines = ["| cell | method | final success (seeds) | Wilson 95% | pivotal right | solved "
           "| env steps | wall s |", "|---|---|---|---|---|---|---|---|"]
  for r in summary["cells"]:
    lines.append(f"| {r['env']}:{r['size']} | {r['method']} | {r['final_mean']:.3f} "
                 f"({', '.join(f'{x:.2f}' for x in r['final'])}) | "
                 f"[{r['wilson'][0]:.3f}, {r['wilson'][1]:.3f}] | {r['pivotal_right']:.3f} | "
                 f"{_solved(r)} | "
                 f"{r['env_steps_per_seed']:,} | {r['wall_s']} |")
  for p in summary["probe"]:
    lines += ["", f"Gradients at T = {p['horizon']}:", "",
              "| estimator | SNR | rel. bias | noise | cosine (debiased) | credit on pivotal |",
              "|---|---|---|---|---|---|"]
    for k, v in p["rows"].items():
      lines.append(f"| {k} | {v['snr']:.3g} | {v['bias']:.3f} | {v['noise']:.3f} | "
                   f"{v['cosine_debiased']:.3f} | {v['credit_on_pivotal']:.3f} |")
  return "\n".join(lines) + "\n"


def run(config, workdir: str, log=print) -> dict:
  """Runs both parts; writes summary.json and summary.md into `workdir`."""
  validate_config(config)
  summary = {"cells": [], "probe": []}
  for cell in config.cells:
    env, _, size = str(cell).partition(":")
    for method in config.methods:
      summary["cells"].append(run_cell(method, env, int(size), config, log))
      report.write_summary(workdir, summary, _markdown(summary))
  for horizon in config.probe.horizons:
    summary["probe"].append(probe_gradients(int(horizon), config, log))
    report.write_summary(workdir, summary, _markdown(summary))
  return summary
