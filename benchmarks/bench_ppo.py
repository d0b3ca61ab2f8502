"""Benchmark: our PPO on CartPole-v1 against rejax's PPO, same settings, in one run.

  python3 benchmarks/bench_ppo.py --rejax_python=/tmp/rejax_venv/bin/python
  python3 benchmarks/bench_ppo.py --seeds=1,16 --total_timesteps=500000
  python3 benchmarks/bench_ppo.py --seeds=16 --cpu_cores=0 --cpu_devices=2 --rejax_python=...
  python3 benchmarks/bench_ppo.py --seeds=16 --fast_paths=on --rejax_python=...

PureJaxRL's default CartPole configuration (4 envs x 128 steps, 4 epochs x 4 minibatches,
lr 2.5e-4, gamma .99, lambda .95, clip .2, entropy .01, value .5, grad norm .5, 64-unit
tanh MLPs), 5e5 env steps per seed (976 updates of 512 steps), seeds vmapped in one
compiled call. For each system and seed count it reports compile time (ahead-of-time
`lower().compile()`), env steps/s of the compiled run (compile excluded; the median of
`--repeats` runs after one warm-up run), env steps per CPU-second (process CPU time of the
same runs: on a shared machine wall time swings with other load, CPU time much less) and
the final return: the mean undiscounted return of 128 fresh episodes per seed with the
stochastic policy (rejax's own evaluation protocol; ours does the same through
`rollout.collect_episodes`).

Ours runs twice by default, compiled with `credit_jax.fast_paths` on and off (`--fast_paths`
chooses): a row each, each with its ratios against rejax, plus the paired ratio of the
two settings. The switch is read when a program is traced, so both compiled programs
live side by side in this process.

rejax 0.1.3 needs `gymnax<1.0`, so it runs in its own virtual environment through
`--rejax_python` (a subprocess running the driver below, which stays up and runs on
request). The timed runs of the systems alternate (ours, rejax, rejax, ours, ...), so a
drift of the machine's speed, which here reaches 20-30% within minutes, hits both alike;
besides each system's median, the table gives the median of the per-round ratios. Its
periodic evaluation is
replaced by a no-op while timing so both sides time training only. Settings rejax fixes
differently: it anneals nothing (constant lr), clips gradients elementwise, and keeps
separate Adam states for actor and critic; ours anneals lr as PureJaxRL does.
"""
import os
import re
import sys

# scripts/cpu_affinity.py, shared with the entry points (stdlib only, no jax).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                "scripts"))
import cpu_affinity  # before jax starts: the thread pool is sized when jax starts

# On CPU both systems run on `--cpu_cores` cores (default 1; the rejax subprocess inherits
# the restriction): XLA's thread pool made both slower on the 2-core machine than one
# core did (see scripts/cpu_affinity.py and BENCHMARKS.md). `--cpu_cores=0`: all cores.
PINNED = cpu_affinity.restrict_from_argv(sys.argv, default=1)

# `--cpu_devices=N` (CPU only): JAX shows N CPU devices (JAX_NUM_CPU_DEVICES, inherited by
# the rejax subprocess) and both systems split their seeds over them, each initialised on
# one device and then sharded (see credit_jax/runtime/parallel.py). Use it with --cpu_cores=0.
_DEVICES = re.search(r"--cpu_devices[= ](\d+)", " ".join(sys.argv))
if _DEVICES and int(_DEVICES.group(1)) > 1 and not cpu_affinity.accelerator_present():
  os.environ["JAX_NUM_CPU_DEVICES"] = _DEVICES.group(1)

# With more than one seed requested, XLA CPU's concurrency-optimised scheduler is turned
# off (a jaxlib 0.10 hang) for both systems: the rejax subprocess inherits XLA_FLAGS. It
# costs time at one seed, so run one-seed cells on their own (--seeds=1) to measure them
# without it.
# Before credit_jax (whose environments start JAX): configure_process applies only before
# the backend starts (see credit_jax/runtime/launch.py).
_SEEDS = re.search(r"--seeds[= ]([\d,]+)", " ".join(sys.argv))
from credit_jax.runtime import launch
launch.configure_process(
    num_seeds=max(int(s) for s in _SEEDS.group(1).split(",")) if _SEEDS else 16)
