"""The library used straight from Python: PPO with a GRU on KeyChain, 2 seeds vmapped.

A reproducer for the XLA CPU wedge (BUILD.md "No hang from Python"): the program a
research script writes, not an entry point. It builds PPO's `default_config()` with a
GRU network on KeyChain-v0 (T = 64, cue_delay = 16) and runs
`jax.jit(jax.vmap(make_train(c)))(keys)` for 2 seeds. Before issue 46 it hung for good
on jaxlib 0.10 without `cj.configure_process()`; the library's initialisers no longer
reach the kernel that wedged, so the call is optional.

  python3 scripts/repro/direct_gru_ppo.py                 # 131,072 env steps per seed
  python3 scripts/repro/direct_gru_ppo.py --steps=65536 --no-configure

`--no-configure` leaves out the optional call (the program as a new user writes it), for
measuring the wedge's rate under XLA_FLAGS set from outside (scripts/soak.py).
Prints the compile and run time and the env steps per second of the compiled call.
"""
import argparse
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--steps", type=int, default=131_072,
                    help="total_timesteps per seed (PPO's default is 500,000)")
parser.add_argument("--seeds", type=int, default=2)
parser.add_argument("--no-configure", dest="configure", action="store_false",
                    help="do not call cj.configure_process()")
args = parser.parse_args()

import credit_jax as cj   # noqa: E402  (after argparse: --help needs no JAX)

if args.configure:
  cj.configure_process()

import jax   # noqa: E402
from credit_jax.algos import ppo   # noqa: E402

c = ppo.default_config()
c.env_name = "KeyChain-v0"
c.env_kwargs.horizon = 64
c.env_kwargs.cue_delay = 16
c.network.kind = "gru"
c.total_timesteps = args.steps

t0 = time.perf_counter()
train = jax.jit(jax.vmap(cj.make_train(c)))
keys = jax.random.split(jax.random.PRNGKey(0), args.seeds)
compiled = train.lower(keys).compile()
t1 = time.perf_counter()
print(f"compiled in {t1 - t0:.1f} s", flush=True)
out = jax.block_until_ready(compiled(keys))
t2 = time.perf_counter()
steps = args.seeds * ppo.num_updates(c) * c.num_envs * c.num_steps
print(f"compile {t1 - t0:.1f} s, run {t2 - t1:.1f} s, {steps / (t2 - t1):.0f} env steps/s "
      f"({args.seeds} seeds x {steps // args.seeds} steps)", flush=True)
sys.exit(0)
