"""Exercise 5, part A: tree search against decoding baselines at matched compute.

Per point (a prior, k pivotal steps of KeyChain-v0), on `num_tasks` start states shared by
every method, we run the tree search (`credit_jax.search.make_search`, the prior as its
policy) and the baselines of `decoding.py` (this package): greedy, best-of-M at each of
`temperatures`, sampling without replacement (M distinct sequences), beam search over
action sequences and beam search over distinct states (`dedup`). A task is solved when the
method returns a complete successful episode; rates carry Wilson 95% intervals.

Compute is counted three ways, per task:
  * env steps: transitions computed (the search's expansions, rollout steps and the
    final replay of its best episode; M x T for M sampled episodes; see baselines.py);
  * policy evaluations: logits computed at live states (the search: its root, one per
    expansion and rollout step, and T for the replay: its env steps + 1);
  * wall time: seconds of the compiled call for all tasks (min over `timing_repeats`).
Two matchings: "steps_and_evals" runs each baseline at the largest budget whose env steps
and policy evaluations both stay <= the search's (env steps bind for every baseline,
since the search's evaluations are its steps + 1); "wall_time" scales that budget by
the ratio of the search's time to the baseline's and re-runs it (capped at
`max_wall_budget`). Greedy (T steps) always fits and joins both comparisons.

Priors (tabular, `credit_jax.diagnostics`; rows per cue):
  uniform      every action 1/A (random success (1/A)^k);
  informative  the right key gets `prior_q`, the others share the rest (q^k);
  adversarial  as informative for the cues c >= A/2; for c < A/2 the wrong key (c + 1) % A
               gets `prior_q` and the right key is second with `adversarial_right`, so
               greedy fails wherever such a cue appears.
Greedy and best-of-M have exact success rates here (`exact_any_success`), shown beside
the measured ones.
"""
from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from credit_jax import diagnostics as dg
from credit_jax import envs, rollout
from credit_jax import search as search_lib
from credit_jax.experiments import report
from credit_jax.experiments.tree_search import decoding as bl

PRIORS = ("uniform", "informative", "adversarial")
MATCHINGS = ("steps_and_evals", "wall_time")
# Baselines that merge equal environment states (the tree search does not): verdicts
# are given against all baselines and against the sequence-level ones alone.
STATE_METHODS = ("beam_dedup",)


def prior_table(kind: str, num_actions: int, q: float = 0.5, right: float = 0.3):
  """[A + 1, A] float32 logits of a tabular prior (module docstring); row 0: distractors."""
  a = num_actions
  if kind == "uniform":
    return np.zeros((a + 1, a), np.float32)
  if kind not in ("informative", "adversarial"):
    raise ValueError(f"prior must be one of {PRIORS}, got {kind!r}")
  probs = np.full((a + 1, a), 1.0 / a)
  for c in range(a):
    row = np.full(a, (1.0 - q) / (a - 1))
    row[c] = q
    if kind == "adversarial" and c < a // 2:
      rest = (1.0 - q - right) / (a - 2) if a > 2 else 0.0
      row = np.full(a, rest)
      row[(c + 1) % a], row[c] = q, right
    probs[1 + c] = row
  return np.log(np.maximum(probs, 1e-30)).astype(np.float32)


def right_probs(table, temperature: float = 1.0, greedy: bool = False):
  """[A] probability that a pivotal step with cue c is answered right, per c."""
  rows = np.asarray(table, np.float64)[1:]
  if greedy:   # jnp.argmax: the first maximal index
    return (np.argmax(rows, axis=1) == np.arange(rows.shape[1])).astype(np.float64)
  z = rows / temperature
  z = np.exp(z - z.max(1, keepdims=True))
  return np.diag(z / z.sum(1, keepdims=True))