import json  # pylint: disable=g-import-not-at-top,g-bad-import-order
import statistics
import subprocess
import time

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np

_SEEDS = flags.DEFINE_list("seeds", None, "Seed counts to run (default: 1,16 on CPU, "
                           "1,1024 on GPU).")
_STEPS = flags.DEFINE_integer("total_timesteps", 500_000, "Env steps per seed.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs per cell (after a warm-up).")
_REJAX = flags.DEFINE_string("rejax_python", None,
                             "Python of a venv with rejax==0.1.3 and gymnax<1.0.")
_OUT = flags.DEFINE_string("out", None, "Optional JSON file for the results.")
_REJAX_THREEFRY = flags.DEFINE_bool(
    "rejax_unrolled_threefry", False,
    "Also run rejax with credit_jax's unrolled CPU threefry lowering "
    "(credit_jax/threefry_cpu.py, one of credit_jax's opt-in fast paths), as "
    "extra rows; the ratio column still compares against plain rejax.")
_FAST = flags.DEFINE_list("fast_paths", ["on", "off"],
                          "Run our PPO with credit_jax.fast_paths on and/or off (a row each).")
flags.DEFINE_integer("cpu_cores", 1, "CPU only: cores both systems may use (0: all); "
                     "applied before jax starts")
flags.DEFINE_integer("cpu_devices", 1, "CPU only: CPU devices the seeds of both systems "
                     "are split over (sharded); applied before jax starts")

EVAL_EPISODES = 128

REJAX_DRIVER = r'''
import json, statistics, sys, time
import jax, jax.numpy as jnp
from rejax import PPO
args = json.loads(sys.argv[1])
steps = args["steps"]
if args.get("threefry_module"):
  # --rejax_unrolled_threefry: credit_jax's CPU lowering of threefry, loaded by path.
  import importlib.util
  spec = importlib.util.spec_from_file_location("cj_threefry_cpu", args["threefry_module"])
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  assert module.register(), "the threefry lowering did not register"
algo = PPO.create(
    env="CartPole-v1", num_envs=4, num_steps=128, num_epochs=4, num_minibatches=4,
    learning_rate=2.5e-4, max_grad_norm=0.5, total_timesteps=steps, eval_freq=steps,
    skip_initial_evaluation=True, gamma=0.99, gae_lambda=0.95, clip_eps=0.2,
    ent_coef=0.01, vf_coef=0.5,
    agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)})
timed = algo.replace(eval_callback=lambda a, ts, rng: jnp.zeros(()))
devices = jax.devices()


def reply(obj):
  print("REPLY " + json.dumps(obj), flush=True)


# Requests, one JSON line each on stdin: prepare (compile a seed count, one warm-up run),
# run (one timed run), finish (evaluate the last run's policies), quit.
cell = {}
for line in sys.stdin:
  request = json.loads(line)
  if request["cmd"] == "prepare":
    seeds = request["seeds"]
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    if len(devices) > 1:
      # Seeds split over the devices: init on one device, then shard, then train.
      from jax.sharding import Mesh, NamedSharding, PartitionSpec
      sharding = NamedSharding(Mesh(devices, ("seeds",)), PartitionSpec("seeds"))
      start = jax.device_put(
          jax.block_until_ready(jax.jit(jax.vmap(algo.init_state))(keys)), sharding)
      fn = jax.jit(jax.vmap(lambda ts: timed.train(train_state=ts)[0]),
                   in_shardings=sharding, out_shardings=sharding)
    else:
      start = keys
      fn = jax.jit(jax.vmap(lambda k: timed.train(k)[0]))
    t0 = time.perf_counter()
    compiled = fn.lower(start).compile()
    compile_s = time.perf_counter() - t0
    cell = {"seeds": seeds, "start": start, "compiled": compiled, "compile_s": compile_s,
            "state": jax.block_until_ready(compiled(start)), "times": [], "cpu": []}
    reply({"compile_s": compile_s})
  elif request["cmd"] == "run":
    t0, c0 = time.perf_counter(), time.process_time()
    cell["state"] = jax.block_until_ready(cell["compiled"](cell["start"]))
    cell["times"].append(time.perf_counter() - t0)
    cell["cpu"].append(time.process_time() - c0)
    reply({"run_s": cell["times"][-1], "cpu_s": cell["cpu"][-1]})
  elif request["cmd"] == "finish":
    seeds = cell["seeds"]
    evaluate = jax.jit(jax.vmap(lambda t, k: algo.eval_callback(algo, t, k)[1]))
    returns = evaluate(cell["state"], jax.random.split(jax.random.PRNGKey(1), seeds))
    run_s, cpu_s = statistics.median(cell["times"]), statistics.median(cell["cpu"])
    reply({"system": args["label"], "seeds": seeds, "compile_s": cell["compile_s"],
           "run_s": run_s, "steps_per_s": seeds * steps / run_s, "cpu_s": cpu_s,
           "steps_per_cpu_s": seeds * steps / cpu_s, "runs_s": cell["times"],
           "final_return": float(returns.mean()),
           "final_return_min_seed": float(returns.mean(axis=1).min())})
  elif request["cmd"] == "quit":
    break
'''


