"""The token-agent study (credit_jax/experiments/token_study/) end to end at a tiny
size: one shared warm start per k, every arm from it, the SFT arm's token budget, the
kept diagnostics, paired gains against a NumPy computation, and a rerun that skips
finished arms."""
import json
import os

import numpy as np
import pytest

from credit_jax import stats
from credit_jax.algos import token_agent
from credit_jax.config import ConfigError
from credit_jax.experiments import report, token_study
from credit_jax.experiments.token_study import summary as summary_lib


def _tiny():
  c = token_study.default_config()
  c.turns, c.arms, c.compare, c.compare_turns = (1,), ("sft", "grpo"), ("ppo",), (1,)
  c.seeds, c.eval_episodes, c.chunk_updates = 2, 4, 1
  c.recipe.num_updates, c.recipe.sft_steps, c.recipe.sft_batch = 2, 2, 2
  c.recipe.num_tasks, c.recipe.group_size, c.recipe.num_minibatches = 2, 2, 1
  c.recipe.network.d_model, c.recipe.network.num_layers = 8, 1
  return c


def _records(path):
  with open(os.path.join(path, "results.jsonl")) as f:
    return [json.loads(line) for line in f]


def test_study_writes_its_summary_and_resumes(tmp_path):
  c = _tiny()
  lines = []
  summary = token_study.run(c, str(tmp_path), log=lines.append)
  records = _records(tmp_path)
  assert [r.get("arm", r["kind"]) for r in records] == ["warm_start", "sft", "grpo", "ppo"]
  warm, sft, grpo, ppo = records
  # The SFT control gets at least the tokens of the most expensive RL arm (here GRPO's
  # reference passes outweigh PPO's value pass), and less than one more chunk of
  # supervised steps.
  most = max(token_study.study.token_counts(token_study.study._recipe(c, 1, a))["rl_update"]
             for a in ("grpo", "ppo")) * 2
  assert most == grpo["tokens"] > ppo["tokens"]
  per_step = token_study.study.token_counts(token_study.study._recipe(c, 1, "sft"))["sft_step"]
  assert most <= sft["tokens"] < most + 2 * per_step
  assert warm["tokens"] == [2 * per_step] * 2
  # The RL arms keep the recipe's diagnostics per update.
  for r in (grpo, ppo):
    for k in ("success", "approx_kl", "clip_frac", "entropy", "call_rate", "lr"):
      assert len(r["curves"][k]) == 2, (r["arm"], k)
  assert len(grpo["curves"]["degenerate_frac"]) == 2 and "kl_ref" in grpo["curves"]
  # Paired gains: per seed (after - before) / n against the shared warm start.
  cells = {x["arm"]: x for x in summary["cells"]}
  n = c.eval_episodes
  gain = (np.asarray(grpo["after"]["greedy"]) - warm["before"]["greedy"]) / n
  np.testing.assert_allclose(cells["grpo"]["gain_per_seed"], gain)
  mean, half = stats.t_interval(gain)
  assert cells["grpo"]["gain"]["mean"] == pytest.approx(mean)
  assert cells["grpo"]["gain"]["half"] == pytest.approx(half, nan_ok=True)
  vs = gain - (np.asarray(sft["after"]["greedy"]) - warm["before"]["greedy"]) / n
  assert cells["grpo"]["gain_minus_sft"]["mean"] == pytest.approx(vs.mean())
  assert "gain_minus_sft" not in cells["sft"]
  for name in ("results.jsonl", "summary.md", "summary.json", "paired_gain.png"):
    assert os.path.exists(os.path.join(tmp_path, name)), name
  assert any("update 2/2" in line for line in lines)
  lines.clear()
  again = token_study.run(c, str(tmp_path), log=lines.append)
  assert sorted(lines) == sorted(f"{a} k=1: already in results.jsonl, skipped"
                                 for a in ("sft", "grpo", "ppo"))
  saved = report.read_summary(str(tmp_path))["cells"]
  assert [x["gain"]["mean"] for x in again["cells"]] == [x["gain"]["mean"] for x in saved]


def test_spread_warm_start_stops_each_seed_at_the_threshold(tmp_path):
  c = _tiny()
  c.arms, c.compare = ("grpo",), ()
  c.recipe.num_updates, c.recipe.sft_steps = 1, 6
  c.warm_start, c.spread_every, c.spread = "spread", 2, (0.5, 0.7)
  lines = []
  params, warm = token_study.warm_start(c, 1, lines.append)
  steps, success = np.asarray(warm["sft_steps"]), np.asarray(warm["spread_success"])
  assert success.shape[1] == 2 and 1 <= success.shape[0] <= 3
  for s in range(2):
    # A seed stops after the first block that reached the threshold, else at the cap.
    hit = np.flatnonzero(success[:, s] >= 0.5)
    assert steps[s] == (2 * (hit[0] + 1) if hit.size else 6), (steps, success)
  per_step = token_study.study.token_counts(token_study.study._recipe(c, 1, "grpo"))["sft_step"]
  assert warm["tokens"] == (steps * per_step).tolist()


def test_paired_gains_check_shapes():
  np.testing.assert_allclose(summary_lib.paired_gains([1, 2], [3, 1], 4), [0.5, -0.25])
  with pytest.raises(ValueError, match="seeds"):
    summary_lib.paired_gains([1, 2], [3], 4)


def test_study_validation_names_the_field():
  for field, bad in (("chunk_updates", 3), ("compare", ("a2c",)), ("arms", ("x",)),
                     ("warm_start", "best"), ("spread", (0.8, 0.3))):
    c = _tiny()
    c[field] = bad
    with pytest.raises(ConfigError, match=rf"^config\.{field}"):
      token_study.validate_config(c)
