"""Tests for credit_jax.experiments.relabel: steps-to-level against a plain loop, config
checks, and part (b) run in-process on a tiny GoalGrid (all modes in one compile)."""
import numpy as np
import pytest

from credit_jax.algos import ConfigError
from credit_jax.experiments import relabel, report

from test_experiments import check_png, load_config


def _steps_to_level_loop(success, per_update, level, smooth):
  window = max(1, min(smooth, len(success)))
  for end in range(window, len(success) + 1):
    if np.mean(success[end - window:end]) >= level:
      return end * per_update
  return None


@pytest.mark.parametrize("success,level,smooth", [
    ([0.0, 0.2, 0.6, 0.8, 1.0], 0.5, 2),
    ([0.0, 0.2, 0.6, 0.8, 1.0], 0.5, 1),
    ([0.9, 0.0, 0.0], 0.5, 5),          # window longer than the run: the whole run
    ([0.1, 0.2, 0.3], 0.5, 2),          # never reached
])
def test_steps_to_level_matches_a_plain_loop(success, level, smooth):
  got = relabel.steps_to_level(np.array(success), 100, level, smooth)
  assert got == _steps_to_level_loop(success, 100, level, smooth)
  # Trailing means of 2: 0.1, 0.4, 0.7: first at or above 0.5 after update 4.
  assert relabel.steps_to_level(np.array([0.0, 0.2, 0.6, 0.8]), 10, 0.5, 2) == 40


@pytest.mark.parametrize("field,value,match", [
    ("parts", "x", "config.parts"),
    ("modes", ("none", "both"), "config.modes"),
    ("success_level", 0.0, "config.success_level"),
    ("dqn.epsilon", 1.5, "config.dqn.epsilon"),
])
def test_config_errors_name_the_field(field, value, match):
  config = load_config("relabel", "small")
  if field == "dqn.epsilon":
    config.dqn.epsilon = value
  else:
    config[field] = value
  with pytest.raises(ConfigError, match=match):
    relabel.validate_config(config)


def test_part_b_on_a_tiny_goal_grid(tmp_path):
  config = load_config("relabel", "small")
  config.parts, config.seeds = "b", 2
  grid = config.grpo.goalgrid
  grid.env_kwargs.size, grid.env_kwargs.max_steps_in_episode, grid.horizon = 3, 4, 4
  grid.num_tasks, grid.group_size, grid.num_updates, grid.num_minibatches = 2, 2, 3, 1
  grid.update_epochs, grid.network.hidden_sizes = 1, (8,)
  del config.grpo["textedit"]
  lines = []
  summary = relabel.run(config, str(tmp_path), log=lines.append)
  assert "bitflip" not in summary and set(summary["grpo"]) == {"goalgrid"}
  entry = summary["grpo"]["goalgrid"]
  assert entry["env_steps_per_update"] == 2 * 2 * 4
  for mode in ("none", "plain", "iw"):
    m = entry["modes"][mode]
    assert len(m["curve_mean"]) == 3 and 0.0 <= m["final_success_mean"] <= 1.0
    assert len(m["steps_to_level_per_seed"]) == 2
    base = entry["modes"]["none"]["steps_to_level"]
    if base and m["steps_to_level"]:
      assert m["ratio_to_none"] == m["steps_to_level"] / base
    elif m["steps_to_level"] is None:
      assert m["ratio_to_none"] is None
    else:   # "none" never got there: the ratio is an upper bound (censored at the budget)
      assert m["ratio_is_upper_bound"] and m["ratio_to_none"] > 0
  check_png(str(tmp_path / "grpo_goalgrid.png"), min_bytes=1_000)
  assert report.read_summary(str(tmp_path))["grpo"] == summary["grpo"]
  text = (tmp_path / "summary.md").read_text()
  assert text.startswith("# Hindsight relabeling") and "| GoalGrid-v0 (goalgrid) |" in text
  assert lines[-1].startswith("wrote ")