def ppo_config(total_timesteps):
  import ml_collections  # pylint: disable=g-import-not-at-top
  import importlib.util  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(__file__), os.pardir, "configs", "ppo_cartpole.py")
  spec = importlib.util.spec_from_file_location("ppo_cartpole", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config()
  config.total_timesteps = total_timesteps
  assert isinstance(config, ml_collections.ConfigDict)
  return config


class Ours:
  """Our PPO, timed in this process: `prepare(seeds)`, `run()` repeatedly, `finish()`;
  traced and compiled with `credit_jax.fast_paths` on if `fast`, off otherwise."""

  def __init__(self, total_timesteps, fast):
    from credit_jax import algos, fast_paths, rollout
    from credit_jax.algos import train as train_lib
    from credit_jax import nets
    config = ppo_config(total_timesteps)
    self.train = algos.make_train(config)
    self.steps = self.train.num_updates * self.train.env_steps_per_update
    env, env_params = train_lib.make_env(config)
    network, _ = train_lib.make_network(config, env, env_params, value_head=True)
    policy_fn = nets.make_policy_fn(network)
    max_steps = int(env_params.max_steps_in_episode)

    def final_return(params, key):
      traj = rollout.collect_episodes(env, env_params, policy_fn, params, key,
                                      EVAL_EPISODES, max_steps)
      return jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), axis=0).mean()
    self.final_return = jax.jit(jax.vmap(final_return))
    self.cell = {}
    self.fast = bool(fast)
    self.scope = lambda: fast_paths.use(self.fast)
    self.label = f"credit_jax PPO, fast paths {'on' if self.fast else 'off'}"

  def prepare(self, seeds):
    with self.scope():
      self._prepare(seeds)

  def _prepare(self, seeds):
    from credit_jax.runtime import parallel
    train, devices = self.train, jax.devices()
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    if len(devices) > 1:
      # Seeds split over the devices: init on one device, then shard (parallel.py).
      mesh = parallel.seed_mesh(devices)
      start = parallel.shard_seeds(jax.jit(jax.vmap(train.init))(keys), mesh)
      fn = jax.jit(jax.vmap(lambda s: train.run(s, None, train.num_updates)[0]),
                   in_shardings=parallel.seed_sharding(mesh),
                   out_shardings=parallel.seed_sharding(mesh))
    else:
      start = keys
      fn = jax.jit(jax.vmap(lambda k: train(k)[0]))
    t0 = time.perf_counter()
    compiled = fn.lower(start).compile()
    compile_s = time.perf_counter() - t0
    self.cell = {"seeds": seeds, "start": start, "compiled": compiled,
                 "compile_s": compile_s, "times": [], "cpu": [],
                 "state": jax.block_until_ready(compiled(start))}   # warm-up run

  def run(self):
    cell = self.cell
    t0, c0 = time.perf_counter(), time.process_time()
    cell["state"] = jax.block_until_ready(cell["compiled"](cell["start"]))
    cell["times"].append(time.perf_counter() - t0)
    cell["cpu"].append(time.process_time() - c0)
    return cell["times"][-1]

  def finish(self):
    cell, seeds, steps = self.cell, self.cell["seeds"], self.steps
    with self.scope():
      returns = self.final_return(cell["state"].params,
                                  jax.random.split(jax.random.PRNGKey(1), seeds))
    run_s, cpu_s = statistics.median(cell["times"]), statistics.median(cell["cpu"])
    return {"system": self.label, "seeds": seeds, "compile_s": cell["compile_s"],
            "run_s": run_s, "steps_per_s": seeds * steps / run_s, "cpu_s": cpu_s,
            "steps_per_cpu_s": seeds * steps / cpu_s, "runs_s": cell["times"],
            "final_return": float(np.mean(returns)),
            "final_return_min_seed": float(np.min(returns))}


