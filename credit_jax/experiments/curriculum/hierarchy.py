"""Part (c) of the curriculum experiment (credit_jax/experiments/curriculum/study.py): the
manager/worker recipe (credit_jax/algos/hierarchy.py) against flat GRPO and flat PPO on
one long-horizon GoalGrid task, at equal env steps.

Every method trains `seeds` seeds side by side in one compiled program; its curve is the
training success of each update (the sampled policy on the original goal: the recipes'
`success` metric) against the env steps actually taken (GRPO and the hierarchy stop an
episode at its goal; PPO's rollouts are all steps). PPO gets as many env steps as the
hierarchy's padded budget, `num_updates * num_tasks * group_size * horizon`.
"""
from __future__ import annotations

import jax
import ml_collections
import numpy as np

from credit_jax.algos import grpo, hierarchy, ppo

METHODS = ("hierarchy", "grpo", "ppo")


def default_config() -> ml_collections.ConfigDict:
  """The task and budgets of part (c); `config.c` of the curriculum experiment."""
  c = ml_collections.ConfigDict()
  c.size = 12                 # GoalGrid side; goals the four corners
  c.horizon = 120             # step limit (and rollout length)
  c.segment_length = 12       # K: manager decision every K steps
  c.extra_segment_lengths = (4,)  # the hierarchy again at each of these K ("hierarchy K=4")
  c.subgoal_stride = 4        # manager's subgoal lattice spacing
  c.num_updates = 30          # updates of the hierarchy and of flat GRPO
  c.ppo_num_envs = 16         # flat PPO: parallel envs
  c.ppo_num_steps = 60        # flat PPO: rollout steps per env and update
  c.ppo_lr = 1e-3             # flat PPO: learning rate (not annealed)
  c.methods = METHODS         # methods compared
  return c


def _env(cfg, c):
  cfg.env_name = "GoalGrid-v0"
  cfg.env_kwargs = ml_collections.ConfigDict({"size": int(c.size),
                                              "max_steps_in_episode": int(c.horizon)})
  return cfg


def method_config(config, method: str):
  """The recipe config of `method` for part (c) of `config` (the curriculum experiment's);
  "hierarchy K=<k>": the hierarchy with segment length k."""
  c, g = config.c, config.grpo
  if method.startswith("hierarchy"):
    cfg = _env(hierarchy.default_config(), c)
    k = int(method.split("=")[1]) if "=" in method else int(c.segment_length)
    cfg.segment_length, cfg.subgoal_stride = k, int(c.subgoal_stride)
  elif method == "grpo":
    cfg = _env(grpo.default_config(), c)
  elif method == "ppo":
    cfg = _env(ppo.default_config(), c)
    cfg.num_envs, cfg.num_steps = int(c.ppo_num_envs), int(c.ppo_num_steps)
    cfg.total_timesteps = int(c.num_updates) * g.num_tasks * g.group_size * int(c.horizon)
    cfg.lr, cfg.anneal_lr = float(c.ppo_lr), False
    cfg.network.hidden_sizes = tuple(g.hidden_sizes)
    cfg.seeds = int(config.seeds)
    return cfg
  else:
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")
  cfg.horizon = int(c.horizon)
  cfg.num_tasks, cfg.group_size = g.num_tasks, g.group_size
  cfg.update_epochs, cfg.num_minibatches, cfg.lr = g.update_epochs, g.num_minibatches, g.lr
  cfg.network.hidden_sizes = tuple(g.hidden_sizes)
  cfg.num_updates, cfg.seeds = int(c.num_updates), int(config.seeds)
  return cfg


