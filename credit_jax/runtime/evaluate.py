"""Evaluating a trained run: restore a checkpoint, measure its policy on fresh keys.

`evaluate_run(workdir)` is everything `scripts/evaluate.py` does:

1. rebuild the run's config from `workdir/checkpoints/config.json` and its recipe's
   `Train` (an env named "pkg.module:Class" is imported; one registered by name must be
   registered first, e.g. by `imports`);
2. restore one checkpoint: `latest` (the newest in `checkpoints/`), `best` (the one kept
   in `checkpoints_best/` by the run's best metric, see credit_jax/runtime/run.py) or an
   update number (from either directory);
3. for every seed of the run and each policy asked for, the sampled one and the greedy
   one (`train.eval_policy(params, greedy)`, the recipe's acting policy for one seed's
   `TrainState.params`), run `episodes` fresh episodes with
   `credit_jax.rollout.collect_episodes` from keys independent of training's (from
   `seed`), each up to `max_steps` steps;
4. report per seed and pooled: success (where the env defines it,
   `credit_jax.envs.success.episode_success`) with its 95% Wilson interval, the mean
   return with its 95% t-interval over episodes, the mean episode length and the
   fraction of episodes that ended within `max_steps` (one that did not counts as a
   failure); print the table, then write them as JSON and return them.

Where the JSON goes: `output` if given (an existing file there is replaced), else a new
file per checkpoint evaluated, `workdir/eval/<which>_update<N>.json` (`latest_update120
.json`, `best_update96.json`, ...; `..._2.json` and so on when that name is taken), so
no evaluation overwrites another. When it cannot be written (a read-only workdir, a full
disk), the table has been printed already: the default file is skipped with a line
saying where it could not write (the evaluation itself succeeded: exit status 0), while
an explicit `output` that cannot be written is an error (`OutputError`, exit status 5:
the caller asked for that file).

The policy comes from the recipe's `Train` (`env`, `env_params`, `eval_policy`); for a
sequence network (`config.network.kind` "gru" / "transformer": PPO, GRPO, REINFORCE)
it is built here from the config when the `Train` does not carry it: the same network
(`algos.train.make_network`) on the config's environment, sampling as training
does or (greedy) taking the most probable action, its memory carried by the rollout
engine. Every built-in recipe is covered: the MLP / tabular / linear policies of PPO
(its own value head or a critic of its own, `algos/ppo_agent.py`), GRPO, REINFORCE,
search_then_train, grpo_relabel (on its env's own goals) and hierarchy (manager and
worker; greedy: both take their most probable choice); token_agent's LM on the run's own
task split; DQN, whose greedy policy is argmax Q and whose sampled one is epsilon-greedy
at `config.epsilon` (constant over a run, so its final epsilon) on the env's own goals.
A `Train` without them (a `make_train` of one's own) is refused in one line
(`ConfigError`).
"""
from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax import algos, envs, rollout, stats
from credit_jax.algos import train as train_lib
from credit_jax.nets import sequence as sequence_nets
from credit_jax.runtime import checkpoint as ckpt_lib
from credit_jax.runtime import run as run_lib
from credit_jax.types import SequencePolicy

EVAL_DIR = "eval"
_MAX_DEFAULT_STEPS = 100_000   # an env time limit above this is no episode length


class OutputError(OSError):
  """An explicit `output` path could not be written (the table was printed)."""


def _default_output(workdir: str, which: str, step: int) -> str:
  """A path under `workdir/eval/` no earlier evaluation used, for checkpoint `which`."""
  name = f"{which}_update{int(step)}" if which in ("latest", "best") else f"update{int(step)}"
  stem = os.path.join(workdir, EVAL_DIR, name)
  path, n = stem + ".json", 1
  while os.path.exists(path):
    n += 1
    path = f"{stem}_{n}.json"
  return path


def _write_json(path: str, obj: Any) -> None:
  """Writes `obj` to `path` through a temporary file (no half-written file is left)."""
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  tmp = path + ".tmp"
  try:
    with open(tmp, "w") as f:
      json.dump(obj, f, indent=2)
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp) and not os.path.isdir(tmp):
      os.remove(tmp)


def _greedy_sequence_policy(network) -> SequencePolicy:
  """The sequence policy that takes the most probable action (zero Gumbel noise: argmax),
  `log_prob` that action's under the policy."""
  sampled = sequence_nets.make_sequence_policy(network, value=False)
  num_actions = int(network.num_actions)
  return SequencePolicy(initial_carry=sampled.initial_carry, act=sampled.act,
                        draw=lambda key: jnp.zeros((num_actions,), jnp.float32))