def exact_any_success(r, k: int, m: int) -> float:
  """P(at least one of m episodes succeeds) for a task of k i.i.d. uniform cues, each
  answered right with probability r[cue] (episodes independent given the task)."""
  r = np.asarray(r, np.float64)
  a, total = r.shape[0], 0.0
  for combo in itertools.combinations_with_replacement(range(a), k):
    counts = np.bincount(combo, minlength=a)
    weight = math.factorial(k) / np.prod([math.factorial(c) for c in counts]) / a ** k
    p = float(np.prod(r[list(combo)]))
    total += weight * (1.0 if p >= 1.0 else -math.expm1(m * math.log1p(-p)))
  return total


class _Runner:
  """One KeyChain env and its tasks; compiles each (method, budget) once and times it."""

  def __init__(self, config, k, key):
    self.config, self.k = config, int(k)
    self.a, self.horizon, self.n = (int(config.num_actions), int(config.horizon),
                                    int(config.num_tasks))
    self.env, self.env_params = envs.make(config.env_name, horizon=self.horizon,
                                          num_pivotal=self.k, num_actions=self.a)
    self.obs0, self.states0 = rollout.reset(self.env, self.env_params, key, self.n)
    self._compiled = {}
    a = self.a
    self.logits_fn = lambda t, obs: t[dg.keychain_context(obs, a)]

  def _build(self, method, budget):
    env, fn_args, T = self.env, (self.env, self.logits_fn), self.horizon
    if method == "search":
      s = self.config.search
      fn = search_lib.make_search(*fn_args, num_simulations=budget, max_depth=T,
                                  selection=s.selection, rollout=s.rollout)
      def run(table, key, temperature, num_samples, states0, obs0):
        del temperature, num_samples
        out = fn(table, self.env_params, key, states0, obs0, exploration=s.exploration)
        steps = out.stats.env_steps + T           # + the replay of the best episode
        return out.stats.success, steps, steps + 1
      return run
    make = {"greedy": lambda: bl.make_greedy(*fn_args, max_depth=T),
            "best_of_m": lambda: bl.make_best_of_m_streamed(*fn_args, max_depth=T),
            "swor": lambda: bl.make_sampling_without_replacement(
                *fn_args, num_samples=budget, max_depth=T),
            "beam": lambda: bl.make_beam_search(*fn_args, width=budget, max_depth=T),
            "beam_dedup": lambda: bl.make_beam_search(*fn_args, width=budget, max_depth=T,
                                                      dedup=True)}[method]()
    del env
    def run(table, key, temperature, num_samples, states0, obs0):
      kw = {} if method == "greedy" else {"temperature": temperature}
      extra = (num_samples,) if method == "best_of_m" else ()
      out = make(table, self.env_params, key, states0, obs0, *extra, **kw)
      return out.success, out.env_steps, out.policy_evals
    return run

  def run(self, method, budget, table, key, temperature=1.0):
    """(success [n] bool, env steps [n], policy evals [n], wall seconds of the call).

    Best-of-M takes M at call time (one compile per environment); the others compile
    once per (method, budget)."""
    cache = (method,) if method == "best_of_m" else (method, int(budget))
    # The tasks are arguments, not closed-over constants embedded in every executable.
    args = (jnp.asarray(table), key, jnp.float32(temperature), jnp.int32(budget),
            self.states0, self.obs0)
    if cache not in self._compiled:
      self._compiled[cache] = jax.jit(self._build(method, int(budget))).lower(
          *args).compile()
    compiled = self._compiled[cache]
    best = math.inf
    for _ in range(max(1, int(self.config.timing_repeats))):
      watch = report.Stopwatch()
      out = jax.block_until_ready(compiled(*args))
      best = min(best, watch.seconds())
    return (*jax.device_get(out), best)


def _record(name, budget, out, n, exact=None):
  """One method's row: success with its Wilson interval, exact rate, costs per task."""
  success, steps, evals, seconds = out
  solved = int(np.sum(success))
  low, high = report.wilson_interval(solved, n)
  return {"method": name, "budget": int(budget), "solved": solved, "success": solved / n,
          "ci_low": low, "ci_high": high, "exact": exact,
          "env_steps": float(np.mean(steps)), "policy_evals": float(np.mean(evals)),
          "wall_ms_per_task": 1e3 * float(seconds) / n}


