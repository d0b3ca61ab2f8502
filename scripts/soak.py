"""Soak test for XLA CPU hangs: one program, many fresh processes, A/B over XLA_FLAGS.

Not part of the test suite (a soak takes hours on a 2-core machine). Runs `PROGRAM`
(everything after `--`) `--runs` times per setting, each in a fresh subprocess with
XLA_FLAGS set by the setting, alternating the settings run by run (so that load on a
shared machine falls on every setting alike). A run is a *hang* when it exceeds
`--timeout` seconds, or when its process uses (almost) no CPU for `--idle` seconds in a
row (the XLA CPU wedge: every thread parked in a futex wait); a hung run's Python stacks
are dumped (SIGABRT -> faulthandler, when the program enabled it) and its process group
is killed. A run that exits non-zero is *failed*. At the end it prints, per setting, the
counts (finished / hung / failed), and the wall and CPU time of the finished runs (on a
shared machine the CPU time is the steadier measure of a setting's cost).

  # the part of scripts/relabel.py that hung (GRPO relabeling, part b)
  nice -n 5 python3 scripts/soak.py --runs=20 --settings=default,sched_off \\
      --log=/tmp/soak_b.jsonl -- \\
      scripts/relabel.py --config=configs/relabel.py --config.parts=b --workdir={workdir}
  # a 16-seed PPO run
  nice -n 5 python3 scripts/soak.py --runs=20 --settings=default,eigen_off -- \\
      scripts/train.py --config=configs/ppo_cartpole.py --config.seeds=16 \\
      --config.total_timesteps=40960 --workdir={workdir}

A smaller program that runs the GRPO cell of part b in a loop (one compile, `--reps`
calls) is built in: `... -- scripts/soak.py grpo_cell --reps=10 --updates=30`.

`{workdir}` in the program's arguments becomes a fresh directory per run. A program
path ending in `.py` runs under this Python. Every setting names both flags explicitly
(also the defaults), so that entry points that add flags only when XLA_FLAGS does not
name them already (credit_jax/runtime/launch.py) leave it alone.
CPU time is read from /proc/<pid>/stat of the process and its threads (Linux); without
/proc only `--timeout` detects hangs.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

SCHED = "xla_cpu_enable_concurrency_optimized_scheduler"
EIGEN = "xla_cpu_multi_thread_eigen"
YNN = "xla_cpu_experimental_ynn_fusion_type"
# Setting name -> XLA_FLAGS. "default" spells out jaxlib 0.10's defaults; "none" sets no
# flag (for a program that adds none itself); "ynn_off" turns off XLA's YNNPACK fusions.
SETTINGS: Dict[str, str] = {
    "none": "",
    "ynn_off": f"--{YNN}=",
    "default": f"--{SCHED}=true --{EIGEN}=true",
    "sched_off": f"--{SCHED}=false --{EIGEN}=true",
    "eigen_off": f"--{SCHED}=true --{EIGEN}=false",
    "both_off": f"--{SCHED}=false --{EIGEN}=false",
}


def cpu_seconds(pid: int) -> Optional[float]:
  """User + system CPU seconds of process `pid` (all threads, and waited-for children),
  or None when /proc is unavailable or the process is gone."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      fields = f.read().rsplit(")", 1)[1].split()
  except OSError:
    return None
  ticks = os.sysconf("SC_CLK_TCK")
  # fields[0] is field 3 (state); utime, stime, cutime, cstime are fields 14-17.
  return sum(int(x) for x in fields[11:15]) / ticks


def thread_states(pid: int) -> str:
  """One line: how many threads of `pid` wait in which kernel function (/proc wchan)."""
  counts = collections.Counter()
  try:
    for tid in os.listdir(f"/proc/{pid}/task"):
      try:
        with open(f"/proc/{pid}/task/{tid}/wchan") as f:
          counts[f.read().strip() or "running"] += 1
      except OSError:
        counts["?"] += 1
  except OSError:
    return "(no /proc)"
  return ", ".join(f"{n} x {w}" for w, n in counts.most_common())


def native_stacks(pid: int, out_path: str) -> None:
  """Appends gdb's backtrace of every thread of `pid` to `out_path` (if gdb is there)."""
  with open(out_path, "a") as out:
    out.write("\n--- soak: native stacks (gdb) ---\n")
    out.flush()
    try:
      subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex",
                      "thread apply all bt 12"], stdout=out, stderr=subprocess.STDOUT,
                     timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
      out.write(f"(gdb failed: {e})\n")


