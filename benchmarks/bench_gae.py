"""Times credit_jax's GAE against rlax's (vmapped over the batch) in one process.

  python3 benchmarks/bench_gae.py                      # default shapes for the backend
  python3 benchmarks/bench_gae.py --shapes=1000x256,5000x256 --repeats=100

Every function is jitted, compiled and run once before timing (compile excluded); then
the functions take turns, `--repeats` calls each with `block_until_ready`, so a noisy
neighbour on a shared machine slows them all alike. The table gives median times, the
median over rounds of the per-round ratio rlax / ours (> 1 means we are faster) and, on
an accelerator, the fraction of the bandwidth floor reached: GAE must
read rewards, discounts and values and write advantages, 16 bytes per float32 element,
at the copy bandwidth this script measures with a large `x * c`.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import rlax

import credit_jax as cj

DEFAULT_SHAPES = {
    "cpu": ((128, 256), (1000, 256), (5000, 256)),
    "gpu": ((128, 256), (1000, 256), (5000, 256), (1000, 4096), (5000, 4096),
            (50000, 64)),
}
LAMBDA = 0.95
BYTES_PER_ELEMENT = 16  # rewards, discounts, values in; advantages out (float32)


def parse_shapes(text: str):
  shapes = []
  for item in text.split(","):
    t, b = item.lower().split("x")
    shapes.append((int(t), int(b)))
  return tuple(shapes)


def copy_bandwidth(num_bytes: int, repeats: int) -> float:
  """Bytes/s of `x * c` on a `num_bytes` float32 array (read + write)."""
  x = jnp.ones((num_bytes // 4,), jnp.float32)
  scale = jax.jit(lambda x, c: x * c)
  c = jnp.float32(1.0001)
  jax.block_until_ready(scale(x, c))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(scale(x, c))
    times.append(time.perf_counter() - start)
  return 2 * num_bytes / float(np.median(times))


def make_inputs(num_steps: int, batch: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  rewards = rng.normal(size=(num_steps, batch)).astype(np.float32)
  discounts = np.full((num_steps, batch), 0.99, np.float32)
  values = rng.normal(size=(num_steps + 1, batch)).astype(np.float32)
  # Multi-episode boundaries for the "auto+bounds" column: ~1% of steps end an episode.
  terminated = rng.random((num_steps, batch)) < 0.005
  truncated = (rng.random((num_steps, batch)) < 0.005) & ~terminated
  final_values = rng.normal(size=(num_steps, batch)).astype(np.float32)
  put = jax.device_put
  return (put(rewards), put(discounts), put(values), put(terminated), put(truncated),
          put(final_values))


def make_functions(methods):
  rlax_gae = jax.vmap(rlax.truncated_generalized_advantage_estimation,
                      in_axes=(1, 1, None, 1), out_axes=1)
  fns = {"rlax": jax.jit(lambda r, d, v, lam, *_: rlax_gae(r, d, lam, v))}
  for method in methods:
    fns[method] = jax.jit(
        lambda r, d, v, lam, *_, m=method: cj.gae(r, d, v, lam, method=m))
  fns["auto+bounds"] = jax.jit(
      lambda r, d, v, lam, term, trunc, fv: cj.gae(
          r, d, v, lam, terminated=term, truncated=trunc, final_values=fv))
  return fns


def time_shape(fns, inputs, repeats):
  args = inputs[:3] + (jnp.float32(LAMBDA),) + inputs[3:]
  outs = {name: jax.block_until_ready(fn(*args)) for name, fn in fns.items()}
  errors = {name: float(jnp.max(jnp.abs(out - outs["rlax"])))
            for name, out in outs.items() if name not in ("rlax", "auto+bounds")}
  times = {name: [] for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():
      start = time.perf_counter()
      jax.block_until_ready(fn(*args))
      times[name].append(time.perf_counter() - start)
  medians = {name: float(np.median(t)) for name, t in times.items()}
  # Calls in one round share the machine's load, so the median of per-round ratios is
  # steadier than the ratio of medians on a shared machine.
  ratios = {name: float(np.median(np.array(times["rlax"]) / np.array(t)))
            for name, t in times.items() if name != "rlax"}
  return medians, ratios, errors


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--shapes", type=parse_shapes, default=None,
                      help="comma-separated TxB list; default depends on the backend")
  parser.add_argument("--repeats", type=int, default=50, help="timed calls per function")
  parser.add_argument("--methods", default="scan,associative,auto",
                      help="credit_jax methods to time")
  parser.add_argument("--bandwidth_mib", type=int, default=0,
                      help="array size for the copy-bandwidth probe (0: 2048 on an "
                           "accelerator, no probe on CPU)")
  args = parser.parse_args(argv)

  backend = jax.default_backend()
  device = jax.devices()[0]
  shapes = args.shapes or DEFAULT_SHAPES.get(backend, DEFAULT_SHAPES["gpu"])
  methods = [m for m in args.methods.split(",") if m]
  # On CPU a large x * c mostly measures page faults on the fresh output, not DRAM,
  # and the issue asks for the floor on accelerators only: probe those.
  mib = args.bandwidth_mib or (0 if backend == "cpu" else 2048)
  bandwidth = copy_bandwidth(mib << 20, max(5, args.repeats // 5)) if mib else None

  print(f"date: {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}")
  print(f"device: {backend} {device.device_kind} ({platform.processor() or platform.machine()}),"
        f" jax {jax.__version__}, rlax {rlax.__version__}")
  print(f"command: {' '.join(['python3'] + sys.argv)}")
  if hasattr(os, "getloadavg"):
    print(f"load average at start (1 min): {os.getloadavg()[0]:.2f} on {os.cpu_count()} "
          "cores")
  print(f"auto resolves to: " + ", ".join(
      f"T={t}: {cj.returns.resolve_method('auto', t)}" for t, _ in shapes))
  if bandwidth:
    print(f"copy bandwidth (x * c, {mib} MiB): {bandwidth / 1e9:.1f} GB/s; "
          f"floor = {BYTES_PER_ELEMENT} B/elem at that rate")
  print()
  fns = make_functions(methods)
  names = list(fns)
  header = (["T x B"] + [f"{n} ms" for n in names]
            + [f"rlax/{n}" for n in names if n != "rlax"] + ["floor ms", "auto % of floor"])
  print("| " + " | ".join(header) + " |")
  print("|" + "---|" * len(header))
  worst_error = 0.0
  for num_steps, batch in shapes:
    inputs = make_inputs(num_steps, batch)
    med, ratios, errors = time_shape(fns, inputs, args.repeats)
    worst_error = max([worst_error] + list(errors.values()))
    floor = BYTES_PER_ELEMENT * num_steps * batch / bandwidth if bandwidth else None
    row = [f"{num_steps} x {batch}"]
    row += [f"{med[n] * 1e3:.3f}" for n in names]
    row += [f"{ratios[n]:.2f}" for n in names if n != "rlax"]
    if floor and "auto" in med:
      row += [f"{floor * 1e3:.4f}", f"{100 * floor / med['auto']:.1f}"]
    else:
      row += ["-", "-"]
    print("| " + " | ".join(row) + " |", flush=True)
  print(f"\nmax |ours - rlax| over all shapes and methods: {worst_error:.2e}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
