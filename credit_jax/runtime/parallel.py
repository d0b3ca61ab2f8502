"""Seeds spread over devices: a one-axis mesh and the sharding of seed-stacked state.

A multi-seed run is `jax.vmap` over a leading seed axis; sharding that axis over the local
devices runs each device's share of the seeds side by side. The seeds never interact (the
compiled PPO program held no collectives):

    mesh = parallel.seed_mesh()                            # all local devices
    state = jax.jit(jax.vmap(train.init))(keys)            # init on one device (below)
    state = parallel.shard_seeds(state, mesh)              # [S, ...] leaves split over S
    run = jax.jit(jax.vmap(lambda s: train.run(s, None, n)[0]),
                  in_shardings=parallel.seed_sharding(mesh),
                  out_shardings=parallel.seed_sharding(mesh))

`scripts/train.py` (through `credit_jax.runtime.run.seed_mesh_for`) does this by itself
whenever the process has more than one device, and restores checkpoints straight into
the same split.

On a CPU, JAX shows one device unless told otherwise before its backend starts:
`jax.config.update("jax_num_cpu_devices", N)` right after `import jax` and before
importing credit_jax (gymnax, which credit_jax imports, runs a JAX op at import time).
In one in-process probe on the 2-core development machine (BENCHMARKS.md, PPO section),
an update of 16 PPO seeds took 22.5 ms wall on two CPU devices against 42.6 ms on one
device with both cores.

Initialise unsharded. With jaxlib 0.10.2, running `jax.vmap(train.init)` sharded over two
CPU devices hung: the orthogonal initialiser's batched QR (jax's LAPACK kernel, which
splits a batch over a thread pool shared by the devices) deadlocked on the first call.
Initialising on one device and then sharding the state, as above, avoids it.

Several processes or hosts (`jax.distributed`): build the mesh over `jax.devices()` (all
processes' devices), initialise the same seeds in every process and call `shard_seeds`
in each; `jax.experimental.multihost_utils.process_allgather` brings sharded results to
every host. `scripts/train.py --distributed` (or `--coordinator_address`,
`--num_processes`, `--process_id`) does all of this; see `scripts/distributed.py`.

The mesh is built with `jax.sharding.Mesh`, whose axes are "auto": `jax.make_mesh` in jax
0.10 makes "explicit" axes by default, under which the vmapped GAE scan fails to trace.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

_SEED_AXIS = "seeds"


def seed_mesh(devices: Optional[Sequence[Any]] = None) -> Mesh:
  """A one-axis mesh named `"seeds"` over `devices` (default: all of `jax.devices()`)."""
  devices = list(jax.devices() if devices is None else devices)
  if not devices:
    raise ValueError("seed_mesh needs at least one device")
  return Mesh(np.asarray(devices), (_SEED_AXIS,))


def seed_sharding(mesh: Mesh) -> NamedSharding:
  """Splits a leading seed axis over `mesh`'s devices; other axes stay whole."""
  return NamedSharding(mesh, PartitionSpec(_SEED_AXIS))


def shard_seeds(tree: Any, mesh: Mesh) -> Any:
  """Places every leaf `[S, ...]` of `tree` with its seed axis split over `mesh`.

  `S` must be divisible by the number of devices in `mesh`; every leaf needs the same
  leading `S`. When `mesh` spans several processes (`jax.distributed`), every process
  must call this with the same `tree`; each keeps the shards of its own devices.
  """
  leaves = jax.tree.leaves(tree)
  sizes = {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
  if None in sizes or len(sizes) != 1:
    raise ValueError(f"every leaf needs the same leading seed axis [S, ...]; got leading "
                     f"sizes {sorted(s for s in sizes if s is not None)}"
                     f"{' and scalars' if None in sizes else ''}")
  seeds, num_devices = sizes.pop(), mesh.devices.size
  if seeds % num_devices:
    raise ValueError(f"{seeds} seeds do not split evenly over {num_devices} devices")
  sharding = seed_sharding(mesh)
  if sharding.is_fully_addressable:
    return jax.device_put(tree, sharding)
  # Devices of other processes in the mesh: every process holds the whole `tree` (the
  # same values: same keys, same init) and contributes the shards of its own devices.
  return jax.tree.map(
      lambda x: jax.make_array_from_callback(
          np.shape(x), sharding, lambda index, host=np.asarray(x): host[index]), tree)
