"""Benchmark: simulations per second of credit_jax.search vs mctx.gumbel_muzero_policy.

Both search the same true JAX environment with the same policy/value functions; each
simulation costs one environment step and one policy+value evaluation in both (leaves are
valued by `value_fn`, rollout_depth=0). A third row runs our search with greedy rollouts to
the end of the episode (more env steps per simulation: the setting the library defaults
to). Compile time is excluded: every configuration is compiled and run once first, then
timed `--repeats` times; medians are reported.

The environment is KeyChain-v0 (`--horizon` steps, 4 pivotal, 4 actions, per-root random
pivots and cues); the policy and value are random linear maps of its observation.

  JAX_PLATFORMS=cpu python3 benchmarks/bench_search.py            # batch 128 on CPU
  python3 benchmarks/bench_search.py --batch=1024                 # GPU

On CPU the process restricts itself to `--cpu_cores` cores (default 1) before jax starts,
for both systems alike: XLA's CPU runtime spreads a program's independent operations over
a thread pool as large as the cores it may use, and for programs of many tiny operations
like these searches that costs time (see scripts/cpu_affinity.py); it also keeps the
figures steadier on a shared machine. `--cpu_cores=0` uses every core.
"""
import os
import sys

# scripts/cpu_affinity.py, shared with the entry points (stdlib only, no jax).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                "scripts"))
import cpu_affinity  # before jax starts: the pool is sized when jax creates its client

PINNED = cpu_affinity.restrict_from_argv(sys.argv, default=1)
import statistics  # pylint: disable=g-import-not-at-top,g-bad-import-order
import time

from absl import app
from absl import flags
import jax
import jax.numpy as jnp

from credit_jax import envs
from credit_jax import search as search_lib

_BATCH = flags.DEFINE_integer("batch", None, "roots per call (default 128 on CPU, 1024 else)")
_SIMS = flags.DEFINE_list("sims", ["16", "64", "256"], "numbers of simulations")
_REPEATS = flags.DEFINE_integer("repeats", 7, "timed calls per configuration")
_HORIZON = flags.DEFINE_integer("horizon", 32, "KeyChain episode length (and max_depth)")
flags.DEFINE_integer("cpu_cores", 1, "CPU only: cores the process may use (0: all); "
                     "applied before jax starts, see the module docstring")


def logits_fn(params, obs):
  return obs @ params["w"]


def value_fn(params, obs):
  return obs @ params["v"]


def _time_once(fn, args):
  start = time.perf_counter()
  jax.block_until_ready(fn(*args))
  return 1e3 * (time.perf_counter() - start)


def main(argv):
  del argv
  device = jax.devices()[0]
  batch = _BATCH.value or (128 if device.platform == "cpu" else 1024)
  horizon = _HORIZON.value
  env, env_params = envs.make("KeyChain-v0", horizon=horizon, num_pivotal=4, num_actions=4)
  obs_dim = env.obs_shape[0]
  k_w, k_v, k_reset = jax.random.split(jax.random.PRNGKey(0), 3)
  params = {"w": 0.1 * jax.random.normal(k_w, (obs_dim, 4)),
            "v": 0.1 * jax.random.normal(k_v, (obs_dim,))}
  obs, states = jax.vmap(env.reset, (0, None))(jax.random.split(k_reset, batch), env_params)
  args = (params, env_params, jax.random.PRNGKey(1), states, obs)

  mctx_name = "mctx gumbel_muzero (value leaves)"
  systems = {
      mctx_name: lambda n: search_lib.make_mctx_search(
          env, logits_fn, value_fn=value_fn, num_simulations=n, max_depth=horizon),
      "ours puct (value leaves)": lambda n: search_lib.make_search(
          env, logits_fn, value_fn=value_fn, num_simulations=n, max_depth=horizon,
          rollout_depth=0),
      "ours puct (greedy rollouts)": lambda n: search_lib.make_search(
          env, logits_fn, value_fn=value_fn, num_simulations=n, max_depth=horizon),
  }
  sims = [int(s) for s in _SIMS.value]
  fns, compile_s = {}, {}
  for name, build in systems.items():
    for n in sims:
      start = time.perf_counter()
      fns[name, n] = jax.jit(build(n))
      jax.block_until_ready(fns[name, n](*args))  # compile + first run, excluded below
      compile_s[name, n] = time.perf_counter() - start
  # Rounds interleave every configuration, so load from other processes on a shared
  # machine hits all of them alike; ratios are medians of per-round ratios.
  ms = {key: [] for key in fns}
  for _ in range(_REPEATS.value):
    for key, fn in fns.items():
      ms[key].append(_time_once(fn, args))
  med = {key: statistics.median(v) for key, v in ms.items()}

  cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
  print(f"device: {device.device_kind} ({device.platform}), jax {jax.__version__}, "
        f"batch {batch}, KeyChain-v0 T={horizon} k=4 A=4, {_REPEATS.value} interleaved "
        f"rounds, median (min) ms per call, compile excluded; process cores {cores} "
        f"({'restricted' if PINNED else 'as started'})\n")
  print("| system | " + " | ".join(f"{n} sims: ms (sims/s)" for n in sims) + " |")
  print("|---|" + "---|" * len(sims))
  for name in systems:
    cells = [f"{med[name, n]:.2f} ({min(ms[name, n]):.2f}) ({batch * n / med[name, n] * 1e3:.3g})"
             for n in sims]
    print(f"| {name} | " + " | ".join(cells) + " |")

  def round_ratio(a, b):
    return statistics.median(x / y for x, y in zip(ms[a], ms[b]))
  print()
  if 64 in sims and 256 in sims:
    for name in systems:
      print(f"{name}: time(256)/time(64) = {round_ratio((name, 256), (name, 64)):.2f}")
  if 64 in sims:
    for name in systems:
      if name != mctx_name:
        print(f"{name}: throughput vs mctx at 64 sims = "
              f"{round_ratio((mctx_name, 64), (name, 64)):.2f}x")
  # Each simulation costs O(tree depth); the depth grows with the number of simulations.
  for name in ("ours puct (value leaves)",):
    depths = []
    for n in sims:
      tree = fns[name, n](*args).tree
      used = jnp.arange(tree.depth.shape[1])[None] < tree.num_nodes[:, None]
      depths.append(f"{n} sims {float((tree.depth * used).sum() / used.sum()):.2f}")
    print(f"{name}: mean node depth: " + ", ".join(depths))
  print("compile s: " + ", ".join(f"{k[0]}@{k[1]} {v:.1f}" for k, v in compile_s.items()))


if __name__ == "__main__":
  app.run(main)