def train_method(config, method: str, key):
  """`{"env_steps": [U, S] cumulative, "success": [U, S], "compiles": 1}` of `method`."""
  cfg = method_config(config, method)
  module = {"hierarchy": hierarchy, "grpo": grpo, "ppo": ppo}[method.split()[0]]
  train = module.make_train(cfg)
  _, m = jax.jit(jax.vmap(train))(jax.random.split(key, int(config.seeds)))
  m = jax.device_get(m)
  if method == "ppo":   # blocks of updates as long as one padded group update
    return ppo_blocks(m, train.env_steps_per_update,
                      cfg.total_timesteps // int(config.c.num_updates))
  if method.startswith("hierarchy"):
    steps = np.asarray(m["env_steps"])
  else:
    steps = np.asarray(m["episode_length"]) * cfg.num_tasks * cfg.group_size
  out = {"env_steps": np.cumsum(steps, axis=1).T, "success": np.asarray(m["success"]).T,
         "episode_length": np.asarray(m["episode_length"]).T, "compiles": 1}
  if method.startswith("hierarchy"):
    out["worker_success"] = np.asarray(m["worker_success"]).T
  return out


def mean_shortest_path(size: int) -> float:
  """The mean number of moves from GoalGrid-v0's start to its goal on a `size` grid
  (goal uniform over the four corners, start uniform over the other cells): the credit
  horizon an optimal flat policy faces, however long the step limit."""
  last = size - 1
  total, count = 0.0, 0
  for gr, gc in ((0, 0), (0, last), (last, 0), (last, last)):
    for r in range(size):
      for c in range(size):
        if (r, c) != (gr, gc):
          total, count = total + abs(r - gr) + abs(c - gc), count + 1
  return total / count


def diagnostics(curves, size: int, segment_length: int, level: float,
                last: int = 5) -> dict:
  """Why the manager helps or not, from part (c)'s curves: the mean shortest path
  (`mean_shortest_path`) against the segment length K; each method's mean episode
  length over its `last` updates (t-interval over seeds); per hierarchy (`hierarchies`)
  the env steps until its worker reaches `level` of its subgoals and until the pair
  reaches `level` task success (over the seeds that got there; `*_reached` counts them)."""
  # pylint: disable-next=g-import-not-at-top
  from credit_jax.experiments.curriculum import analysis as ca
  out = {"shortest_path": mean_shortest_path(size), "segment_length": segment_length,
         "episode_length": {m: ca.ci95(np.mean(cv["episode_length"][-last:], axis=0))
                            for m, cv in curves.items() if "episode_length" in cv}}
  out["hierarchies"] = {}
  for m, h in curves.items():
    if "worker_success" not in h:
      continue
    row = out["hierarchies"][m] = {}
    for name, key in (("worker", "worker_success"), ("pair", "success")):
      st = ca.steps_to_level({"env_steps": h["env_steps"], "success": h[key]}, level)
      row[f"{name}_steps_to_level"] = ca.ci95(st)
      row[f"{name}_reached"] = int(np.isfinite(st).sum())
  return out


def ppo_blocks(m, steps_per_update: int, block_steps: int):
  """PPO's curve in blocks of `b = block_steps // steps_per_update` updates: success the
  mean of the updates' `success` weighted by the episodes that ended in each (an update
  where none ended carries the previous value, so a plain mean would count it again),
  env steps at each block's end. `m`: metrics `{name: [S, U]}`."""
  b = max(1, int(block_steps) // int(steps_per_update))
  succ, eps = np.asarray(m["success"]), np.asarray(m["episodes"])
  n = succ.shape[1] // b
  succ, eps = succ[:, :n * b].reshape(-1, n, b), eps[:, :n * b].reshape(-1, n, b)
  block = np.sum(succ * eps, axis=2) / np.maximum(np.sum(eps, axis=2), 1)
  steps = np.broadcast_to(np.arange(1, n + 1) * b * float(steps_per_update), block.shape)
  return {"env_steps": steps.T.copy(), "success": block.T, "compiles": 1}


def part_c(config, key, log):
  """Trains every method of `config.c.methods`; returns `{setting: {method: curve}}`."""
  c = config.c
  curves, methods = {}, tuple(c.methods)
  if "hierarchy" in methods:
    methods += tuple(f"hierarchy K={int(k)}" for k in c.extra_segment_lengths)
  for j, method in enumerate(methods):
    curves[method] = train_method(config, method, jax.random.fold_in(key, j))
    cv = curves[method]
    log(f"(c) GoalGrid {c.size}x{c.size} T={c.horizon} {method}: final success "
        f"{cv['success'][-5:].mean():.2f} (last 5 updates) after "
        f"{cv['env_steps'][-1].mean():.3g} env steps")
  return {setting_name(c): curves}


def setting_name(c) -> str:
  """Part (c)'s one setting, `config.c`'s task: "GoalGrid 12x12 T=120 K=12"."""
  return f"GoalGrid {c.size}x{c.size} T={c.horizon} K={c.segment_length}"


def parse_setting(setting: str) -> tuple:
  """(size, segment length K) back from `setting_name`'s string (K None when absent)."""
  words = setting.split()
  k = int(words[3].split("=")[1]) if len(words) > 3 else None
  return int(words[1].split("x")[0]), k
