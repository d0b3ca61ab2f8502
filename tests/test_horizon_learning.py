"""Part B of the horizon answer (credit_jax/experiments/horizon_answer/learning.py,
part_b.py): seed disjointness, every arm's env-step accounting, the arms' batch
gradients against part A's per-episode estimators, a resumed cell, the statistics."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax.algos import ConfigError
from credit_jax.experiments.horizon_answer import anatomy, learning, part_b
from configs import horizon as horizon_configs


@pytest.mark.parametrize("variant", ["small", "full"])
def test_tuning_and_reported_seeds_are_disjoint(variant):
  lc = horizon_configs.get_config(variant).learning
  learning.validate_config(lc)
  tune, report = learning.seed_lists(lc)
  assert len(tune) == lc.tune_seeds and len(report) == lc.seeds
  assert not set(tune) & set(report)


def test_overlapping_seeds_are_refused():
  lc = learning.default_config()
  lc.seed = lc.tune_seed + lc.tune_seeds - 1
  with pytest.raises(ConfigError, match="config.learning.seed"):
    learning.validate_config(lc)


def _tiny(**kw):
  lc = learning.default_config()
  lc.episodes, lc.group_size, lc.check_every = 8, 4, 2
  lc.vine_trajectories, lc.vine_k, lc.vine_points = 3, 2, 3
  for k, v in kw.items():
    lc[k] = v
  return lc


def test_vine_steps_by_hand():
  # T = 6, 3 points every 2 steps (0, 2, 4): vines of 6, 4, 2 steps, K = 2 each, plus
  # the trajectory's 6: 6 + 2 (6 + 4 + 2) = 30 per trajectory, 3 trajectories.
  assert learning.steps_per_update(_tiny(), "vine", 6) == 90
  assert learning.steps_per_update(_tiny(), "rloo", 6) == 48


@pytest.mark.parametrize("family,arms", [("probe", learning.ARMS),
                                         ("control", ("reinforce_loo", "vine"))])
def test_every_arm_counts_the_env_steps_it_ran(family, arms):
  lc = _tiny()
  probe = anatomy.make_probe(family, 6, 0.0, num_pivotal=2, num_actions=4)
  for arm in arms:
    init, chunk = learning.make_program(lc, probe, arm)
    states, steps, j = chunk(init(2), jnp.asarray([3, 4], jnp.uint32),
                             jnp.asarray([0.1, 0.1], jnp.float32), 0)
    expected = learning.steps_per_update(lc, arm, 6) * lc.check_every
    assert np.asarray(steps).tolist() == [expected] * 2, arm
    assert np.all((np.asarray(j) > 0) & (np.asarray(j) <= 1)), arm
    assert np.all(np.isfinite(np.asarray(states[0]))), arm


@pytest.mark.parametrize("family", ["probe", "control"])
def test_batch_gradients_equal_part_a_estimators(family):
  """On the same episodes, each arm's batch gradient is the mean of part A's
  per-episode estimator (tested there against the exact DP gradient)."""
  lc = _tiny(episodes=16)
  probe = anatomy.make_probe(family, 6, 0.0, num_pivotal=2, num_actions=4)
  beta, _ = anatomy.tune_policy(probe, 0.4)
  w = jnp.asarray(anatomy.policy_at(probe, beta) + 0.3 * np.asarray(
      jax.random.normal(jax.random.key(1), (probe.R, probe.A))), jnp.float32)
  keys = jax.random.split(jax.random.key(2), 16)
  reset = jax.random.split(jax.random.key(3), 16)
  roll = anatomy._keychain_rollout(probe, w, keys, reset)                 # noqa: SLF001
  lambdas = (1.0, 0.95)
  per_step = anatomy._advantages(probe, w, roll, lambdas, 16)             # noqa: SLF001
  per_episode = np.asarray(anatomy._per_episode(probe, roll[0], per_step))  # noqa: SLF001
  names = anatomy.estimator_names(probe, lambdas)
  pairs = {"reinforce_loo": "reinforce_loo", "ppo_obs_1": "gae_obs_1",
           "ppo_obs_0.95": "gae_obs_0.95", "ppo_oracle_1": "gae_oracle_1",
           "ppo_oracle_0.95": "gae_oracle_0.95", "cocoa_exact": "cocoa_exact"}
  for arm, name in pairs.items():
    got = np.asarray(learning.batch_gradient(lc, probe, arm, w, roll))
    want = per_episode[names.index(name)].mean(0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6, err_msg=arm)
  # cocoa_learned with the exact model is cocoa_exact.
  np.testing.assert_allclose(
      np.asarray(learning.batch_gradient(lc, probe, "cocoa_learned", w, roll, roll[5])),
      np.asarray(learning.batch_gradient(lc, probe, "cocoa_exact", w, roll)), rtol=1e-6)
  # PPO's surrogate at the behaviour policy has the GAE gradient (clipping inactive).
  adv = learning._gae(roll, "obs", 0.95)                                 # noqa: SLF001
  s_pos = learning._aggregate(probe, roll[0], roll[1], jnp.maximum(adv, 0.0)) / 16   # noqa: SLF001
  s_neg = learning._aggregate(probe, roll[0], roll[1], jnp.minimum(adv, 0.0)) / 16   # noqa: SLF001
  g = jax.grad(learning.ppo_surrogate)(w, w, s_pos, s_neg, 0.2)
  np.testing.assert_allclose(np.asarray(g), np.asarray(
      learning.batch_gradient(lc, probe, "ppo_obs_0.95", w, roll)), rtol=1e-4, atol=1e-6)


def test_rloo_gradient_by_numpy_loop():
  lc = _tiny(episodes=8, group_size=4)
  probe = anatomy.make_probe("probe", 6, 0.0, num_pivotal=2, num_actions=4)
  w = jnp.asarray(0.5 * np.asarray(jax.random.normal(jax.random.key(5), (probe.R, probe.A))),
                  jnp.float32)
  reset = jnp.repeat(jax.random.split(jax.random.key(6), 2), 4, axis=0)
  roll = anatomy._keychain_rollout(probe, w, jax.random.split(jax.random.key(7), 8), reset)  # noqa: SLF001
  row, action, reward = (np.asarray(x) for x in roll[:3])
  pi = np.asarray(jax.nn.softmax(w, axis=-1), np.float64)
  ret = reward.sum(0).reshape(2, 4).astype(np.float64)
  want = np.zeros((probe.R, probe.A))
  for g in range(2):
    for i in range(4):
      adv = ret[g, i] - (ret[g].sum() - ret[g, i]) / 3
      b = g * 4 + i
      for t in range(6):
        score = -pi[row[t, b]].copy()
        score[action[t, b]] += 1
        want[row[t, b]] += adv * score
  got = np.asarray(learning.batch_gradient(lc, probe, "rloo", w, roll))
  np.testing.assert_allclose(got, want / 8, rtol=1e-4, atol=1e-6)


def test_killed_cell_resumes_bit_identically(tmp_path):
  lc = _tiny(save_every_s=0.0, threshold=1.0)   # never reached: runs to the budget
  probe = anatomy.make_probe("probe", 6, 0.0, num_pivotal=2, num_actions=4)
  program = learning.make_program(lc, probe, "reinforce_loo")
  whole = learning.run_cell(lc, probe, "reinforce_loo", [7, 8], [0.1, 0.1], 12,
                            str(tmp_path / "whole.json"), log=lambda *_: None,
                            program=program)
  path = str(tmp_path / "cut.json")
  part = learning.run_cell(lc, probe, "reinforce_loo", [7, 8], [0.1, 0.1], 12, path,
                           log=lambda *_: None, stop_after_s=0.0, program=program)
  assert len(part["checks"]) == 1 and not os.path.exists(path)
  assert os.path.exists(path + ".ckpt.npz")
  resumed = learning.run_cell(lc, probe, "reinforce_loo", [7, 8], [0.1, 0.1], 12, path,
                              log=lambda *_: None, program=program)
  assert resumed["resumed"] == 1
  assert resumed["curve"] == whole["curve"] and resumed["env_steps"] == whole["env_steps"]
  assert resumed["times"] == whole["times"] and not any(resumed["events"])
  assert not os.path.exists(path + ".ckpt.npz")
  with open(path) as f:
    assert json.load(f)["checks"] == [2, 4, 6, 8, 10, 12]


def _record(arm, horizon, times, events, spu=10, seeds=(0, 1, 2, 3)):
  return {"family": "probe", "horizon": horizon, "arm": arm, "lrs": [0.1] * len(times),
          "seeds": list(seeds), "times": list(times), "events": list(events),
          "max_updates": 100, "steps_per_update": spu, "checks": [100], "train_s": 1.0}


def test_summary_statistics_by_hand():
  lc = learning.default_config()
  lc.max_updates = 100
  recs = [_record("reinforce_loo", 10, [10, 20, 30, 40], [1, 1, 1, 1]),
          _record("vine", 10, [5, 10, 100, 100], [1, 1, 0, 0], spu=30),
          _record("reinforce_loo", 30, [20, 40, 60, 100], [1, 1, 1, 0])]
  s = part_b.summarise(lc, recs)
  cells = {(c["arm"], c["horizon"]): c for c in s["cells"]}
  assert cells[("reinforce_loo", 10)]["rmst_updates"][0] == pytest.approx(25.0)
  assert cells[("reinforce_loo", 10)]["km_median_updates"] == 20
  # Env steps: the vine's budget (3000) exceeds REINFORCE's (1000): tau is 1000, where
  # the vine's KM estimate is S = 1 on [0, 150), 0.75 on [150, 300), 0.5 after.
  v = cells[("vine", 10)]
  assert v["tau_steps"] == 1000
  assert v["rmst_steps"][0] == pytest.approx(150 + 0.75 * 150 + 0.5 * 700)
  assert v["rmst_steps_minus_reference"][0] == pytest.approx(
      v["rmst_steps"][0] - cells[("reinforce_loo", 10)]["rmst_steps"][0])
  assert 0.0 < v["logrank_p_vs_reference"] < 1.0
  # Largest T at >= 90% by the budget: REINFORCE at T = 10 (4/4), not T = 30 (3/4).
  assert s["largest_T_at_90"]["probe/reinforce_loo"]["horizon"] == 10
  assert s["largest_T_at_90"]["probe/vine"]["horizon"] is None
  slope = s["slopes"]["probe/reinforce_loo"][0]
  rm30 = 20 + 0.75 * 20 + 0.5 * 20 + 0.25 * 40
  assert slope["slope"] == pytest.approx(np.log(rm30 / 25.0) / np.log(3.0))


def test_pick_rate_takes_the_least_restricted_mean():
  rec = {"times": [10, 20, 50, 50, 30, 40], "events": [1, 1, 0, 0, 1, 1],
         "lrs": [0.1, 0.1, 0.3, 0.3, 1.0, 1.0], "max_updates": 50,
         "curve": [[0.1] * 6, [0.95, 0.95, 0.2, 0.3, 0.95, 0.95]]}
  rate, means = part_b.pick_rate(rec, [0.1, 0.3, 1.0])
  assert rate == 0.1 and means["0.3"] == pytest.approx(50.0)
  assert means["0.1"] == pytest.approx(15.0)
  # All censored: the rate whose lanes ended highest.
  rec["events"] = [0] * 6
  rec["times"] = [50] * 6
  assert part_b.pick_rate(rec, [0.1, 0.3, 1.0])[0] == 0.1
  rec["curve"][-1] = [0.2, 0.2, 0.5, 0.6, 0.1, 0.1]
  assert part_b.pick_rate(rec, [0.1, 0.3, 1.0])[0] == 0.3


def test_part_b_runs_and_a_rerun_reads_its_cells(tmp_path):
  c = horizon_configs.get_config("small")
  c.part, c.num_pivotal = "B", 2
  lc = c.learning
  lc.families, lc.arms, lc.horizons = ("probe",), ("reinforce_loo", "vine"), (6,)
  lc.tune_horizon, lc.tune_seeds, lc.seeds, lc.rates = 6, 1, 2, (0.05, 0.2)
  lc.tune_max_updates, lc.max_updates, lc.episodes, lc.group_size = 20, 40, 8, 4
  lc.vine_trajectories = 2
  from credit_jax.experiments import horizon_answer
  out = horizon_answer.run(c, str(tmp_path), log=lambda *_: None)
  root = tmp_path / "B"
  for name in ("summary.json", "results.md", "results.csv", "km.png"):
    assert (root / name).exists(), name
  assert {(x["arm"], x["horizon"]) for x in out["cells"]} == {("reinforce_loo", 6),
                                                              ("vine", 6)}
  assert set(out["tuning"]) == {"probe/reinforce_loo", "probe/vine"}
  lines = []
  again = horizon_answer.run(c, str(tmp_path), log=lines.append)
  assert again["cells"] == out["cells"]
  assert not any("update" in l for l in lines)    # nothing trained on the rerun