def evaluation(train, config) -> Tuple[Any, Any, Callable]:
  """`(env, env_params, eval_policy)` for `train`: its own (`train_lib.EVALUATION`), or
  for a sequence network one built from `config` (module doc); ConfigError otherwise."""
  if all(hasattr(train, a) for a in train_lib.EVALUATION):
    return train.env, train.env_params, train.eval_policy
  kind = str((config.get("network") or {}).get("kind", ""))
  if kind in sequence_nets.KINDS:
    env, env_params = train_lib.make_env(config)
    network, _ = train_lib.make_network(config, env, env_params, value_head=True)
    sampled = sequence_nets.make_sequence_policy(network, value=False)
    greedy_policy = _greedy_sequence_policy(network)
    return env, env_params, lambda params, greedy=False: (
        greedy_policy if greedy else sampled, params)
  net = config.get("network") or {}
  what = ", ".join(f"network.{k}={net[k]!r}" for k in ("kind", "critic_kind") if k in net)
  raise algos.ConfigError(
      f"recipe {config.algo!r}{f' ({what})' if what else ''} does not provide "
      f"train.eval_policy / train.env / train.env_params, which evaluation needs "
      f"(every built-in recipe's Train does, train_lib.attach_evaluation; a GRU or "
      f"transformer policy without them is built from network.kind here)")


def _tuples(x):
  """JSON lists back to the tuples configs hold."""
  if isinstance(x, dict):
    return {k: _tuples(v) for k, v in x.items()}
  if isinstance(x, list):
    return tuple(_tuples(v) for v in x)
  return x


def load_config(workdir: str) -> ml_collections.ConfigDict:
  """The config a run in `workdir` was trained with (ConfigError if there is none)."""
  path = os.path.join(workdir, run_lib.CHECKPOINT_DIR, ckpt_lib.CONFIG_FILE)
  if not os.path.isdir(workdir):
    raise algos.ConfigError(f"--workdir {workdir}: no such directory")
  if not os.path.exists(path):
    raise algos.ConfigError(f"--workdir {workdir} holds no training run ({path} is "
                            f"missing); pass the --workdir scripts/train.py wrote")
  with open(path) as f:
    return ml_collections.ConfigDict(_tuples(json.load(f)))


def _checkpoint_dir(workdir: str, which: str) -> Tuple[str, int]:
  """`(directory, step)` of checkpoint `which` ("latest", "best" or an update number)."""
  main = os.path.join(workdir, run_lib.CHECKPOINT_DIR)
  best_dir = os.path.join(workdir, run_lib.BEST_DIR)

  def steps(d):
    return sorted(int(n) for n in os.listdir(d) if n.isdigit()) if os.path.isdir(d) else []
  if which == "latest":
    if not steps(main):
      raise algos.ConfigError(f"--checkpoint=latest: {main} holds no checkpoint")
    return main, steps(main)[-1]
  if which == "best":
    best = ckpt_lib.read_best(best_dir)
    if best is None:
      raise algos.ConfigError(
          f"--checkpoint=best: {best_dir} holds no best checkpoint (runs keep one by "
          f"config.best_metric); use --checkpoint=latest or an update of {steps(main)}")
    return best_dir, int(best["step"])
  if not str(which).isdigit():
    raise algos.ConfigError(f"--checkpoint={which}: use latest, best or an update number")
  step = int(which)
  for d in (main, best_dir):
    if step in steps(d):
      return d, step
  raise algos.ConfigError(f"--checkpoint={step}: no checkpoint of that update; have "
                          f"{sorted(set(steps(main)) | set(steps(best_dir)))}")


def restore(workdir: str, train, config, which: str = "latest"):
  """`(state, step, directory)`: checkpoint `which` of the run, every seed
  (`TrainState` leaves with a leading seed axis)."""
  directory, step = _checkpoint_dir(workdir, which)
  init, _ = run_lib.make_run_fns(train)
  keys = jax.ShapeDtypeStruct((int(config.seeds), 2), np.uint32)
  target = jax.eval_shape(init, keys, train.default_hparams)
  with ckpt_lib.Checkpointer(directory, max_to_keep=max(1, int(config.keep_checkpoints))
                             ) as ckpt:
    try:
      state = ckpt.restore(step, target)
    except Exception as e:  # pylint: disable=broad-except  # orbax raises many types
      raise ckpt_lib.CheckpointError(
          f"checkpoint of update {step} in {directory} does not restore "
          f"({ckpt_lib._reason(e)})") from None  # pylint: disable=protected-access
  return state, step, directory


