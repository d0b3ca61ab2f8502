"""Tests for the remedies on the horizon axis (credit_jax/experiments/horizon/remedies.py
and its report module): statistics against hand values (smoothing, censoring, success
at equal env steps and equal updates), the equal-budget group size, GoalGrid's
coordinate observation with relabeling, config validation, and tiny end-to-end runs
(resumed: a finished cell is skipped, not recomputed; the search part counts its
simulated env steps)."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import envs
from credit_jax.algos import ConfigError
from credit_jax.experiments.horizon import remedies as horizon_remedies
from credit_jax.experiments import report
from credit_jax.experiments.horizon import remedies_report as rep
from config_files import load_config


def remedies_config(variant):
  return load_config("horizon_remedies", variant)


# --- statistics against hand values ---------------------------------------------------------

def test_smoothed_and_value_at_against_hand_values():
  success = np.array([[0.0, 1.0], [1.0, 0.5], [0.5, 0.0]])           # [P=3, S=2]
  np.testing.assert_allclose(rep.smoothed(success, 2), [[0.0, 1.0], [0.5, 0.75],
                                                        [0.75, 0.25]])
  curve = {"updates": [1, 2, 3], "success": success.tolist(), "smooth": 2,
           "env_steps": [[10, 20], [20, 40], [30, 60]]}
  # Budget 25 env steps: seed 0's last point within it is update 2 (0.5), seed 1's is
  # update 1 (1.0); 5 steps: no point within the budget (nan).
  np.testing.assert_allclose(rep.value_at(curve, "env_steps", 25), [0.5, 1.0])
  assert np.all(np.isnan(rep.value_at(curve, "env_steps", 5)))
  np.testing.assert_allclose(rep.value_at(curve, "updates", 3), [0.75, 0.25])


def test_arm_stats_censors_at_what_a_seed_ran_and_reads_env_steps_off_the_curve():
  # Seed 0 reaches 0.9 at update 2 (40 env steps); seed 1 never (censored at its 90).
  curve = {"updates": [1, 2, 3], "success": [[0.2, 0.1], [0.95, 0.2], [1.0, 0.3]],
           "env_steps": [[20, 30], [40, 60], [60, 90]], "smooth": 1}
  s = rep.arm_stats(curve, 0.9, budget_steps=40, budget_updates=2)
  assert s["reached"] == 1 and s["censored"]
  assert s["env_steps_to_level_per_seed"] == [40.0, 90.0]
  assert s["censored_per_seed"] == [False, True]
  mean, half = report.t_interval(np.array([40.0, 90.0]))
  assert s["env_steps_to_level"] == pytest.approx([mean, half])
  assert s["updates_to_level"][0] == pytest.approx(2.5)             # updates 2 and 3
  assert s["success_at_equal_env_steps"][0] == pytest.approx((0.95 + 0.1) / 2)
  assert s["success_at_equal_updates"][0] == pytest.approx((0.95 + 0.2) / 2)
  assert s["final_success"][0] == pytest.approx(0.65)
  assert s["env_steps_per_update"] == pytest.approx(75 / 3)


def test_equal_budget_group_matches_the_search_steps_of_one_update():
  c = horizon_remedies.default_config().search
  # 4 searched tasks x 16 simulations of T steps = 64 T = 8 tasks x 8 more episodes.
  assert horizon_remedies.equal_budget_group(c) == 16
  c.search_tasks, c.simulations = 3, 5      # 15 episodes over 8 tasks: 2 more, rounded up
  assert horizon_remedies.equal_budget_group(c) == 10


# --- GoalGrid's coordinate observation, what the relabel part trains on ------------------

def test_goalgrid_coords_observation_and_relabeling():
  env, params = envs.make("GoalGrid-v0", size=5, targets="all", observation="coords",
                          max_steps_in_episode=6)
  assert env.obs_shape == (4,) and env.goal_obs_size == 2
  np.testing.assert_allclose(env.encode_goal(jnp.array([[0, 4], [2, 1]])),
                             [[-1.0, 1.0], [0.0, -0.5]])
  obs, state = env.reset(jax.random.PRNGKey(3), params)
  np.testing.assert_allclose(obs, np.concatenate([2 * np.asarray(state.pos) / 4 - 1,
                                                  2 * np.asarray(state.goal) / 4 - 1]))
  np.testing.assert_allclose(env.obs_with_goal(obs, state.pos)[2:], obs[:2])
  with pytest.raises(ValueError, match="observation"):
    envs.make("GoalGrid-v0", observation="pixels")
  # What relabeling needs of the encoding: the goal part replaced by an achieved cell
  # makes the observation the one of an episode with that goal (reward by goal_reward).
  moved = env.step(jax.random.PRNGKey(4), state, 2, params)[1]
  relabeled = env.obs_with_goal(obs, env.achieved_goal(moved))
  np.testing.assert_allclose(relabeled[2:], env.get_obs(moved)[:2])
  assert float(env.goal_reward(env.achieved_goal(moved), env.achieved_goal(moved))) == 1.0


# --- config -------------------------------------------------------------------------------

def test_validate_config_names_the_field():
  c = remedies_config("smoke")
  horizon_remedies.validate_config(c)
  bad = remedies_config("smoke")
  bad.parts = ("relabel", "prm")
  with pytest.raises(ConfigError, match="config.parts"):
    horizon_remedies.validate_config(bad)
  bad = remedies_config("smoke")
  bad.curriculum.stage_fractions = (0.5, 0.8)
  with pytest.raises(ConfigError, match="stage_fractions"):
    horizon_remedies.validate_config(bad)
  bad = remedies_config("smoke")
  bad.search.search_tasks = 5               # more than the 2 tasks per update
  with pytest.raises(ConfigError, match="search_tasks"):
    horizon_remedies.validate_config(bad)
  for v in ("small", "t1000"):
    horizon_remedies.validate_config(remedies_config(v))
  with pytest.raises(ValueError, match="unknown variant"):
    remedies_config("huge")


# --- end to end ---------------------------------------------------------------------------

def test_smoke_relabel_and_curriculum_end_to_end_and_resume(tmp_path):
  c = remedies_config("smoke")
  c.parts = ("relabel", "curriculum")
  lines = []
  summary = horizon_remedies.run(c, str(tmp_path), log=lines.append)
  for name in ("summary.json", "summary.md", "relabel.png", "curriculum.png",
               "cells/relabel_T9.json", "cells/curriculum_T8.json"):
    assert (tmp_path / name).exists(), name
  rel = summary["parts"]["relabel"]["9"]
  assert set(rel["arms"]) == {"grpo", "grpo+relabel_plain"} and rel["grid_side"] == 3
  for s in rel["arms"].values():     # GoalGrid episodes end at the goal: <= 2 x 2 x 9 steps
    assert 0 < s["env_steps_per_update"] <= 36 and s["updates_run"] == 2
  cur = summary["parts"]["curriculum"]["8"]
  assert set(cur["arms"]) == {"grpo", "curriculum_gated"} and cur["stages"] == [4, 8]
  # direct GRPO takes 2 x 2 episodes of 8 steps per update; the curriculum starts at 4.
  assert cur["arms"]["grpo"]["env_steps_per_update"] == pytest.approx(32.0)
  assert cur["arms"]["curriculum_gated"]["env_steps_per_update"] < 32.0
  assert "PRM shaping" in (tmp_path / "summary.md").read_text()
  before = json.loads((tmp_path / "cells/relabel_T9.json").read_text())
  lines.clear()
  horizon_remedies.run(c, str(tmp_path), log=lines.append)
  assert sum("finished before, skipped" in line for line in lines) == 2
  assert json.loads((tmp_path / "cells/relabel_T9.json").read_text()) == before


@pytest.mark.slow
def test_smoke_search_counts_the_search_env_steps(tmp_path):
  c = remedies_config("smoke")
  c.parts = ("search",)
  summary = horizon_remedies.run(c, str(tmp_path), log=lambda line: None)
  arms = summary["parts"]["search"]["6"]["arms"]
  assert set(arms) == {"grpo_k2", "search", "grpo_k6"}
  # 2 tasks x K episodes of 6 steps; search adds up to 2 tasks x 4 simulations x 6 steps.
  assert arms["grpo_k2"]["env_steps_per_update"] == pytest.approx(24.0)
  assert arms["grpo_k6"]["env_steps_per_update"] == pytest.approx(72.0)
  assert arms["grpo_k2"]["search_share_of_env_steps"] == 0.0
  assert 24.0 < arms["search"]["env_steps_per_update"] <= 72.0
  assert arms["search"]["search_share_of_env_steps"] > 0.0
  assert (tmp_path / "search.png").exists()
