"""The critique experiment on its smoke variant: summary, figures and the headline claims."""

import pytest

from credit_jax.config import ConfigError
from credit_jax.experiments import critique
from config_files import load_config


def _config(variant):
  return load_config("critique", variant)


def test_break_even_interpolation():
  assert critique.break_even([0.0, 0.5, 1.0], [0.6, 0.4, 0.1], 0.3) == pytest.approx(2 / 3)
  assert critique.break_even([0.0, 1.0], [0.6, 0.4], 0.3) is None
  assert critique.break_even([0.0, 1.0], [0.2, 0.1], 0.3) == 0.0
  assert critique.steps_to_target([0.1, 0.95, 0.9], [10, 8, 6], 0.9) == 18.0
  assert critique.steps_to_target([0.1, 0.5], [10, 8], 0.9) is None


def test_validate_config_names_the_field():
  c = _config("smoke")
  c.attempts = 1
  with pytest.raises(ConfigError, match="config.attempts"):
    critique.validate_config(c)


@pytest.mark.slow
def test_smoke_run_writes_summary_and_figures(tmp_path):
  summary = critique.run(_config("smoke"), str(tmp_path), log=lambda *_: None)
  for name in ("success_by_attempt.png", "noise_break_even.png", "memory.png",
               "summary.json", "summary.md"):
    assert (tmp_path / name).exists(), name
  s = summary["success"]
  # The oracle critic solves every task within R = 3 attempts (k = 2 pivotal steps);
  # an always-wrong critic does no better than the first attempt.
  assert s["oracle"][2][0] > 0.95
  assert s["noisy"][-1][2][0] < s["none"][2][0]
  assert summary["memory"]["8"]["first_attempt_last10"][0] > \
      summary["memory"]["0"]["first_attempt_last10"][0] + 0.3
