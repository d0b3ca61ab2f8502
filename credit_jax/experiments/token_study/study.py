"""Token agents: does RL after a supervised warm start beat more supervised training?

  python3 scripts/token_study.py --config=configs/token_study.py:small --workdir=DIR

For each number of calculator turns k (`turns`), `seeds` seeds of the token-agent recipe
(`credit_jax/algos/token_agent.py`) on ToolArith-v0 side by side (vmapped):

  1. **Warm start** (once per k, shared by every arm): supervised steps on oracle
     demonstrations of the k in `warm_turns` (default: k itself; (1, 2, 3, 4) for
     length generalisation). `warm_start = "fixed"`: `recipe.sft_steps` steps (the
     recipe's own init, so its seeds reproduce the recipe's checkpoints); "spread":
     steps in blocks of `spread_every`, each seed stopped at the first block after which
     its sampled success on training prompts reaches `spread[0]` (capped at
     `recipe.sft_steps`), so that groups of K samples are mixed.
  2. A **measurement** of the checkpoint (the "before" of every arm).
  3. Each **arm** from that checkpoint, with a fresh optimiser: the RL arms of `arms`
     (at every k) and `compare` (at `compare_turns`), `recipe.num_updates` updates
     (`ARMS` for what each name sets); and "sft", the control: more supervised steps on
     the warm start's demonstrations at `recipe.sft_lr`, as many as give at least the
     stream tokens of the most expensive RL arm at that k
     (`token_counts`: rollout, update passes, reference passes, value pass).
  4. A measurement after.

A measurement is `eval_episodes` fresh held-out episodes per seed (`split` 2; training
uses split 1), greedy (argmax) and sampled, with call accuracy, calls and the rate of
episodes that call the tool. Per RL update the records keep the recipe's diagnostics
(`CURVES`: sampled success, degenerate groups, approx_kl, clip fraction, entropy, call
rate and accuracy, lr, KL to the reference). `summary.py` turns the records into the
paired differences (after minus before, per seed; and an arm's difference minus the SFT
arm's, per seed) with t intervals over seeds.

Writes results.jsonl (one record per warm start and per (arm, k); a rerun skips finished
arms), summary.json, summary.md and paired_gain.png.
"""
from __future__ import annotations

import json
import math
import os
import time
from typing import Dict

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax.algos import token_agent, train as train_lib
from credit_jax.config import ConfigError
from credit_jax.experiments import report
from credit_jax.experiments.token_study import summary as summary_lib

RESULTS = "results.jsonl"
# The RL arms: recipe overrides on top of `config.recipe`.
ARMS = {"grpo": {"estimator": "grpo"},
        "rloo": {"estimator": "rloo"},
        "turn_grpo": {"estimator": "grpo", "turn_advantage": "pooled"},
        "ppo": {"estimator": "ppo"}}
SFT = "sft"
WARM_STARTS = ("fixed", "spread")
CURVES = ("success", "degenerate_frac", "approx_kl", "clip_frac", "entropy", "call_rate",
          "call_accuracy", "calls", "lr", "kl_ref", "value_loss")
__all__ = ["ARMS", "CURVES", "RESULTS", "SFT", "default_config", "num_seeds", "run",
           "run_arm", "summarise", "token_counts", "validate_config", "warm_start"]


def token_counts(config) -> Dict[str, int]:
  """Tokens through the model, per seed: `{"rollout", "update", "reference", "value",
  "rl_update", "sft_step"}`.

  One RL update: the rollout's `num_tasks * group_size` streams of `horizon` tokens
  (cached acting, one token at a time), `update_epochs` full passes over them in the
  minibatch steps, as many again for the reference policy when `use_reference_kl` (the
  group estimators'; PPO's loss has no reference term), and
  PPO's value pass over `horizon + 1` tokens per stream; `rl_update` is their sum. One
  supervised step: `sft_batch` demonstrations of each warm-start env, `oracle_steps`
  tokens each. Every slot of the horizon counts (the padding after an episode's end goes
  through the model too), and a separate critic trunk is not counted twice.
  """
  env, env_params = train_lib.make_env(config)
  horizon = int(env_params.max_steps_in_episode)
  streams = int(config.num_tasks) * int(config.group_size)
  passes = int(config.update_epochs) * streams * horizon
  out = {"rollout": streams * horizon, "update": passes,
         "reference": passes if config.use_reference_kl and config.estimator != "ppo" else 0,
         "value": streams * (horizon + 1) if config.estimator == "ppo" else 0}
  out["rl_update"] = sum(out.values())
  out["sft_step"] = int(config.sft_batch) * sum(int(e.oracle_steps)
                                                for e, _ in token_agent.sft_envs(config))
  return out


