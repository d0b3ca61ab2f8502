"""Random and optimal success against the horizon for every probe and switch.

  python3 -m credit_jax.experiments.probes.figure docs/figures/probes_random_optimal.png

Three panels: KeyChain (k = 3, A = 4) with each shortcut switch alone, all together and
none; LinearKeyToDoor; KeyToDoor with its phase options. Random success is exact
(`random_success` of each env: (1/A)^k, 1/16, dynamic programming); optimal success is
measured by running the oracle policy (`correct_action(state)`, which reads the state)
for KeyChain and the corridor, and exact (dynamic programming) for KeyToDoor.
"""
from __future__ import annotations

import sys
from typing import Dict, List, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from credit_jax import envs
from credit_jax.experiments import report
from credit_jax.experiments.probes import study as probes

HORIZONS = (10, 30, 100, 300, 1000, 3000, 10_000)
SIMULATED = (10, 100, 1000)   # where the oracle policy is run
CORRIDORS = (23, 53, 103, 303, 1000)
DISTRACTORS = (10, 30, 100, 300, 1000)
KEYTODOOR = {   # label -> KeyToDoor options
    "3x3, fixed phases (default)": {},
    "3x3, phase_growth 0.1": {"phase_growth": 0.1},
    "3x3, phase_growth 0.1, carry_position": {"phase_growth": 0.1, "carry_position": True},
    "7x7, phase_growth 0.1, carry_position": {"room_size": 7, "phase_growth": 0.1,
                                              "carry_position": True},
}


def oracle_success(env, params, episodes: int, key) -> float:
  """Success rate of the policy that takes `env.correct_action(state)` at every step
  (0 where it is -1), over `episodes` episodes of `env.horizon` steps."""
  horizon = int(env.horizon)

  def one(k):
    _, state = env.reset(k, params)

    def body(s, _):
      a = jnp.maximum(env.correct_action(s), 0)
      _, s, r, _, info = env.step_env(k, s, a, params)
      return s, info.get("success", r > 0)
    return jnp.any(jax.lax.scan(body, state, None, length=horizon)[1])
  won = jax.jit(jax.vmap(one))(jax.random.split(key, episodes))
  return float(np.mean(np.asarray(won)))


def keychain_curves(horizons: Sequence[int] = HORIZONS, simulated=SIMULATED,
                    episodes: int = 64) -> Dict[str, dict]:
  """{setting: {"T", "random", "T_sim", "optimal"}} for probes.SETTINGS."""
  config = probes.default_config()
  out = {}
  for s in probes.SETTINGS:
    kwargs = {"num_pivotal": 3, "num_actions": 4, **probes.switch_kwargs(config, s)}
    rand, opt = [], []
    for t in horizons:
      env, params = envs.make("KeyChain-v0", horizon=int(t), **kwargs)
      rand.append(env.random_success())
      if t in simulated:
        opt.append(oracle_success(env, params, episodes, jax.random.key(int(t))))
    out[s] = {"T": list(horizons), "random": rand, "T_sim": list(simulated),
              "optimal": opt}
  return out


def corridor_curve(lengths: Sequence[int] = CORRIDORS, episodes: int = 64) -> dict:
  rand, opt = [], []
  for n in lengths:
    env, params = envs.make("LinearKeyToDoor-v0", length=int(n))
    rand.append(env.random_success())
    opt.append(oracle_success(env, params, episodes, jax.random.key(int(n))))
  return {"L": list(lengths), "random": rand, "optimal": opt}


def keytodoor_curves(lengths: Sequence[int] = DISTRACTORS) -> Dict[str, dict]:
  out = {}
  for label, kwargs in KEYTODOOR.items():
    rand, opt = [], []
    for n in lengths:
      env, params = envs.make("KeyToDoor-v0", max_distractor=int(n), **kwargs)
      rand.append(env.random_success(params))
      opt.append(env.optimal_success(params))
    out[label] = {"L": list(lengths), "random": rand, "optimal": opt}
  return out


def draw(path: str) -> List[str]:
  """Draws the three panels into `path` (PNG); returns one text line per curve."""
  import os  # pylint: disable=g-import-not-at-top
  kc, corridor, k2d = keychain_curves(), corridor_curve(), keytodoor_curves()
  fig, axes = report.figure(1, 3, figsize=(17, 5.5))
  ax = axes[0, 0]
  groups = {}   # settings with the same random curve share one line
  for s in probes.SETTINGS:
    groups.setdefault(tuple(kc[s]["random"]), []).append(s)
  for i, members in enumerate(groups.values()):
    label = ", ".join(members)
    if len(members) > 3:
      label = ", ".join(members[:3]) + ",\n  " + ", ".join(members[3:])
    ax.plot(kc[members[0]]["T"], kc[members[0]]["random"], "-" if i == 0 else "--",
            color=f"C{i}", label=f"random: {label}")
  for i, s in enumerate(probes.SETTINGS):
    ax.plot(kc[s]["T_sim"], kc[s]["optimal"], "o", ms=9 - i, mfc="none", color="k",
            label="optimal, every setting (oracle policy, 64 episodes)" if i == 0 else None)
  ax.set(xscale="log", yscale="log", ylim=(1e-20, 5), xlabel="episode length T",
         ylabel="success", title="KeyChain-v0, k = 3, A = 4\n"
         "pivotal_density 0.03: k = ceil(0.03 T)")
  ax.text(0.45, 0.8, "pivotal_density: 4^-90 and 4^-300\nat T = 3000 and 10^4 (off the axis)",
          transform=ax.transAxes, fontsize=8)
  ax.legend(fontsize=7, loc="lower left")
  ax = axes[0, 1]
  ax.plot(corridor["L"], corridor["random"], "-", label="random (exact 1/16)")
  ax.plot(corridor["L"], corridor["optimal"], "o--", label="optimal (oracle policy)")
  ax.set(xscale="log", yscale="log", ylim=(0.01, 2), xlabel="corridor length L",
         ylabel="treasure rate",
         title="LinearKeyToDoor-v0 (COCOA's corridor)\nrandom: exact; optimal: oracle policy")
  ax.legend(fontsize=8)
  ax = axes[0, 2]
  for i, (label, c) in enumerate(k2d.items()):
    ax.plot(c["L"], c["random"], "-", color=f"C{i}", label=f"random: {label}")
    ax.plot(c["L"], c["optimal"], "o:", color=f"C{i}", mfc="none",
            label="optimal (exact)" if i == 0 else None)
  ax.set(xscale="log", yscale="log", xlabel="distractor phase L", ylabel="success",
         title="KeyToDoor-v0 (exact, by dynamic programming)\n"
         "key and door phases 4 + floor(g L) steps")
  ax.legend(fontsize=7, loc="lower right")
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  report.save_figure(fig, os.path.dirname(path) or ".", os.path.basename(path))
  lines = [f"KeyChain {s}: random {kc[s]['random']} at T={kc[s]['T']}; optimal "
           f"{kc[s]['optimal']} at T={kc[s]['T_sim']}" for s in probes.SETTINGS]
  lines.append(f"LinearKeyToDoor: random {corridor['random']}, optimal "
               f"{corridor['optimal']} at L={corridor['L']}")
  lines += [f"KeyToDoor {label}: random {[round(x, 4) for x in c['random']]}, optimal "
            f"{c['optimal']} at L={c['L']}" for label, c in k2d.items()]
  return lines


if __name__ == "__main__":
  for line in draw(sys.argv[1] if len(sys.argv) > 1 else
                   "docs/figures/probes_random_optimal.png"):
    print(line)
