"""The horizon answer, part A: the anatomy of the policy gradient at fixed tabular policies.

  python3 scripts/horizon.py --config=configs/horizon.py:small --workdir=runs/horizon_small
  python3 scripts/horizon.py --config=configs/horizon.py:full --workdir=runs/horizon

For each probe (`anatomy.make_probe`: the credit probe at each sigma and T, the default
KeyChain as control at each T, COCOA's corridor at each L) and each of three fixed
policies (`policies`: the uniform one, and the logits `beta` on every rewarding action
with beta bisected so the exact success is each `targets` value), `episodes` episodes
give every estimator's per-episode gradient (`anatomy.episode_gradients`; one compiled
program per probe, reused by the three policies). Against the exact gradient g* (DP,
`credit_jax/exact.py`), u = g* / |g*|, each estimator's per-unit estimates g_i (a unit:
an episode; a group of `group_size` episodes for grpo / rloo) give

  * `rel_err`: |mean g - g*| / |g*| (bias plus sampling noise; `noise_floor`
    sqrt(tr Cov / n) / |g*| is what noise alone would give), `cosine` (mean g, g*);
  * `bias_along`: (mean g . u - |g*|) / |g*|, the relative bias along g*;
  * `var_along`: the variance of g_i . u per unit;
  * `snr_step`: (mean g . u)^2 / var_along / (env steps per unit): the signal-to-noise
    ratio one env step buys (an average of n units has n times a unit's SNR);

each with a 95% percentile bootstrap interval over units (`bootstrap` resamples, the same
resamples for every estimator of a set). Predictions (stated before the run, on
docs/results/horizon_answer.md) are checked per cell: GAE(lambda)'s bias along g* under
the observation critic equals `anatomy.gae_prediction`'s (1 - E[lambda^d] per pivotal
step), under the oracle critic 0; REINFORCE's SNR per episode falls as 1/T (the local
log-log slope of snr_step x T against T, with bootstrap intervals).

Cells are saved as they finish (`cells/<probe>/<policy>.json`); a rerun skips them.

Part B (`config.part` "B" or "AB"; configs/horizon.py's variants run "AB"), tabular
policies learning the credit probe and the control, is `learning.py` (the arms, the
vmapped training program, resumable cells; its fields are `config.learning`) and
`part_b.py` (tuning, the reported cells, survival statistics, pages under `workdir/B`).
"""
from __future__ import annotations

import csv
import json
import os
import time
from typing import Dict, List

import jax
import ml_collections
import numpy as np

from credit_jax.algos import ConfigError
from credit_jax.experiments import report
from credit_jax.experiments.horizon_answer import anatomy, learning

__all__ = ["default_config", "num_seeds", "probes_of", "run", "unit_statistics",
           "validate_config"]


def default_config() -> ml_collections.ConfigDict:
  """Part A at full size, part B's fields at full size (configs/horizon.py:full runs
  both: `part` "AB")."""
  c = ml_collections.ConfigDict()
  c.part = "A"                       # the parts of issue 51 this study runs: A, B or AB
  c.horizons = (10, 30, 100, 300, 1000, 3000)   # T of the credit probe and the control
  c.sigmas = (0.0, 0.5)              # the probe's episode reward-noise std (per step / sqrt T)
  c.control = True                   # the default KeyChain at every T as the control
  c.corridor_lengths = (23, 103, 300, 1000)     # COCOA's corridor lengths L
  c.num_pivotal = 3                  # k
  c.num_actions = 4                  # A
  c.targets = (0.3, 0.7)             # exact success of the tuned policies (plus uniform)
  c.episodes = 4096                  # episodes per (probe, policy), each set
  c.lambdas = (1.0, 0.99, 0.95, 0.9) # GAE's lambdas
  c.loo_batch = 64                   # REINFORCE's leave-one-out batch (independent episodes)
  c.group_size = 8                   # GRPO / RLOO group: episodes from one reset
  c.bootstrap = 200                  # bootstrap resamples for the intervals
  c.chunk_steps = 400_000            # env steps per set per compiled chunk (memory)
  c.seed = 0
  c.learning = learning.default_config()   # part B (learning.py, part_b.py)
  return c


def num_seeds(config) -> int:
  del config
  return 1