def default_config() -> ml_collections.ConfigDict:
  """The full study (not run on a 2-core CPU: docs/results/token_agent.md, "Budget")."""
  c = ml_collections.ConfigDict()
  c.recipe = token_agent.default_config()   # the recipe's settings for every arm
  c.recipe.num_updates = 100     # RL updates per arm after the warm start
  c.recipe.num_tasks = 32        # prompts per update
  c.recipe.group_size = 8        # K samples per prompt
  c.recipe.num_minibatches = 4   # 8 prompts per minibatch
  c.recipe.use_reference_kl = True   # KL to the warm start ...
  c.recipe.kl_coef = 0.05        # ... with this weight
  c.recipe.target_kl = 0.01      # the lr scale holds the update's approx_kl near this
  # Warm-start steps ("fixed"; the cap for "spread"): at 150 the warm start left k = 4 at
  # 0.11 held-out greedy success, at 600 at 0.68 (docs/results/token_agent.md).
  c.recipe.sft_steps = 600
  c.recipe.env_kwargs.step_index = False   # tag steps in the prompt and tool outputs
  c.turns = (8, 16)              # numbers of calculator turns k (the horizon dial)
  c.arms = ("sft", "grpo", "turn_grpo")    # arms at every k ("sft": the control)
  c.compare = ("ppo",)           # arms at compare_turns only
  c.compare_turns = (8,)
  c.warm_start = "fixed"         # fixed | spread
  c.spread = (0.3, 0.7)          # "spread": stop at sampled training success >= [0]
  c.spread_every = 50            # "spread": supervised steps between checks
  c.warm_turns = ()              # k of the warm start's demos; (): the arm's k
  c.seeds = 5                    # seeds per cell, vmapped
  c.seed = 0                     # base RNG seed
  c.eval_episodes = 256          # held-out episodes per seed and measurement
  c.chunk_updates = 25           # RL updates per compiled call (one log line each)
  return c


def num_seeds(config) -> int:
  return int(config.seeds)


def _arms(config, turns):
  arms = list(config.arms)
  if int(turns) in [int(k) for k in config.compare_turns]:
    arms += [a for a in config.compare if a not in arms]
  return arms


def validate_config(config) -> None:
  """Raises `ConfigError` naming the first field that cannot run."""
  if not config.turns or any(int(k) < 1 for k in config.turns):
    raise ConfigError(f"config.turns: must be k >= 1 each, got {config.turns}")
  for f in ("seeds", "eval_episodes", "chunk_updates", "spread_every"):
    if int(config[f]) < 1:
      raise ConfigError(f"config.{f}: must be >= 1, got {config[f]}")
  if config.recipe.num_updates % config.chunk_updates:
    raise ConfigError(f"config.chunk_updates: {config.chunk_updates} must divide "
                      f"recipe.num_updates={config.recipe.num_updates}")
  for field in ("arms", "compare"):
    for name in config[field]:
      if name != SFT and name not in ARMS:
        raise ConfigError(f"config.{field}: {name!r} is not one of {(SFT,) + tuple(ARMS)}")
  if config.warm_start not in WARM_STARTS:
    raise ConfigError(f"config.warm_start: must be one of {WARM_STARTS}, got "
                      f"{config.warm_start!r}")
  low, high = (float(x) for x in config.spread)
  if not 0.0 < low <= high <= 1.0:
    raise ConfigError(f"config.spread: must be 0 < low <= high <= 1, got {config.spread}")
  for k in config.turns:
    for arm in _arms(config, k):
      token_agent.validate_config(_recipe(config, int(k), arm))


