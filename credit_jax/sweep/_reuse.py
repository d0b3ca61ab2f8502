"""The run-loop pieces the sweep runner shares with `scripts/train.py`, imported in one place.

The single-run loop lives in `credit_jax/runtime/run.py`; when it moves, only this file changes. Nothing here is copied: the config comparison, the device split of a batch of
runs, the host gather over processes and the checkpointer are the ones train.py uses.
"""
from credit_jax.runtime import checkpoint as ckpt_lib
from credit_jax.runtime import metrics as metrics_lib
from credit_jax.runtime import parallel
from credit_jax.runtime.run import _config_diff as config_diff
from credit_jax.runtime.run import _to_host as to_host
from credit_jax.runtime.run import config_to_json, seed_mesh_for

Checkpointer = ckpt_lib.Checkpointer
MetricsWriter = metrics_lib.MetricsWriter

__all__ = ["Checkpointer", "MetricsWriter", "config_diff", "config_to_json", "metrics_lib",
           "parallel", "seed_mesh_for", "to_host"]
