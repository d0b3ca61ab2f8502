"""The probes measurement: its cells, equal budgets, configs, and one tiny cell end to end."""
import numpy as np
import pytest

from credit_jax import envs
from credit_jax.algos import ConfigError, make_train
from credit_jax.experiments import probes, report
from config_files import load_config


def test_cells_settings_and_equal_budgets():
  c = probes.default_config()
  names = [n for n, *_ in probes.cells(c)]
  assert len(names) == 2 * 8 * 3 + 3 and len(set(names)) == len(names)
  assert names.index("corridor/L103/grpo_k8") < names.index("keychain/default/T1000/grpo_k8")
  assert probes.switch_kwargs(c, "default") == {}
  assert probes.switch_kwargs(c, "distinct_rules") == {"distinct_rules": True}
  assert len(probes.switch_kwargs(c, "all")) == 6
  assert "cues_at_start" not in probes.switch_kwargs(c, "all_but_cues_at_start")
  assert sorted(probes.switch_kwargs(c, "credit_switches")) == [
      "distinct_rules", "distractor_cues", "distractor_reward_std", "pivotal_flag"]
  for name, horizon, _, method in probes.cells(c):
    env_name, kwargs = probes.cell_env(c, name)
    cfg = probes.method_config(c, method, env_name, kwargs, horizon,
                               probes.budget_updates(c, horizon))
    train = make_train(cfg)
    steps = train.num_updates * train.env_steps_per_update
    assert c.budget_env_steps - 64 * horizon < steps <= c.budget_env_steps, name
  env_name, kwargs = probes.cell_env(c, "keychain/all/T1000/ppo_l1")
  env, _ = envs.make(env_name, **kwargs)
  assert env.num_pivotal == 30 and len(env.shortcuts_removed) == 6


def test_validate_names_the_field():
  c = probes.default_config()
  c.methods = ("ppo_l0.9",)
  with pytest.raises(ConfigError, match="config.methods"):
    probes.validate_config(c)
  c = probes.default_config()
  c.budget_env_steps = 1000
  with pytest.raises(ConfigError, match="budget_env_steps"):
    probes.validate_config(c)


def test_markdown_tables_from_records():
  c = probes.default_config()
  c.horizons, c.settings, c.methods = (100,), ("default",), ("grpo_k8",)
  rec = {"cell": "keychain/default/T100/grpo_k8", "success": 0.5, "success_ci": [0.4, 0.6],
         "random_success": 1 / 64}
  lines = probes.markdown([rec], c)
  assert lines[2] == "| default | 0.0156 | 0.50 [0.40, 0.60] |"


def test_smoke_cell_trains_and_evaluates(tmp_path):
  c = load_config("probes", "smoke")
  c.horizons, c.corridor_lengths, c.settings, c.methods = (10,), (), ("all",), ("grpo_k8",)
  summary = probes.run(c, str(tmp_path), log=lambda _: None)
  (rec,) = summary["cells"]
  assert rec["updates"] == 2 and rec["env_steps_per_seed"] == 2 * 16 * 10
  assert rec["eval_episodes"] == 2 * 8 and len(rec["success_per_seed"]) == 2
  wins = round(rec["success"] * rec["eval_episodes"])
  assert tuple(rec["success_ci"]) == pytest.approx(
      report.wilson_interval(wins, rec["eval_episodes"]))
  assert np.mean(rec["success_per_seed"]) == pytest.approx(rec["success"])
  assert (tmp_path / "summary.md").exists()
  again = probes.run(c, str(tmp_path), log=lambda _: None)   # resumes: nothing retrained
  assert again["cells"][0]["train_s"] == rec["train_s"]
  c.budget_env_steps = 2 * c.budget_env_steps                # 4 updates: not the saved 2
  with pytest.raises(ConfigError, match="holds cell keychain/all/T10/grpo_k8 at 2 seeds x 2"):
    probes.run(c, str(tmp_path), log=lambda _: None)
