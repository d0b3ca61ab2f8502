"""The token-agent study (credit_jax/experiments/token_study.py) end to end at a tiny
size: records, summary, figure, and a rerun that skips finished cells."""
import os

import pytest

from credit_jax.config import ConfigError
from credit_jax.experiments import report, token_study


def _tiny():
  c = token_study.default_config()
  c.turns, c.compare, c.compare_turns = (1,), ("grpo",), ()
  c.seeds, c.eval_episodes, c.chunk_updates = 2, 4, 1
  c.recipe.num_updates, c.recipe.sft_steps, c.recipe.sft_batch = 2, 2, 2
  c.recipe.num_tasks, c.recipe.group_size, c.recipe.num_minibatches = 2, 2, 1
  c.recipe.network.d_model, c.recipe.network.num_layers = 8, 1
  return c


def test_study_writes_its_summary_and_resumes(tmp_path):
  c = _tiny()
  lines = []
  summary = token_study.run(c, str(tmp_path), log=lines.append)
  (cell,) = summary["cells"]
  assert cell["turns"] == 1 and cell["estimator"] == "grpo"
  for key in ("before_greedy", "after_greedy", "after_sampled"):
    low, high = cell[key]["wilson"]
    assert 0.0 <= low <= cell[key]["rate"] <= high <= 1.0
  for name in ("results.jsonl", "summary.md", "summary.json", "success_vs_turns.png"):
    assert os.path.exists(os.path.join(tmp_path, name)), name
  assert any("update 2/2" in line for line in lines)
  lines.clear()
  again = token_study.run(c, str(tmp_path), log=lines.append)
  assert lines == ["grpo k=1: already in results.jsonl, skipped"]
  saved = report.read_summary(str(tmp_path))["cells"]
  assert [(x["turns"], x["after_greedy"]["rate"]) for x in again["cells"]] == \
      [(x["turns"], x["after_greedy"]["rate"]) for x in saved]


def test_study_validation_names_the_field():
  c = _tiny()
  c.chunk_updates = 3
  with pytest.raises(ConfigError, match=r"^config\.chunk_updates"):
    token_study.validate_config(c)
  c = _tiny()
  c.compare = ("a2c",)
  with pytest.raises(ConfigError, match=r"^config\.compare"):
    token_study.validate_config(c)