def validate_config(config) -> None:
  """Raises ConfigError naming the first field that cannot run."""
  if config.part not in ("A", "B", "AB"):
    raise ConfigError(f"config.part: 'A', 'B' or 'AB', got {config.part!r}")
  if "B" in config.part:
    learning.validate_config(config.learning)
  unit = int(np.lcm(int(config.loo_batch), int(config.group_size)))
  if int(config.episodes) < unit or int(config.episodes) % unit:
    raise ConfigError(f"config.episodes: must be a positive multiple of lcm(loo_batch, "
                      f"group_size) = {unit}, got {config.episodes}")
  if int(config.loo_batch) < 2 or int(config.group_size) < 2:
    raise ConfigError("config.loo_batch and config.group_size must be >= 2")
  for t in config.targets:
    if not 0.0 < float(t) < 1.0:
      raise ConfigError(f"config.targets: each must lie in (0, 1), got {t}")
  for lam in config.lambdas:
    if not 0.0 <= float(lam) <= 1.0:
      raise ConfigError(f"config.lambdas: each must lie in [0, 1], got {lam}")
  if int(config.bootstrap) < 20:
    raise ConfigError(f"config.bootstrap: must be >= 20, got {config.bootstrap}")


def probes_of(config) -> List[tuple]:
  """(family, horizon, sigma) of every probe, in run order: shortest first, so a run cut
  short has every family at its shorter lengths."""
  out = []
  for sigma in config.sigmas:
    out += [("probe", int(t), float(sigma)) for t in config.horizons]
  if config.control:
    out += [("control", int(t), 0.0) for t in config.horizons]
  out += [("corridor", int(n), 0.0) for n in config.corridor_lengths]
  return sorted(out, key=lambda p: p[1])


def unit_statistics(units: np.ndarray, g_star: np.ndarray, steps_per_unit: int,
                    counts: np.ndarray) -> Dict[str, object]:
  """Statistics of per-unit estimates `units [n, P]` against `g_star [P]` (module doc),
  with percentile intervals from bootstrap resample `counts [B, n]` (how often each unit
  is drawn)."""
  n = units.shape[0]
  if units.ndim != 2 or units.shape[1] != g_star.shape[0] or counts.shape[1] != n:
    raise ValueError(f"units must be [n, P] with P = {g_star.shape[0]} and counts "
                     f"[B, n], got {units.shape}, {counts.shape}")
  norm = float(np.linalg.norm(g_star))
  u = g_star / norm
  proj = units @ u                                           # [n]

  def stats(weights):                                        # weights [B, n], rows sum n
    mean = weights @ units / n                               # [B, P]
    m_u = weights @ proj / n
    var = weights @ proj ** 2 / n - m_u ** 2
    var = var * n / (n - 1)
    return {"rel_err": np.linalg.norm(mean - g_star, axis=-1) / norm,
            "cosine": mean @ g_star / (np.linalg.norm(mean, axis=-1) * norm + 1e-30),
            "bias_along": m_u / norm - 1.0,
            "var_along": var,
            "snr_step": m_u ** 2 / np.maximum(var, 1e-30) / steps_per_unit}
  point = {k: float(v[0]) for k, v in stats(np.ones((1, n))).items()}
  boot = stats(counts.astype(np.float64))
  out: Dict[str, object] = dict(point)
  for k, v in boot.items():
    out[k + "_ci"] = [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))]
  cov_trace = float(np.sum(units.var(axis=0, ddof=1)))
  out["noise_floor"] = float(np.sqrt(cov_trace / n)) / norm
  out["units"], out["steps_per_unit"] = int(n), int(steps_per_unit)
  out["log_snr_boot"] = np.log(np.maximum(boot["snr_step"], 1e-300)).tolist()
  return out


def _policy_names(config) -> List[str]:
  return ["uniform"] + [f"success{float(t):g}" for t in config.targets]


def _policy(config, probe, index: int) -> tuple:
  """(name, beta, exact success) of policy `index` of `_policy_names` (tuned here)."""
  name = _policy_names(config)[index]
  if index == 0:
    return name, 0.0, float(anatomy.success_of(probe)(anatomy.policy_at(probe, 0.0)))
  beta, success = anatomy.tune_policy(probe, float(config.targets[index - 1]))
  return name, beta, success