def beam_cost(width: int, num_actions: int, horizon: int):
  """(env steps, policy evals) of a width-W beam (or W sequences without replacement)
  whose prefixes all run the full horizon: sum over depths of min(W, A^t) live prefixes."""
  live = [min(width, num_actions ** t) for t in range(horizon + 1)]
  return sum(live[1:]), sum(live[:-1])


def matched_budget(method, steps, evals, a, horizon):
  """The largest budget (M or width) whose env steps stay <= `steps` and whose policy
  evaluations stay <= `evals` (the search's means per task)."""
  if method in ("swor", "beam"):
    lo, hi = 1, max(1, int(steps))
    while lo < hi:   # beam_cost grows with the width
      mid = (lo + hi + 1) // 2
      s, e = beam_cost(mid, a, horizon)
      lo, hi = (mid, hi) if (s <= steps and e <= evals) else (lo, mid - 1)
    return lo
  per_step = a if method == "beam_dedup" else 1   # dedup steps every child
  return max(1, int(min(steps / per_step, evals) // horizon))


def measure_point(runner, prior, key):
  """Part A for one (prior, k): the search and every baseline at each matching."""
  c, n, a, T, k = runner.config, runner.n, runner.a, runner.horizon, runner.k
  table = prior_table(prior, a, float(c.prior_q), float(c.adversarial_right))
  rows = {}

  def run(method, budget, temperature=1.0):
    name = f"best_of_m@{temperature:g}" if method == "best_of_m" else method
    if (name, budget) not in rows:
      out = runner.run(method, budget, table, jax.random.fold_in(
          key, zlib_key(f"{name}/{budget}")), temperature)
      exact = None
      if method == "greedy":
        exact = exact_any_success(right_probs(table, greedy=True), k, 1)
      elif method == "best_of_m":
        exact = exact_any_success(right_probs(table, temperature), k, budget)
      rows[(name, budget)] = _record(name, budget, out, n, exact)
    return rows[(name, budget)]

  search = run("search", int(c.search.simulations))
  methods = ("best_of_m", "swor", "beam", "beam_dedup")
  matched, best, best_sequence = {}, {}, {}
  for matching in MATCHINGS:
    recs = [run("greedy", 1)]
    for method in methods:
      budget = matched_budget(method, search["env_steps"], search["policy_evals"], a, T)
      if matching == "wall_time":   # scale by the time ratio at the compute-matched budget
        ratio = search["wall_ms_per_task"] / max(run(method, budget)["wall_ms_per_task"],
                                                 1e-9)
        budget = int(np.clip(round(budget * ratio), 1, int(c.max_wall_budget)))
      temps = tuple(c.temperatures) if method == "best_of_m" else (1.0,)
      recs += [run(method, budget, t) for t in temps]
    matched[matching] = recs
    best[matching] = verdict(search, recs)
    best_sequence[matching] = verdict(
        search, [r for r in recs if r["method"] not in STATE_METHODS])
  r1 = right_probs(table)
  return {"prior": prior, "num_pivotal": k, "tasks": n,
          "episode_success": exact_any_success(r1, k, 1),
          "sampling_at_group_size": exact_any_success(r1, k, int(c.group_size)),
          "search": search, "matched": matched, "best": best,
          "best_sequence": best_sequence}


def verdict(search, recs):
  """The best of `recs` (highest measured success) and how it compares with the search:
  "search better" / "baseline better" when the Wilson intervals do not overlap."""
  top = max(recs, key=lambda r: r["success"])
  text = ("search better" if search["ci_low"] > top["ci_high"] else
          "baseline better" if top["ci_low"] > search["ci_high"] else
          "not resolved (intervals overlap)")
  return {"method": top["method"], "budget": top["budget"], "success": top["success"],
          "ci_low": top["ci_low"], "ci_high": top["ci_high"], "verdict": text}


def zlib_key(text: str) -> int:
  """A stable 31-bit integer for `text` (folds a method's name into its PRNG key)."""
  import zlib  # pylint: disable=g-import-not-at-top
  return zlib.crc32(text.encode()) & 0x7FFFFFFF


def measure_points(config, key, log):
  """Every point of `config.points`, grouped by k (one environment and compile per k)."""
  points = [None] * len(config.points)
  by_k = {}
  for i, (prior, k) in enumerate(config.points):
    by_k.setdefault(int(k), []).append((i, prior))
  for k, items in sorted(by_k.items()):
    runner = _Runner(config, k, jax.random.fold_in(key, k))
    for i, prior in items:
      lap = report.Stopwatch()
      p = measure_point(runner, prior, jax.random.fold_in(key, 1000 + i))
      points[i] = p
      s = p["search"]
      said = "; ".join(
          f"{m}: {b['method']} {b['success']:.3f} [{b['ci_low']:.3f}, {b['ci_high']:.3f}]"
          f" {b['verdict']}" for m in MATCHINGS for b in (p["best_sequence"][m],))
      log(f"point {i + 1}/{len(points)} {prior} k={k} p={p['episode_success']:.1e}: "
          f"search {s['success']:.3f} [{s['ci_low']:.3f}, {s['ci_high']:.3f}] at "
          f"{s['env_steps']:.0f} steps | best sequence baseline {said} | "
          f"{lap.seconds():.1f}s")
  return points


LABELS = {"search": "tree search", "greedy": "greedy", "swor": "without replacement",
          "beam": "beam (sequences)", "beam_dedup": "beam (states)"}


def label(method: str) -> str:
  """A method's display name ("best_of_m@0.5" -> "best-of-M, T=0.5")."""
  if method.startswith("best_of_m@"):
    return f"best-of-M, temp {method.split('@')[1]}"
  return LABELS.get(method, method)


def point_label(p) -> str:
  return f"{p['prior']} k={p['num_pivotal']}"


def plot(points, workdir, load=None):
  """search_vs_baselines.png: success with Wilson 95% bars per point, one panel per
  matching; returns its path."""
  fig, axes = report.figure(len(MATCHINGS), 1, figsize=(14, 4.2 * len(MATCHINGS)))
  x = np.arange(len(points))
  for ax, matching in zip(axes[:, 0], MATCHINGS):
    methods = ["search"] + [r["method"] for r in points[0]["matched"][matching]]
    width = 0.85 / len(methods)
    for j, method in enumerate(methods):
      recs = [p["search"] if method == "search" else
              next(r for r in p["matched"][matching] if r["method"] == method)
              for p in points]
      y = np.array([r["success"] for r in recs])
      err = np.array([[r["success"] - r["ci_low"] for r in recs],
                      [r["ci_high"] - r["success"] for r in recs]])
      ax.bar(x + (j - (len(methods) - 1) / 2) * width, y, width, yerr=err, capsize=2,
             label=label(method), color="k" if method == "search" else f"C{j}")
    ax.set_xticks(x, [f"{point_label(p)}\np={p['episode_success']:.1e}" for p in points],
                  fontsize=8)
    ax.set_ylim(0, 1.2)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_ylabel("tasks solved (Wilson 95%)")
    what = ("matched on env steps and policy evaluations" if matching == "steps_and_evals"
            else "matched on wall time")
    ax.set_title(f"KeyChain-v0, {points[0]['tasks']} tasks per point: search vs baselines "
                 f"{what}" + (f" (load average {load:.1f})" if load is not None else ""),
                 fontsize=10)
    ax.grid(axis="y", alpha=0.3)
  axes[0, 0].legend(fontsize=7, ncol=len(methods), loc="upper center")
  return report.save_figure(fig, workdir, "search_vs_baselines.png")


def conclusions(points):
  """Markdown bullets, generated from the verdicts: per matching and baseline set, the
  points where search is better, where a baseline is, and where neither is resolved."""
  lines = []
  for matching in MATCHINGS:
    for key, which in (("best_sequence", "the best sequence-level baseline"),
                       ("best", "the best of all baselines (beam over states included)")):
      groups = {}
      for p in points:
        b = p[key][matching]
        groups.setdefault(b["verdict"], []).append(
            f"{point_label(p)} ({label(b['method'])} {b['success']:.3f} vs search "
            f"{p['search']['success']:.3f})")
      said = "; ".join(f"{v}: {', '.join(ps)}" for v, ps in sorted(groups.items()))
      lines.append(f"- matched on {matching.replace('_', ' ')}, against {which}: {said}.")
  return lines + ["- Search better or baseline better means the Wilson 95% intervals do "
                  "not overlap; the best baseline is the highest measured of several, "
                  "which favours the baselines slightly."]


def _cell(r):
  exact = f", exact {r['exact']:.3f}" if r.get("exact") is not None else ""
  return (f"{r['success']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] "
          f"({r['budget']}{exact})")


def markdown(s):
  """Part A's section of summary.md: setup, the search's cost, one table per matching."""
  points = s["points"]
  lines = [
      "## Search against baselines at matched compute", "",
      f"KeyChain-v0, T = {s['horizon']}, A = {s['num_actions']}; {s['num_tasks']} tasks "
      "(start states) per point, shared by every method; one seed per point. Search: "
      f"{s['simulations']} simulations ({s['selection']}, {s['rollout']} rollouts) with the "
      "prior as policy. Priors: uniform; informative (right key "
      f"{s['prior_q']}); adversarial (for half the cues the right key is second, "
      f"{s['adversarial_right']}, behind a wrong one at {s['prior_q']}). Rates are measured "
      "with Wilson 95% intervals; cells give the budget (M samples or width) in "
      "parentheses, and the exact rate where one is known (greedy, best-of-M).", "",
      "Compute per task: env steps (transitions computed; the search's include its "
      "rollouts and the final replay), policy evaluations (logits computed), wall time "
      "(min of repeated compiled calls over all tasks, on a shared 2-core CPU: load "
      f"average {s.get('load_average', float('nan')):.1f} when part A started, so read "
      "times as rough).", "",
      "### Where search stands", "",
      *conclusions(points), "",
      "### The search's cost and success", ""]
  lines += report.table(
      ("point", "p (one episode, temp 1)", f"best-of-{s['group_size']} (exact)", "search",
       "env steps", "policy evals", "wall ms / task"),
      [(point_label(p), f"{p['episode_success']:.2e}", f"{p['sampling_at_group_size']:.3f}",
        _cell(p["search"]), f"{p['search']['env_steps']:.0f}",
        f"{p['search']['policy_evals']:.0f}", f"{p['search']['wall_ms_per_task']:.3f}")
       for p in points])
  for matching in MATCHINGS:
    title = {"steps_and_evals": "Matched on env steps and policy evaluations (each "
             "baseline <= the search on both)",
             "wall_time": "Matched on wall time (budget scaled by the measured time ratio)"}
    methods = [r["method"] for r in points[0]["matched"][matching]]
    lines += ["", f"### {title[matching]}", ""]
    lines += report.table(
        ["point", "search"] + [label(m) for m in methods]
        + ["best sequence baseline: verdict", "best of all: verdict"],
        [[point_label(p), _cell(p["search"])] + [_cell(r) for r in p["matched"][matching]]
         + [f"{label(p[b][matching]['method'])}: {p[b][matching]['verdict']}"
            for b in ("best_sequence", "best")]
         for p in points])
    cost, unit = (("wall_ms_per_task", "wall ms") if matching == "wall_time"
                  else ("env_steps", "env steps"))
    lines += ["", f"Measured {unit} per task of each baseline: " + "; ".join(
        f"{point_label(p)}: " + ", ".join(f"{label(r['method'])} {r[cost]:.3g}"
                                          for r in p["matched"][matching])
        for p in points) + "."]
  return lines + [""]
