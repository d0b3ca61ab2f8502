"""Fixed-seed bit identity of a recipe's training runs, pinned as sha256 digests.

Shared by tests/test_ppo_identity.py and tests/test_grpo_identity.py: each names its
cases (`{name: run() -> (final TrainState, metrics)}`) and the JSON file the digests were
recorded in; `digests` hashes a run, `compare` names what differs, `main` is the files'
script form (`--write` records, else every case is compared).

Bits are those of one XLA build on one machine: the recorded file names its jax and
jaxlib versions, the platform and the CPU (model and vector extensions), and the tests
skip where they differ. They also depend
on XLA_FLAGS (the CPU optimisation level, the threading of matrix products): a file holds
the digests under "cases" for a process without XLA_FLAGS (every case, the script form)
and under "cases " + the sorted flags for others, such as the test suite's
(tests/conftest.py: the settings of `credit_jax.runtime.launch.configure_process(2)` and
level 0). Record the suite's cases with its flags, e.g.

  XLA_FLAGS="--xla_cpu_enable_concurrency_optimized_scheduler=false
  --xla_cpu_multi_thread_eigen=false --xla_backend_optimization_level=0" \
  PYTHONPATH=$PWD JAX_PLATFORMS=cpu python3 tests/test_grpo_identity.py --write CASE ...
"""
import hashlib
import json
import os
import sys

import jax
import jaxlib
import numpy as np

import test_init_bits


def digest(tree) -> str:
  """sha256 of a pytree's paths, dtypes, shapes and bytes (tests/test_init_bits.py's),
  20 hex digits."""
  return test_init_bits._digest(tree)[:20]


def leaf_digest(x) -> str:
  x = np.ascontiguousarray(np.asarray(x))
  return hashlib.sha256(str(x.dtype).encode() + str(x.shape).encode()
                        + x.tobytes()).hexdigest()[:20]


def digests(state, metrics) -> dict:
  """The digests of a run: its final parameters, whole `TrainState`, every metric."""
  return {"params": digest(state.params), "state": digest(state),
          "metrics": {k: leaf_digest(v) for k, v in sorted(metrics.items())}}


def run(train, seeds: int = 0) -> dict:
  """The digests of `train` (a `Train`) run under jit from PRNGKey(5), or from `seeds`
  keys split from it, vmapped (0: one key, no vmap)."""
  if seeds:
    state, metrics = jax.jit(jax.vmap(train))(
        jax.random.split(jax.random.PRNGKey(5), seeds))
  else:
    state, metrics = jax.jit(train)(jax.random.PRNGKey(5))
  return digests(state, metrics)


# Instruction-set extensions that change what XLA's CPU backend generates (vector width,
# fused multiply-adds), hence the order and rounding of float reductions.
_CPU_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
              "avx512_fp16", "amx_tile", "asimd", "sve")


def cpu() -> str:
  """The host CPU as XLA's code generation sees it: the model name and which of
  `_CPU_FLAGS` it has (Linux /proc/cpuinfo; elsewhere Python's `platform` module)."""
  import platform as platform_lib  # pylint: disable=import-outside-toplevel
  model, flags = platform_lib.processor() or platform_lib.machine(), set()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "CPU part") and model == platform_lib.machine():
          model = value.strip()
        elif key in ("flags", "Features"):
          flags = set(value.split())
          break
  except OSError:
    pass
  return " ".join([model] + [f for f in _CPU_FLAGS if f in flags])


def platform() -> dict:
  """What the bits depend on besides XLA_FLAGS: jax, jaxlib, the backend and the CPU (a
  CI machine with another CPU generation skips rather than fails)."""
  return {"jax": jax.__version__, "jaxlib": jaxlib.__version__,
          "platform": jax.devices()[0].platform, "cpu": cpu()}


def level_key() -> str:
  """Where a file keeps this process's digests: "cases" without XLA_FLAGS, else "cases "
  followed by the flags, sorted."""
  flags = sorted(os.environ.get("XLA_FLAGS", "").split())
  return " ".join(["cases"] + flags)


def recorded(path: str) -> dict:
  with open(path) as f:
    return json.load(f)


def compare(name, got, want):
  """Lines naming what differs between a case's digests `got` and the recorded `want`."""
  out = []
  for part in ("params", "state"):
    if got[part] != want[part]:
      out.append(f"{name}: {part} differ")
  for k in sorted(set(got["metrics"]) | set(want["metrics"])):
    if got["metrics"].get(k) != want["metrics"].get(k):
      out.append(f"{name}: metric {k} differs ({want['metrics'].get(k)} recorded, "
                 f"{got['metrics'].get(k)} now)")
  return out


def check(name, run_case, path: str):
  """The pytest body: skip on another platform, else assert case `name` is unchanged."""
  import pytest  # pylint: disable=import-outside-toplevel
  data = recorded(path)
  if data["platform"] != platform():
    pytest.skip(f"hashes recorded on {data['platform']}, this is {platform()}")
  if name not in data.get(level_key(), {}):
    pytest.skip(f"{name} has no digests recorded under {level_key()} (XLA_FLAGS)")
  assert not compare(name, run_case(name), data[level_key()][name])


def main(cases, run_case, path: str, argv=None) -> int:
  """The script form: runs the cases named in `argv` (all when none), then writes them
  to `path` (`--write`) or prints each one's verdict; returns the exit status."""
  argv = sys.argv[1:] if argv is None else argv
  names = [a for a in argv if not a.startswith("--")] or list(cases)
  got = {}
  for n in names:
    got[n] = run_case(n)
    print(f"ran {n}", flush=True)
  key = level_key()
  if "--write" in argv:   # these cases at this level; the file's others kept
    data = recorded(path) if os.path.exists(path) else {"platform": platform()}
    if data["platform"] != platform():
      data = {"platform": platform()}
    data[key] = {**data.get(key, {}), **got}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      json.dump(data, f, indent=1, sort_keys=True)
    print(f"wrote {len(got)} cases to {path} ({key})")
    return 0
  data = recorded(path)
  if data["platform"] != platform():
    print(f"note: recorded on {data['platform']}, this is {platform()}")
  bad = [line for n in names for line in compare(n, got[n], data[key][n])]
  for n in names:
    print(f"{n}: {'differs' if any(l.startswith(n + ':') for l in bad) else 'identical'}")
  print("\n".join(bad) or f"all {len(names)} cases identical")
  return 1 if bad else 0