def _recipe(config, turns, arm):
  c = ml_collections.ConfigDict(config.recipe.to_dict())
  c.env_kwargs.num_turns = int(turns)
  for key, value in ARMS.get(arm, ARMS["grpo"]).items():
    c[key] = value
  if config.warm_turns:
    c.sft_turns = tuple(int(k) for k in config.warm_turns)
  return c


def _measure(c, episodes, split=2):
  fns = [token_agent.make_evaluate(c, split=split, greedy=g, num_episodes=episodes)
         for g in (True, False)]

  def measure(params, key):
    g, s = fns[0](params, key), fns[1](params, jax.random.fold_in(key, 1))
    return {"greedy": g["success"], "sampled": s["success"],
            "call_accuracy": g["call_accuracy"], "calls": g["calls"],
            "call_rate": g["call_rate"]}
  return jax.vmap(measure)


def _counts(res, n):
  out = {k: np.round(np.asarray(res[k]) * n).astype(int).tolist()
         for k in ("greedy", "sampled")}
  out.update({k: np.asarray(res[k]).tolist() for k in ("call_accuracy", "calls",
                                                        "call_rate")})
  return out


def _keys(config, offset):
  return jax.random.split(jax.random.key(int(config.seed) + offset), int(config.seeds))


def warm_start(config, turns, log):
  """The checkpoint every arm at `turns` starts from: `(params, record)`."""
  c = _recipe(config, turns, "grpo")
  wall, cpu = time.perf_counter(), time.process_time()
  n, seeds = int(config.eval_episodes), int(config.seeds)
  per_step = token_counts(c)["sft_step"]
  if config.warm_start == "fixed":
    state = jax.jit(jax.vmap(token_agent.make_train(c).init))(_keys(config, 0))
    params, steps = state.params, np.full(seeds, int(c.sft_steps))
    spread_success = []
  else:
    fresh = ml_collections.ConfigDict(c.to_dict())
    fresh.sft_steps = 0
    train = token_agent.make_train(fresh)
    params = jax.jit(jax.vmap(train.init))(_keys(config, 0)).params
    sup, hp = train.supervised, train.default_hparams
    every = int(config.spread_every)
    train_success = _measure(c, n, split=1)

    @jax.jit
    def block(params, opt, active, key):
      keys = jax.vmap(lambda k: jax.random.split(k, every))(key)
      new_p, new_o, _ = jax.vmap(lambda p, o, k: sup.run(p, o, k, hp))(params, opt, keys)
      keep = lambda new, old: jax.tree.map(  # noqa: E731
          lambda a, b: jnp.where(active.reshape((-1,) + (1,) * (a.ndim - 1)), a, b),
          new, old)
      params = keep(new_p, params)
      return params, keep(new_o, opt), train_success(params, key)["sampled"]
    opt = jax.vmap(lambda p: sup.init(p, hp))(params)
    active = np.ones(seeds, bool)
    steps = np.zeros(seeds, int)
    spread_success = []
    key = jax.random.key(int(config.seed) + 2)
    for i in range(max(int(c.sft_steps) // every, 1)):
      if not active.any():
        break
      key, k = jax.random.split(key)
      params, opt, success = block(params, opt, jnp.asarray(active),
                                   jax.random.split(k, seeds))
      steps = steps + every * active
      success = np.asarray(success)
      spread_success.append(success.tolist())
      active = active & (success < float(config.spread[0]))
      log(f"k={turns}: warm start block {i + 1}, steps {steps.tolist()}, sampled training "
          f"success {np.round(success, 3).tolist()} ({time.perf_counter() - wall:.0f} s)")
  before = jax.device_get(jax.jit(_measure(c, n))(params, _keys(config, 1)))
  log(f"k={turns}: warm start done, held-out greedy success "
      f"{np.asarray(before['greedy']).round(3).tolist()} ({time.perf_counter() - wall:.0f} s)")
  record = {"kind": "warm_start", "turns": int(turns), "warm_start": config.warm_start,
            "warm_turns": list(c.sft_turns) or [int(turns)], "sft_steps": steps.tolist(),
            "tokens": (steps * per_step).tolist(), "spread_success": spread_success,
            "before": _counts(before, n), "seeds": seeds, "episodes_per_seed": n,
            "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}
  return params, record


def _budget(config, turns):
  """Tokens per seed of the most expensive RL arm at `turns` (the SFT arm's budget)."""
  rl = [a for a in _arms(config, turns) if a != SFT] or ["grpo"]
  return max(token_counts(_recipe(config, turns, a))["rl_update"]
             for a in rl) * int(config.recipe.num_updates)


def run_arm(config, turns, arm, params, log):
  """One arm at `turns` from the checkpoint `params` (seeds leading); its record."""
  c = _recipe(config, turns, arm)
  n, chunks = int(config.eval_episodes), c.num_updates // int(config.chunk_updates)
  train = token_agent.make_train(c)
  wall, cpu = time.perf_counter(), time.process_time()
  curves = []
  if arm == SFT:
    sup, hp = train.supervised, train.default_hparams
    budget = _budget(config, turns)
    per_chunk = math.ceil(budget / (sup.tokens_per_step * chunks))
    opt = jax.vmap(lambda p: sup.init(p, hp))(params)
    run = jax.jit(jax.vmap(lambda p, o, k: sup.run(p, o, jax.random.split(k, per_chunk),
                                                   hp)))
    base = _keys(config, 3)
    for i in range(chunks):
      keys = jax.vmap(lambda k, i=i: jax.random.fold_in(k, i))(base)
      params, opt, (loss, acc) = run(params, opt, keys)
      curves.append({"sft_loss": np.asarray(loss).mean(0), "sft_accuracy":
                     np.asarray(acc).mean(0)})
      log(f"sft k={turns}: step {(i + 1) * per_chunk}/{chunks * per_chunk}, token accuracy "
          f"{np.asarray(acc)[:, -1].mean():.3f} ({time.perf_counter() - wall:.0f} s)")
    tokens, updates = chunks * per_chunk * sup.tokens_per_step, chunks * per_chunk
  else:
    state = jax.jit(jax.vmap(train.from_params))(params, _keys(config, 4))
    step = jax.jit(jax.vmap(lambda s: train.run(s, None, int(config.chunk_updates))))
    for i in range(chunks):
      state, m = step(state)
      m = jax.device_get(m)
      curves.append({k: np.asarray(m[k]).mean(0) for k in CURVES if k in m})
      log(f"{arm} k={turns}: update {(i + 1) * int(config.chunk_updates)}/{c.num_updates},"
          f" sampled success {m['success'][:, -1].mean():.3f}, approx_kl "
          f"{m['approx_kl'][:, -1].mean():.4f}, lr {m['lr'][:, -1].mean():.2e} "
          f"({time.perf_counter() - wall:.0f} s)")
    params = state.params
    tokens = token_counts(c)["rl_update"] * c.num_updates
    updates = c.num_updates
  after = jax.device_get(jax.jit(_measure(c, n))(params, _keys(config, 1)))
  record = {"kind": "arm", "arm": arm, "turns": int(turns), "seeds": int(config.seeds),
            "episodes_per_seed": n, "updates": int(updates), "tokens": int(tokens),
            "tokens_per_update": token_counts(c),
            "after": _counts(after, n), "wall_s": time.perf_counter() - wall,
            "cpu_s": time.process_time() - cpu,
            "curves": {k: np.concatenate([x[k] for x in curves]).tolist()
                       for k in curves[0]}}
  return record


def _read(path):
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def run(config, workdir: str, log=print):
  validate_config(config)
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, RESULTS)
  watch = report.Stopwatch()
  for turns in (int(k) for k in config.turns):
    records = _read(path)
    done = {r["arm"] for r in records if r["kind"] == "arm" and r["turns"] == turns}
    todo = [a for a in _arms(config, turns) if a not in done]
    for a in done:
      log(f"{a} k={turns}: already in {RESULTS}, skipped")
    if not todo:
      continue
    params, warm = warm_start(config, turns, log)
    if not any(r["kind"] == "warm_start" and r["turns"] == turns for r in records):
      _append(path, warm)
    for arm in todo:
      _append(path, run_arm(config, turns, arm, params, log))
  return summarise(config, workdir, _read(path), watch.seconds())


def _append(path, record):
  with open(path, "a") as f:
    f.write(json.dumps(record) + "\n")


def summarise(config, workdir, records, seconds):
  """summary.json, summary.md and paired_gain.png from the records."""
  return summary_lib.summarise(config, workdir, records, seconds)