def run_once(argv: List[str], xla_flags: str, timeout: float, idle: float,
             idle_cpu: float, out_path: str, gdb: bool = False) -> dict:
  """Runs `argv` with XLA_FLAGS=`xla_flags`; returns {status, wall, cpu, reason, load}."""
  load = os.getloadavg()[0]
  env = dict(os.environ, XLA_FLAGS=xla_flags, PYTHONFAULTHANDLER="1")
  env.setdefault("JAX_PLATFORMS", "cpu")
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  t0 = time.monotonic()
  with open(out_path, "w") as out:
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
  last_cpu, last_change, status, reason, cpu = 0.0, t0, None, "", None
  while status is None:
    try:
      rc = proc.wait(timeout=1.0)
      status = "finished" if rc == 0 else "failed"
      reason = f"exit code {rc}"
      break
    except subprocess.TimeoutExpired:
      pass
    now = time.monotonic()
    cpu = cpu_seconds(proc.pid)
    if cpu is not None and cpu - last_cpu > idle_cpu:
      last_cpu, last_change = cpu, now
    if now - t0 > timeout:
      status, reason = "hung", f"timeout {timeout:.0f} s"
    elif cpu is not None and now - last_change > idle:
      status, reason = "hung", f"no CPU for {now - last_change:.0f} s (cpu {cpu:.1f} s)"
  wall = time.monotonic() - t0
  if status == "hung":
    reason += f"; threads: {thread_states(proc.pid)}"
    if gdb:
      native_stacks(proc.pid, out_path)
    _kill(proc)
  after = resource.getrusage(resource.RUSAGE_CHILDREN)   # the whole run, once reaped
  cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
  return {"status": status, "wall": round(wall, 1), "cpu": round(cpu, 1),
          "reason": reason, "load": [round(load, 2), round(os.getloadavg()[0], 2)]}


def _kill(proc: subprocess.Popen) -> None:
  """SIGABRT (faulthandler dumps the Python stacks), then SIGKILL, the run's group."""
  for sig, wait in ((signal.SIGABRT, 10.0), (signal.SIGKILL, 10.0)):
    try:
      os.killpg(proc.pid, sig)
    except ProcessLookupError:
      return
    try:
      proc.wait(timeout=wait)
      return
    except subprocess.TimeoutExpired:
      continue


def summarize(records: List[dict]) -> str:
  """A table: per setting, counts and wall seconds (median, min-max) of finished runs."""
  by = collections.OrderedDict()
  for r in records:
    by.setdefault(r["setting"], []).append(r)
  lines = ["| setting | XLA_FLAGS | runs | finished | hung | failed | wall s (median, "
           "min-max, finished) | CPU s (median, finished) | load 1-min (min-max) |",
           "|---|---|---|---|---|---|---|---|---|"]
  for name, rs in by.items():
    counts = collections.Counter(r["status"] for r in rs)
    walls = [r["wall"] for r in rs if r["status"] == "finished"]
    cpus = [r["cpu"] for r in rs if r["status"] == "finished" and r["cpu"] is not None]
    wall = (f"{statistics.median(walls):.0f} ({min(walls):.0f}-{max(walls):.0f})"
            if walls else "-")
    cpu = f"{statistics.median(cpus):.0f}" if cpus else "-"
    loads = [x for r in rs for x in r.get("load", [])]
    load = f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"
    lines.append(f"| {name} | `{rs[0]['xla_flags']}` | {len(rs)} | "
                 f"{counts['finished']} | {counts['hung']} | {counts['failed']} | {wall} | "
                 f"{cpu} | {load} |")
  return "\n".join(lines)