REJAX_LABEL = "rejax 0.1.3 PPO"
THREEFRY_LABEL = REJAX_LABEL + " + credit_jax's threefry lowering"


class Rejax:
  """rejax's PPO in its own venv, a subprocess running `REJAX_DRIVER` that answers the
  same `prepare` / `run` / `finish` requests."""

  def __init__(self, python, steps, unrolled_threefry=False):
    args = {"steps": steps, "label": REJAX_LABEL}
    if unrolled_threefry:
      args.update(label=THREEFRY_LABEL, threefry_module=os.path.join(
          os.path.dirname(os.path.abspath(__file__)), os.pardir, "credit_jax",
          "threefry_cpu.py"))
    self.label = args["label"]
    self.proc = subprocess.Popen([python, "-c", REJAX_DRIVER, json.dumps(args)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, bufsize=1)

  def _ask(self, **request):
    try:
      self.proc.stdin.write(json.dumps(request) + "\n")
      self.proc.stdin.flush()
      for line in self.proc.stdout:
        if line.startswith("REPLY "):
          return json.loads(line[len("REPLY "):])
    except BrokenPipeError:
      pass   # it has exited; its stderr says why
    raise RuntimeError(f"{self.label} stopped: {self.proc.stderr.read()[-2000:]}")

  def prepare(self, seeds):
    self._ask(cmd="prepare", seeds=seeds)

  def run(self):
    return self._ask(cmd="run")["run_s"]

  def finish(self):
    return self._ask(cmd="finish")

  def close(self):
    try:
      self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
      self.proc.stdin.close()
    except (BrokenPipeError, ValueError):
      pass
    self.proc.wait(timeout=60)


def bench(seed_counts, total_timesteps, repeats, rejax_python, rejax_threefry,
          fast_settings=(True, False)):
  """Rows for every system and seed count, and the per-round ratios: each rejax's time /
  each of ours', and ours with the fast paths off / on."""
  ours = [Ours(total_timesteps, fast) for fast in fast_settings]
  others = []
  rows, paired, errors = [], {}, []
  for wanted, threefry in ((bool(rejax_python), False),
                           (bool(rejax_python and rejax_threefry), True)):
    if wanted:
      try:
        others.append(Rejax(rejax_python, ours[0].steps, unrolled_threefry=threefry))
      except OSError as e:   # no such python: report ours anyway
        errors.append(f"{rejax_python}: {e}")
  try:
    for seeds in seed_counts:
      systems = list(ours)
      for mine in ours:
        mine.prepare(seeds)
      for other in others:
        try:
          other.prepare(seeds)
          systems.append(other)
        except RuntimeError as e:   # report ours anyway
          errors.append(str(e))
      times = {id(x): [] for x in systems}
      for r in range(repeats):
        # Alternate who goes first, so neither always runs right after the other.
        for system in (systems if r % 2 == 0 else systems[::-1]):
          times[id(system)].append(system.run())
      for mine in ours:
        rows.append(mine.finish())
        print(json.dumps(rows[-1]), flush=True)
      for other in ours[1:] + systems[len(ours):]:
        if other not in ours:
          rows.append(other.finish())
        for mine in ours[:ours.index(other) if other in ours else len(ours)]:
          paired[(mine.label, other.label, seeds)] = statistics.median(
              [b / a for a, b in zip(times[id(mine)], times[id(other)])])
  finally:
    for other in others:
      other.close()
  return rows, ours[0].steps, paired, errors


def main(argv):
  del argv
  device = jax.devices()[0]
  on_gpu = device.platform == "gpu"
  seed_counts = [int(s) for s in (_SEEDS.value or (["1", "1024"] if on_gpu else
                                                   ["1", "16"]))]
  cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
  split = (f" x{len(jax.devices())}, seeds split over them" if len(jax.devices()) > 1
           else "")
  print(f"device: {device.device_kind} ({device.platform}{split}), jax {jax.__version__}, "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}, process cores {cores} "
        f"({'restricted' if PINNED else 'as started'})")
  fast_settings = []
  for value in _FAST.value:
    if value not in ("on", "off"):
      raise app.UsageError(f"--fast_paths takes on and/or off, got {value!r}")
    fast_settings.append(value == "on")
  rows, steps, paired, errors = bench(seed_counts, _STEPS.value, _REPEATS.value,
                                      _REJAX.value, _REJAX_THREEFRY.value, fast_settings)
  for error in errors:
    print(f"rejax did not run: {error}")
  ours = [r for r in rows if r["system"].startswith("credit_jax")]
  print(f"\nCartPole-v1 PPO, {steps} env steps per seed, median of {_REPEATS.value} runs "
        f"(the systems' runs alternating)\n")
  print("| system | seeds | compile (s) | run (s) | env steps/s | ratio vs rejax | "
        "paired ratio | env steps per CPU-s | ratio (CPU time) | "
        "final return (mean / worst seed) |")
  print("|---|---|---|---|---|---|---|---|---|---|")
  by_seeds = {r["seeds"]: r for r in rows if r["system"] == REJAX_LABEL}
  for r in rows:
    ref = by_seeds.get(r["seeds"]) if r["system"].startswith("credit_jax") else None
    ratio = f"{r['steps_per_s'] / ref['steps_per_s']:.2f}x" if ref else ""
    cpu_ratio = f"{r['steps_per_cpu_s'] / ref['steps_per_cpu_s']:.2f}x" if ref else ""
    pair = paired.get((r["system"], REJAX_LABEL, r["seeds"])) if ref else None
    pair = f"{pair:.2f}x" if pair else ""
    print(f"| {r['system']} | {r['seeds']} | {r['compile_s']:.1f} | {r['run_s']:.2f} | "
          f"{r['steps_per_s']:.3g} | {ratio} | {pair} | {r['steps_per_cpu_s']:.3g} | "
          f"{cpu_ratio} | {r['final_return']:.1f} / {r['final_return_min_seed']:.1f} |")
  print("\nratio vs rejax: ours' median run against rejax's; paired ratio: the median over "
        "rounds of rejax's run time / ours in the same round.")
  for (mine, label, seeds), ratio in paired.items():
    if label != REJAX_LABEL:
      print(f"{mine} against ({label}) at {seeds} seed(s): paired ratio (its time / "
            f"ours) {ratio:.2f}x")
  if on_gpu:
    # ANCHORS.md: PureJaxRL's ppo.py on an H200, same configuration, compile excluded.
    anchors = {1024: 3.15e7, 1: 8.6e4}
    print(f"\nPureJaxRL ppo.py on an H200 (ANCHORS.md): "
          + ", ".join(f"{n} seed(s) {v:.3g} env steps/s" for n, v in anchors.items())
          + f". This device: {device.device_kind}; the ratios compare only on an H200.")
    for r in ours:
      if r["seeds"] in anchors:
        target = " (target: >= 1.5x)" if r["seeds"] == 1024 else ""
        print(f"ours / PureJaxRL at {r['seeds']} seed(s): "
              f"{r['steps_per_s'] / anchors[r['seeds']]:.2f}x{target}")
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      json.dump({"device": str(device.device_kind), "steps_per_seed": steps,
                 "xla_flags": os.environ.get("XLA_FLAGS", ""),
                 "rows": rows, "paired_ratios": {f"{k[1]} / {k[0]} @ {k[2]}": v
                                                 for k, v in paired.items()},
                 "rejax_errors": errors}, f, indent=2)
  sys.stdout.flush()


if __name__ == "__main__":
  app.run(main)
