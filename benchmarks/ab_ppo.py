"""In-process A/B of the PPO update: a git revision's code against the working tree's.

  JAX_PLATFORMS=cpu taskset -c 1 python3 benchmarks/ab_ppo.py --rev=HEAD~1 --num_seeds=16
  JAX_PLATFORMS=cpu taskset -c 1 python3 benchmarks/ab_ppo.py --rev=HEAD~1 --num_seeds=1 \
      --updates_per_call=32

Both variants are compiled in the same process (the old one from `git show REV:<file>`
of the PPO modules, loaded under private names) and called alternately, so machine load
hits both alike; it reports CPU time per update (`time.process_time`) and the median of
the per-round new/old ratios. On a shared machine this is steadier than comparing two
runs of `bench_ppo.py`. Each call runs `--updates_per_call` updates of
`configs/ppo_cartpole.py` for `--num_seeds` vmapped seeds, continuing from the previous
call.
For more than one seed the XLA flags of `credit_jax.runtime.launch` are set, as bench_ppo.py
does. Both variants are compiled with `credit_jax.fast_paths` on
(`--fast_paths=off`: off); revisions from before the switch existed use their fast paths
unconditionally except the threefry lowering, which only the switch turns on.
"""
import os
import re
import subprocess
import sys
import types

from credit_jax.runtime import launch

_SEEDS = re.search(r"--num_seeds[= ](\d+)", " ".join(sys.argv))
launch.configure_process(num_seeds=int(_SEEDS.group(1)) if _SEEDS else 16)
import importlib.util  # pylint: disable=g-import-not-at-top,g-bad-import-order
import statistics
import time

from absl import app, flags
import jax

from credit_jax import fast_paths
from credit_jax.algos import ppo

_REV = flags.DEFINE_string("rev", "HEAD", "Git revision of the old variant.")
_SEEDS_FLAG = flags.DEFINE_integer("num_seeds", 16, "Vmapped seeds.")
_UPDATES = flags.DEFINE_integer("updates_per_call", 8, "Updates per compiled call.")
_ROUNDS = flags.DEFINE_integer("rounds", 15, "Alternating rounds (one call each).")
_FAST = flags.DEFINE_enum("fast_paths", "on", ["on", "off"],
                          "credit_jax.fast_paths while both variants are compiled.")

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
# The PPO update's modules, each after those it imports.
MODULES = ("networks", "rollout", "algos/losses", "algos/common", "algos/ppo")


def load_old_ppo(rev: str) -> types.ModuleType:
  """`credit_jax.algos.ppo` as of `rev`, with its sibling modules also as of `rev`."""
  loaded = {}
  for path in MODULES:
    short = path.split("/")[-1]
    source = subprocess.run(
        ["git", "-C", REPO, "show", f"{rev}:credit_jax/{path}.py"], capture_output=True,
        text=True, check=True).stdout
    name = f"_ab_old_{short}"
    module = types.ModuleType(name)
    module.__file__ = f"<{rev}:credit_jax/{path}.py>"
    sys.modules[name] = module   # flax's dataclasses look their module up
    code = compile(source, module.__file__, "exec")
    exec(code, module.__dict__)  # pylint: disable=exec-used
    for dep, dep_module in loaded.items():   # rebind `from credit_jax import <dep>`
      if dep in module.__dict__:
        module.__dict__[dep] = dep_module
    loaded[short] = module
  return loaded["ppo"]


def cartpole_config():
  spec = importlib.util.spec_from_file_location(
      "ppo_cartpole", os.path.join(REPO, "configs", "ppo_cartpole.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def compiled_updates(make_train, seeds: int, updates: int):
  """(compiled `state -> state` running `updates` updates of `seeds` seeds, state)."""
  train = make_train(cartpole_config())
  keys = jax.random.split(jax.random.PRNGKey(0), seeds)
  state = jax.jit(jax.vmap(train.init))(keys)
  run = jax.jit(jax.vmap(lambda s: train.run(s, None, updates)[0]))
  return run.lower(state).compile(), state


def main(argv):
  del argv
  seeds, updates = _SEEDS_FLAG.value, _UPDATES.value
  old_ppo = load_old_ppo(_REV.value)
  with fast_paths.use(_FAST.value == "on"):
    variants = {"old": compiled_updates(old_ppo.make_train, seeds, updates),
                "new": compiled_updates(ppo.make_train, seeds, updates)}
  states = {n: jax.block_until_ready(fn(s)) for n, (fn, s) in variants.items()}
  cpu = {n: [] for n in variants}
  for r in range(_ROUNDS.value):
    for n in (("old", "new") if r % 2 == 0 else ("new", "old")):
      start = time.process_time()
      states[n] = jax.block_until_ready(variants[n][0](states[n]))
      cpu[n].append((time.process_time() - start) / updates)
  for n, times in cpu.items():
    print(f"{n}: CPU ms per update, median {1e3 * statistics.median(times):.2f}, "
          f"min {1e3 * min(times):.2f}")
  ratios = [a / b for a, b in zip(cpu["new"], cpu["old"])]
  print(f"seeds={seeds} new/old CPU time: median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {len(ratios)} rounds, "
        f"old = {_REV.value})")


if __name__ == "__main__":
  app.run(main)