def grpo_cell_loop(env: str, reps: int, updates: int, seeds: int) -> None:
  """The cell of scripts/relabel.py part b that hung, compiled once, run `reps` times.

  One compiled call trains GRPO on `env` (configs/relabel.py's cell) for the three
  relabeling modes x `seeds` seeds, vmapped, as relabel.py does; each repetition uses
  new keys and waits for the result. More executions per compile: more chances to hang.
  """
  import importlib.util  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from credit_jax import algos
  from credit_jax.algos import grpo_relabel
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  spec = importlib.util.spec_from_file_location(
      "hindsight_config", os.path.join(root, "configs", "relabel.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.grpo_config(env)
  config.num_updates = updates
  train = algos.make_train(config)
  arms = [grpo_relabel.mode_hparams(m) for m in grpo_relabel.MODES]
  hp = {k: np.repeat(np.array([a.get(k, float(v)) for a in arms], np.float32), seeds)
        for k, v in train.default_hparams.items()}
  fn = jax.jit(jax.vmap(train))
  t0 = time.perf_counter()
  compiled = fn.lower(jax.random.split(jax.random.PRNGKey(0), len(arms) * seeds),
                      hp).compile()
  print(f"compiled {env} x {len(arms) * seeds} in {time.perf_counter() - t0:.1f} s",
        flush=True)
  for rep in range(reps):
    t0 = time.perf_counter()
    keys = jax.random.split(jax.random.PRNGKey(rep), len(arms) * seeds)
    _, metrics = compiled(keys, hp)
    success = float(np.asarray(jax.device_get(metrics["success"]))[..., -1].mean())
    print(f"rep {rep}: {time.perf_counter() - t0:.1f} s, final success {success:.2f}",
          flush=True)


def main(args: Optional[List[str]] = None) -> int:
  args = sys.argv[1:] if args is None else args
  if args[:1] == ["grpo_cell"]:       # the built-in reproducer (a program to soak)
    cell = argparse.ArgumentParser(prog="soak.py grpo_cell")
    cell.add_argument("--env", default="GoalGrid-v0")
    cell.add_argument("--reps", type=int, default=10)
    cell.add_argument("--updates", type=int, default=30)
    cell.add_argument("--seeds", type=int, default=3)
    c = cell.parse_args(args[1:])
    grpo_cell_loop(c.env, c.reps, c.updates, c.seeds)
    return 0
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--runs", type=int, default=20, help="runs per setting")
  parser.add_argument("--settings", default="default,sched_off,eigen_off,both_off",
                      help=f"comma-separated names from {sorted(SETTINGS)}, or "
                           f"'name=XLA_FLAGS' for a custom one")
  parser.add_argument("--timeout", type=float, default=900.0,
                      help="seconds after which a run counts as hung")
  parser.add_argument("--idle", type=float, default=60.0,
                      help="seconds of (almost) no CPU after which a run counts as hung")
  parser.add_argument("--idle_cpu", type=float, default=0.2,
                      help="CPU seconds a run must use within --idle to count as alive")
  parser.add_argument("--gdb", action="store_true", help="dump a hung run's native "
                      "stacks with gdb (before it is killed)")
  parser.add_argument("--log", default=None, help="JSON-lines file, one record per run "
                      "(appended; an existing file's records are counted too)")
  parser.add_argument("--outdir", default=None, help="where each run's output and "
                      "workdir go (default: a fresh temporary directory)")
  parser.add_argument("program", nargs=argparse.REMAINDER,
                      help="-- then the program and its arguments")
  a = parser.parse_args(args)
  program = a.program[1:] if a.program[:1] == ["--"] else a.program
  if not program:
    parser.error("no program given (put it after --)")
  if program[0].endswith(".py"):
    program = [sys.executable] + program
  settings = {}
  for item in a.settings.split(","):
    name, _, flags = item.partition("=")
    if not flags and name not in SETTINGS:
      parser.error(f"unknown setting {name!r}; known: {sorted(SETTINGS)}")
    settings[name] = flags or SETTINGS[name]
  outdir = a.outdir or tempfile.mkdtemp(prefix="soak_")
  os.makedirs(outdir, exist_ok=True)
  label = " ".join(program[1:] if program[0] == sys.executable else program)
  records: List[dict] = []
  if a.log and os.path.exists(a.log):    # earlier records of the same program count too
    with open(a.log) as f:
      records = [r for r in map(json.loads, filter(str.strip, f))
                 if r["program"] == label]
  print(f"soak: {' '.join(program)}\n  outputs in {outdir}", flush=True)
  for i in range(a.runs):
    for name, flags in settings.items():
      tag = f"{name}_{len(records):03d}"
      argv = [x.replace("{workdir}", os.path.join(outdir, tag)) for x in program]
      r = run_once(argv, flags, a.timeout, a.idle, a.idle_cpu,
                   os.path.join(outdir, tag + ".out"), gdb=a.gdb)
      r.update(setting=name, xla_flags=flags, run=i, tag=tag,
               program=label,
               time=time.strftime("%Y-%m-%dT%H:%M:%S"))
      records.append(r)
      if a.log:
        with open(a.log, "a") as f:
          f.write(json.dumps(r) + "\n")
      print(f"[{i + 1}/{a.runs}] {name:10s} {r['status']:8s} wall {r['wall']:7.1f} s "
            f"cpu {r['cpu']} s load {r['load'][0]}  {r['reason']}  ({tag}.out)",
            flush=True)
  print(summarize(records), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
