"""A learning-rate sweep as one vmapped call vs the same runs as separate train.py processes.

  python3 benchmarks/bench_sweep.py --workdir=/tmp/bench_sweep           # 8 of the 64 runs
  python3 benchmarks/bench_sweep.py --workdir=/tmp/bench_sweep --separate_cells=0,1,2,3,4,5,6,7

Side A: `scripts/sweep.py --config=configs/sweeps/ppo_cartpole_lr.py:bench`: PPO on
CartPole, 8 learning rates x 8 seeds = 64 runs in one compiled call (one process).
Side B: the runs as a bash loop would do them: one `scripts/train.py` process per run, one
after the other (each one compiles its own program), with the same config and lr and its
own seed. Both sides are wall time of whole processes, start-up and compilation included,
measured one after the other in this run. 64 processes take long on a small machine, so
by default side B runs the 8 seeds of one cell (lr 2e-3, `--separate_cells` picks others)
and its 64-run time is that time x 64 / runs measured (printed as an extrapolation:
every separate run compiles and runs the same program, so its time does not depend on
the cell). The final returns (mean of the last 10 updates) of each measured cell are
compared between the sides: the seeds differ (train.py's seed streams are not the
sweep's), so they should agree within seed noise (Welch's t on 8 + 8 seeds).
"""
import csv
import json
import math
import os
import subprocess
import sys
import time

from absl import app, flags

_WORKDIR = flags.DEFINE_string("workdir", "/tmp/bench_sweep", "Scratch directory.")
_CELLS = flags.DEFINE_list("separate_cells", ["5"], "Indices into the sweep's lr axis of "
                           "the cells (8 seeds each) run as separate processes; "
                           "0,1,2,3,4,5,6,7 runs all 64.")
_SWEEP = "configs/sweeps/ppo_cartpole_lr.py:bench"
_REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)


def _run(cmd):
  t0 = time.perf_counter()
  out = subprocess.run(cmd, capture_output=True, text=True, cwd=_REPO, check=False)
  if out.returncode:
    raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
  return time.perf_counter() - t0


def _welch(a, b):
  ma, mb = sum(a) / len(a), sum(b) / len(b)
  va = sum((x - ma) ** 2 for x in a) / (len(a) - 1)
  vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1)
  return ma, mb, (ma - mb) / math.sqrt(va / len(a) + vb / len(b) + 1e-12)


def main(argv):
  del argv
  sys.path.insert(0, os.path.join(_REPO, "configs", "sweeps"))
  import ppo_cartpole_lr  # pylint: disable=g-import-not-at-top
  sweep = ppo_cartpole_lr.get_config("bench")
  lrs, seeds = list(sweep.axes.lr), int(sweep.seeds)
  work = os.path.abspath(_WORKDIR.value)
  os.makedirs(work, exist_ok=True)
  sweep_dir = os.path.join(work, "sweep")
  if os.path.exists(sweep_dir):
    raise app.UsageError(f"{sweep_dir} exists; use a fresh --workdir")
  py = sys.executable
  t_sweep = _run([py, "scripts/sweep.py", f"--config={_SWEEP}", f"--workdir={sweep_dir}"])
  with open(os.path.join(sweep_dir, "results.csv")) as f:
    rows = list(csv.DictReader(f))
  swept = {lr: [float(r["final_return"]) for r in rows if float(r["lr"]) == lr]
           for lr in lrs}
  print(f"sweep: {len(rows)} runs in one call: {t_sweep:.1f} s wall (compile "
        f"{float(rows[0]['compile_s']):.1f} s, run {float(rows[0]['run_s']):.1f} s)",
        flush=True)

  picked = [lrs[int(i)] for i in _CELLS.value]
  ov = sweep.overrides
  separate, t_sep = {}, 0.0
  for lr in picked:
    separate[lr] = []
    for s in range(seeds):
      run_dir = os.path.join(work, f"train_lr{lr:g}_seed{s}")
      t_sep += _run([py, "scripts/train.py", "--config=configs/ppo_cartpole.py",
                     f"--workdir={run_dir}", f"--config.lr={lr}", "--config.seeds=1",
                     f"--config.seed={1000 + s}",
                     f"--config.total_timesteps={ov.total_timesteps}",
                     f"--config.chunk_updates={ov.chunk_updates}",
                     f"--config.checkpoint_every={ov.checkpoint_every}"])
      with open(os.path.join(run_dir, "summary.json")) as f:
        separate[lr].append(json.load(f)["final"]["return"])
    print(f"separate: lr {lr:g}: {seeds} processes, {t_sep:.1f} s so far", flush=True)
  runs = len(picked) * seeds
  t_sep_64 = t_sep * len(lrs) * seeds / runs
  out = {"sweep_wall_s": t_sweep, "separate_runs_measured": runs,
         "separate_wall_s_measured": t_sep, "separate_wall_s_per_run": t_sep / runs,
         "separate_wall_s_64": t_sep_64, "extrapolated": runs < len(lrs) * seeds,
         "speedup": t_sep_64 / t_sweep, "cells": {}}
  print(f"\n| lr | sweep final return (8 seeds) | separate (8 processes) | Welch t |\n"
        f"|---|---|---|---|")
  for lr in picked:
    ma, mb, t = _welch(swept[lr], separate[lr])
    out["cells"][f"{lr:g}"] = {"sweep": swept[lr], "separate": separate[lr], "welch_t": t}
    print(f"| {lr:g} | {ma:.1f} | {mb:.1f} | {t:+.2f} |")
  print(f"\nsweep (64 runs, one process): {t_sweep:.1f} s; separate train.py: "
        f"{t_sep / runs:.1f} s per run, {t_sep_64:.1f} s for 64"
        + (f" (extrapolated from {runs} runs)" if out["extrapolated"] else "")
        + f"; speedup {out['speedup']:.1f}x")
  with open(os.path.join(work, "bench_sweep.json"), "w") as f:
    json.dump(out, f, indent=2)


if __name__ == "__main__":
  app.run(main)