def _cell(config, probe, chunk_fn, policy, beta, success, key) -> dict:
  """One (probe, policy): every estimator's statistics and the predictions' inputs."""
  w = anatomy.policy_at(probe, beta)
  j, g = anatomy.exact_gradient(probe, w)
  g = g.ravel()
  watch = time.time()
  grads = anatomy.episode_gradients(probe, w, key, int(config.episodes),
                                    tuple(config.lambdas), int(config.loo_batch),
                                    int(config.group_size), int(config.chunk_steps),
                                    chunk_fn=chunk_fn)
  sample_s = time.time() - watch
  n, k = int(config.episodes), int(config.group_size)
  rng = np.random.default_rng(int(config.seed) + 7)
  boots = int(config.bootstrap)
  counts_ep = rng.multinomial(n, np.full(n, 1.0 / n), size=boots)
  counts_gr = rng.multinomial(n // k, np.full(n // k, 1.0 / (n // k)), size=boots)
  estimators = {}
  for name in anatomy.estimator_names(probe, config.lambdas):
    x = grads[name].reshape(n, -1).astype(np.float64)
    steps = anatomy.steps_per_episode(probe, name)
    if name in ("grpo", "rloo"):
      estimators[name] = unit_statistics(x.reshape(n // k, k, -1).mean(1), g, k * steps,
                                         counts_gr)
    else:
      estimators[name] = unit_statistics(x, g, steps, counts_ep)
  predictions = {}
  for lam in config.lambdas:
    g_pred, scalar = anatomy.gae_prediction(probe, w, float(lam))
    g_pred = g_pred.ravel()
    norm = float(np.linalg.norm(g))
    predictions[f"{float(lam):g}"] = {
        "bias_along": float(g_pred @ g / norm ** 2 - 1.0),
        "rel_err": float(np.linalg.norm(g_pred - g) / norm),
        "one_minus_E_lambda_d": scalar}
  return {"probe": probe.name, "family": probe.family, "horizon": probe.horizon,
          "sigma": probe.sigma, "policy": policy, "beta": beta, "exact_success": success,
          "exact_J": j, "grad_norm": float(np.linalg.norm(g)),
          "sampled_success": np.asarray(grads["success"]).mean(axis=1).tolist(),
          "episodes": n, "sample_s": sample_s, "estimators": estimators,
          "gae_prediction": predictions}


def run(config, workdir: str, log=print) -> dict:
  """Runs the parts of `config.part`: A (module doc; writes cells/, summary.json,
  results.md, results.csv and the figures in `workdir`) and B (part_b.py; the same under
  `workdir/B`); returns A's summary, with B's under "B" (B's alone for part "B")."""
  validate_config(config)
  summary = run_a(config, workdir, log) if "A" in config.part else None
  if "B" in config.part:
    from credit_jax.experiments.horizon_answer import part_b   # pylint: disable=g-import-not-at-top
    b = part_b.run(config, workdir, log)
    if summary is None:
      return b
    summary["B"] = b
  return summary


def run_a(config, workdir: str, log=print) -> dict:
  """Part A alone (module doc)."""
  os.makedirs(os.path.join(workdir, "cells"), exist_ok=True)
  watch = report.Stopwatch()
  records = []
  for family, horizon, sigma in probes_of(config):
    probe = anatomy.make_probe(family, horizon, sigma, int(config.num_pivotal),
                               int(config.num_actions))
    folder = os.path.join(workdir, "cells", probe.name.replace("/", "_"))
    os.makedirs(folder, exist_ok=True)
    chunk_fn = None
    for p_index, name in enumerate(_policy_names(config)):
      path = os.path.join(folder, f"{name}.json")
      if os.path.exists(path):   # a finished cell: read, not recomputed
        with open(path) as f:
          records.append(json.load(f))
        continue
      policy, beta, success = _policy(config, probe, p_index)
      if chunk_fn is None:
        chunk_fn = anatomy.make_chunk(probe, tuple(config.lambdas), int(config.loo_batch),
                                      int(config.group_size))
      key = jax.random.fold_in(jax.random.PRNGKey(int(config.seed)), p_index)
      rec = _cell(config, probe, chunk_fn, policy, beta, success, key)
      with open(path + ".tmp", "w") as f:
        json.dump(rec, f)
      os.replace(path + ".tmp", path)
      records.append(rec)
      log(f"horizon A {probe.name} {policy}: exact success {success:.3f}, "
          f"{rec['sample_s']:.1f}s sampling | {watch.seconds():.0f}s")
  from credit_jax.experiments.horizon_answer import pages   # pylint: disable=g-import-not-at-top
  summary = pages.summarise(config, records)
  markdown = pages.markdown(config, summary, records, watch.seconds())
  pages.write_csv(os.path.join(workdir, "results.csv"), records)
  pages.figures(workdir, config, records, summary)
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write(markdown)
  report.write_summary(workdir, summary, markdown)
  return summary
