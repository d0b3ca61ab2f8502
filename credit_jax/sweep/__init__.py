"""Sweeps: a grid of runs in as few compiles as possible, resumable, across processes.

    from credit_jax import sweep
    summary = sweep.run_sweep(sweep_config, workdir)     # scripts/sweep.py's whole job
    plan = sweep.plan(sweep_config)                       # cells and compiled calls only

`grid` expands a sweep config into cells and groups them into compiled calls (the traced
hyperparameter axes vmapped with the seeds; every other field its own compile), checking
the grid before anything compiles. `execute` runs the calls in checkpointed chunks,
resumes a killed sweep, spreads calls over shards or processes, and `results` writes
results.csv, results.md and the figures.
"""
from credit_jax.sweep.execute import run_sweep
from credit_jax.sweep.grid import Call, Cell, Plan, load_config_file, plan

__all__ = ["Call", "Cell", "Plan", "load_config_file", "plan", "run_sweep"]
