"""The step-credit measurement's budget accounting (credit_jax/experiments/step_credit):
every method's updates fit the same env-step budget, with vine and branch steps counted
as the recipes count them."""
import numpy as np

from credit_jax import algos
from credit_jax.addons import tree_groups
from credit_jax.experiments import step_credit
from credit_jax.experiments.step_credit import study


def test_budgets_are_equal_and_count_vine_and_branch_steps():
  config = step_credit.default_config()
  for horizon in (100, 1000):
    per_update = {}
    for method in step_credit.METHODS:
      cfg, updates, budget = step_credit.method_config(config, method, horizon)
      algos.RECIPES[cfg.algo].validate_config(cfg)
      per_update[method] = study._steps_per_update(config, method, horizon)
      assert budget == 40 * 64 * horizon
      assert updates * per_update[method] <= budget < (updates + 1) * per_update[method]
    assert per_update["grpo"] == per_update["ppo"] == per_update["gigpo"] == \
        per_update["gigpo_obs"] == 64 * horizon
    assert per_update["tree"] == 8 * (horizon // 4 + 2 * horizon // 4 + 4 * horizon // 4
                                      + 8 * horizon // 4)
    assert per_update["tree"] == 8 * tree_groups.tree_env_steps(
        2, (horizon // 4, horizon // 2, 3 * horizon // 4), horizon)
    # 32 environments, and 2 vines from t = 0, T/4, T/2, 3T/4 of each: 2.5 T per vine set.
    assert per_update["vine"] == 32 * horizon + 32 * 2 * (horizon * 10 // 4)
  assert [c[0] for c in step_credit.cells(config)][:2] == ["T100/grpo", "T100/ppo"]
  np.testing.assert_array_equal(sorted({c[1] for c in step_credit.cells(config)}),
                                [100, 1000])


def test_summary_and_figure_are_written_from_cell_records(tmp_path):
  records = []
  for horizon, method, updates in ((20, "grpo", 4), (20, "vine", 2), (40, "tree", 3)):
    records.append({
        "cell": f"T{horizon}/{method}", "method": method, "horizon": horizon, "seeds": 2,
        "updates": updates, "env_steps_per_seed": 1000.0 * updates, "success": 0.25,
        "success_ci": [0.1, 0.5], "success_per_seed": [0.0, 0.5], "seeds_at_90": 0,
        "seeds_at_90_ci": [0.0, 0.8], "random_success": 1 / 64,
        "training_success": [0.1 * i for i in range(updates)], "train_wall_s": 1.0,
        "train_cpu_s": 1.0})
  lines = study.markdown(records)
  assert len(lines) == 2 + len(records)
  assert lines[3].startswith("| 20 | vine | 2 | 2e+03 | 0.250 [0.100, 0.500] | 0.00, 0.50 |")
  path = study.figure(records, str(tmp_path))
  with open(path, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
