"""Benchmark: random-policy environment steps per second, engine vs bare gymnax scan.

For KeyChain-v0 (horizon 1000) and gymnax CartPole-v1, in one process:
  * engine: `credit_jax.rollout.collect` with `rollout.uniform_random_policy`;
  * bare:   a hand-written `lax.scan` of the vmapped `env.step`, stacking everything
            `env.step` returns (obs, action, reward, terminated, truncated, info) as a
            PureJaxRL-style collection loop does, with the batch's actions drawn in one
            call: by `jax.random.randint` (the usual loop) and by the engine's own
            sampler (random bits modulo the action count), the stricter baseline.
Each timed call is one compiled scan of `num_steps` steps over `num_envs` envs;
compilation is excluded (one warm-up call). Each round calls all six (env, path) pairs
in turn; steps/s are reported as the median and best of `repeats` rounds (wall clock)
and per CPU-second (process time of all threads, which load from other processes on a
shared machine disturbs less). Ratios are medians of per-round ratios, so a burst of
load that slows a whole round cancels out.

  python3 benchmarks/bench_env.py                 # 256 envs on CPU, 4096 on a GPU
"""
from __future__ import annotations

import functools
import statistics
import time

from absl import app, flags
import jax
import jax.numpy as jnp

from credit_jax import envs, rollout

_NUM_ENVS = flags.DEFINE_integer("num_envs", 0, "Envs per scan; 0: 4096 on GPU/TPU, 256 on CPU.")
_NUM_STEPS = flags.DEFINE_integer("num_steps", 1000, "Steps per timed scan.")
_REPEATS = flags.DEFINE_integer("repeats", 11, "Timed calls per (env, path); median reported.")
_HORIZON = flags.DEFINE_integer("horizon", 1000, "KeyChain horizon T.")


def bare_scan_fn(env, params, num_envs, num_steps, sampler):
  """A jitted bare gymnax collection loop: (key, state, obs) -> (carry, stacked outputs).

  sampler "randint": `jax.random.randint` over the batch (the usual hand-written loop);
  "bits": one random word per env modulo the action count, the sampler
  `rollout.uniform_random_policy` uses, so the comparison isolates the engine itself.
  """
  step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

  def sample(key):
    if sampler == "randint":
      return jax.random.randint(key, (num_envs,), 0, env.num_actions)
    words = jax.random.bits(key, (num_envs,), jnp.uint32)
    return (words % env.num_actions).astype(jnp.int32)

  def body(carry, key):
    state, obs = carry
    key_act, key_env = jax.random.split(key)
    action = sample(key_act)
    next_obs, state, reward, terminated, truncated, info = step(
        jax.random.split(key_env, num_envs), state, action, params)
    return (state, next_obs), (obs, action, reward, terminated, truncated, info)

  def run(key, state, obs):
    return jax.lax.scan(body, (state, obs), jax.random.split(key, num_steps))

  return jax.jit(run)


def engine_fn(env, params, num_steps):
  policy = rollout.uniform_random_policy(env.num_actions)

  def run(key, state, obs):
    return rollout.collect(env, params, policy, None, key, state, obs, num_steps)

  return jax.jit(run)


def time_rounds(calls, repeats):
  """Times `repeats` rounds; each round calls every entry of `calls` once, in turn.

  Args:
    calls: {name: zero-argument fn(round) -> arrays}; compiled by one warm-up call.
  Returns:
    (wall, cpu): {name: [seconds per round]}. CPU is process time of all threads, which
    load from other processes on a shared machine disturbs less than wall time.
  """
  for fn in calls.values():
    jax.block_until_ready(fn(0))
  wall = {name: [] for name in calls}
  cpu = {name: [] for name in calls}
  for r in range(repeats):
    for name, fn in calls.items():
      start, start_cpu = time.perf_counter(), time.process_time()
      jax.block_until_ready(fn(r + 1))
      wall[name].append(time.perf_counter() - start)
      cpu[name].append(time.process_time() - start_cpu)
  return wall, cpu


def median_ratio(num, den):
  """Median over rounds of num[r] / den[r]: robust to load that shifts whole rounds."""
  return statistics.median(a / b for a, b in zip(num, den))


def main(argv):
  del argv
  backend = jax.default_backend()
  num_envs = _NUM_ENVS.value or (256 if backend == "cpu" else 4096)
  num_steps = _NUM_STEPS.value
  device = jax.devices()[0].device_kind
  print(f"backend={backend} device={device} jax={jax.__version__} "
        f"num_envs={num_envs} num_steps={num_steps} repeats={_REPEATS.value}")
  keychain, cartpole = f"KeyChain-v0 (T={_HORIZON.value})", "CartPole-v1 (gymnax)"
  cases = {keychain: envs.make("KeyChain-v0", horizon=_HORIZON.value),
           cartpole: envs.make("CartPole-v1")}
  engine, bare, bare_bits = ("engine (rollout.collect)", "bare scan, randint actions",
                             "bare scan, bits actions")
  calls = {}
  for label, (env, params) in cases.items():
    key = jax.random.key(0)
    obs, state = jax.jit(rollout.reset, static_argnums=(0, 3))(env, params, key, num_envs)
    fns = {engine: engine_fn(env, params, num_steps),
           bare: bare_scan_fn(env, params, num_envs, num_steps, "randint"),
           bare_bits: bare_scan_fn(env, params, num_envs, num_steps, "bits")}
    for path, fn in fns.items():
      calls[(label, path)] = functools.partial(
          lambda fn, state, obs, r: fn(jax.random.key(r), state, obs), fn, state, obs)
  wall, cpu = time_rounds(calls, _REPEATS.value)

  steps = num_envs * num_steps
  print()
  print("| environment | path | steps/s, wall median | steps/s, wall best | "
        "steps per CPU-second, median |")
  print("|---|---|---|---|---|")
  for label, path in calls:
    w, c = wall[(label, path)], cpu[(label, path)]
    print(f"| {label} | {path} | {steps / statistics.median(w):.3g} | "
          f"{steps / min(w):.3g} | {steps / statistics.median(c):.3g} |")
  print()
  print("Per-round ratios, median over rounds:")
  print()
  print("| time | engine overhead over bare (bits), KeyChain | same, CartPole | "
        "engine overhead over bare (randint), KeyChain | same, CartPole | "
        "KeyChain / CartPole steps/s, engine | same, bare (randint) |")
  print("|---|---|---|---|---|---|---|")
  for name, times in (("wall", wall), ("CPU", cpu)):
    cells = [f"{median_ratio(times[(label, engine)], times[(label, ref)]) - 1:+.1%}"
             for ref in (bare_bits, bare) for label in (keychain, cartpole)]
    cells += [f"{median_ratio(times[(cartpole, path)], times[(keychain, path)]):.2f}x"
              for path in (engine, bare)]
    print(f"| {name} | " + " | ".join(cells) + " |")
  print("\ntargets: engine overhead < +10%; KeyChain / CartPole >= 1")


if __name__ == "__main__":
  app.run(main)