def _max_steps(config, env_params, max_steps: Optional[int]) -> int:
  if max_steps is not None:
    if int(max_steps) < 1:
      raise algos.ConfigError(f"--max_steps must be >= 1, got {max_steps}")
    return int(max_steps)
  limit = getattr(env_params, "max_steps_in_episode", None)
  try:
    limit = int(limit)
  except (TypeError, ValueError):
    limit = None
  if limit is not None and 1 <= limit <= _MAX_DEFAULT_STEPS:
    return limit
  if config.get("horizon") is not None:
    return int(config.horizon)
  raise algos.ConfigError("the env has no time limit to stop episodes at; pass "
                          "--max_steps=N")


def _summaries(success, returns, lengths, ended) -> Dict[str, Any]:
  n = int(returns.size)
  mean_ret, half = stats.t_interval(returns)
  out = {"episodes": n, "return": float(mean_ret),
         "return_ci95": [float(mean_ret - half), float(mean_ret + half)] if n > 1 else None,
         "length": float(np.mean(lengths)), "ended": float(np.mean(ended))}
  if success is not None:
    k = int(np.sum(success))
    low, high = stats.wilson_interval(k, n)
    out.update(success=k / n, successes=k, success_ci95=[low, high])
  return out


def _evaluate_params(train, params, key: jax.Array, episodes: int, greedy: bool,
                    max_steps: int, collect: Optional[Dict] = None) -> Dict[str, np.ndarray]:
  """Per-episode arrays of one seed's `params` under its sampled or greedy policy:
  `success` [E] bool (or None), `return` [E], `length` [E] int, `ended` [E] bool.

  `collect` caches the compiled collection per policy kind across seeds.
  """
  env, env_params, eval_policy = evaluation(train, train.config)
  policy, policy_params = eval_policy(params, greedy=greedy)
  cache = {} if collect is None else collect
  if greedy not in cache:
    cache[greedy] = jax.jit(lambda pp, k: rollout.collect_episodes(
        env, env_params, policy, pp, k, int(episodes), int(max_steps)))
  traj = cache[greedy](policy_params, key)
  valid = traj.valid
  ended = jnp.any(jnp.logical_and(valid, traj.dones), axis=0)
  success = envs.success.episode_success(train.config.env_name, env, traj.rewards,
                                         traj.terminated, valid, traj.info)
  out = {"return": jnp.sum(jnp.where(valid, traj.rewards, 0.0), axis=0),
         "length": jnp.sum(valid.astype(jnp.int32), axis=0), "ended": ended,
         "success": None if success is None else jnp.logical_and(success, ended)}
  return jax.device_get(out)


def _import_all(modules: Sequence[str]) -> None:
  for name in modules:
    try:
      importlib.import_module(name)
    except ImportError as e:
      raise algos.ConfigError(f"--imports: cannot import {name!r} ({e})") from None


def evaluate_run(workdir: str, checkpoint: str = "latest", episodes: int = 256,
                 greedy: Optional[bool] = None, seed: int = 0,
                 max_steps: Optional[int] = None, imports: Sequence[str] = (),
                 make_train: Optional[Callable] = None,
                 output: Optional[str] = None,
                 log: Callable[[str], None] = print,
                 warn: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
  """Evaluates the run in `workdir` (see the module docstring); returns the JSON's dict
  (its key "written_to": the file written, or None where it could not be).

  Args:
    checkpoint: "latest", "best" or an update number.
    episodes: fresh episodes per seed and policy.
    greedy: None measures the sampled and the greedy policy; True only the greedy one,
      False only the sampled one.
    seed: the evaluation's RNG seed (its keys are independent of training's).
    max_steps: steps an episode may take (default the env's time limit, else
      `config.horizon`).
    imports: modules to import first (ones that register the run's environment).
    make_train: builds the recipe's `Train` from the config (default
      `credit_jax.algos.make_train`).
    output: where to write the JSON (default: a new file under `workdir/eval/`).
    log: gets the table; warn: the line saying where the JSON could not be written
      (default: stderr).
  Raises:
    ConfigError: no run or checkpoint there, bad arguments, or a recipe without
      `eval_policy`. CheckpointError: the checkpoint does not restore. OutputError: an
      explicit `output` could not be written (after the table was logged).
  """
  if int(episodes) < 1:
    raise algos.ConfigError(f"--episodes must be >= 1, got {episodes}")
  _import_all(imports)
  workdir = os.path.abspath(workdir)
  config = load_config(workdir)
  try:
    envs.resolve(config.env_name)
  except ValueError as e:
    raise algos.ConfigError(f"config.env_name: {e} (register it with --imports=MODULE)"
                            ) from None
  _checkpoint_dir(workdir, checkpoint)   # a bad --checkpoint before anything is built
  train = (make_train or algos.make_train)(config)
  _, env_params, _ = evaluation(train, config)   # a recipe without a policy: refused here
  state, step, directory = restore(workdir, train, config, checkpoint)
  steps = _max_steps(config, env_params, max_steps)
  modes = [False, True] if greedy is None else [bool(greedy)]
  rule = envs.success.rule_for(config.env_name)
  results: Dict[str, Any] = {}
  cache: Dict = {}
  for g in modes:
    name = "greedy" if g else "sampled"
    per_seed, pooled = [], {k: [] for k in ("success", "return", "length", "ended")}
    for i in range(int(config.seeds)):
      params = jax.tree.map(lambda x, i=i: x[i], state.params)
      key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(int(seed)),
                                                  0x45564C), 2 * i + int(g))
      ep = _evaluate_params(train, params, key, episodes, g, steps, cache)
      per_seed.append({"seed": i, **_summaries(ep["success"], ep["return"], ep["length"],
                                               ep["ended"])})
      for k in pooled:
        pooled[k].append(ep[k])
    has = pooled["success"][0] is not None
    results[name] = {"seeds": per_seed, "all": _summaries(
        np.concatenate(pooled["success"]) if has else None,
        *(np.concatenate(pooled[k]) for k in ("return", "length", "ended")))}
  summary = {
      "workdir": workdir, "algo": config.algo, "env_name": config.env_name,
      "checkpoint": {"which": str(checkpoint), "update": int(step),
                     "directory": directory},
      "episodes_per_seed": int(episodes), "max_steps": steps, "seed": int(seed),
      "success_rule": (rule.meaning if rule is not None else
                       "return > 0 or info['success']"
                       if results[next(iter(results))]["all"].get("success") is not None
                       else None),
      "results": results}
  log(_format_table(summary))
  path = os.path.abspath(output) if output else _default_output(workdir, str(checkpoint),
                                                               step)
  try:
    _write_json(path, dict(summary, written_to=path))
  except OSError as e:
    reason = f"{e.strerror or type(e).__name__}"
    if output:
      raise OutputError(f"--output={output}: could not write the evaluation there "
                        f"({reason}); the table above holds its results") from None
    (warn or (lambda line: print(line, file=sys.stderr, flush=True)))(
        f"note: could not write {path} ({reason}); the table above holds the results "
        f"(pass --output=PATH to keep them as JSON elsewhere)")
    return dict(summary, written_to=None)
  log(f"written to {path}")
  return dict(summary, written_to=path)


def _format_table(summary: Dict[str, Any]) -> str:
  """The terminal table of an `evaluate_run` summary."""
  ck = summary["checkpoint"]
  lines = [f"{summary['algo']} on {summary['env_name']}, checkpoint of update "
           f"{ck['update']} ({ck['which']}), {summary['episodes_per_seed']} episodes per "
           f"seed and policy, up to {summary['max_steps']} steps",
           f"{'policy':<8} {'seed':>4}  {'success [95% Wilson]':<24} "
           f"{'return [95% t]':<28} {'length':>8} {'ended':>6}"]
  for name, res in summary["results"].items():
    for row in res["seeds"] + [dict(res["all"], seed="all")]:
      succ = ("-" if "success" not in row else
              f"{row['success']:.3f} [{row['success_ci95'][0]:.3f}, "
              f"{row['success_ci95'][1]:.3f}]")
      ci = row["return_ci95"]
      ret = f"{row['return']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
      lines.append(f"{name:<8} {row['seed']!s:>4}  {succ:<24} {ret:<28} "
                   f"{row['length']:>8.1f} {row['ended']:>6.3f}")
  return "\n".join(lines)
