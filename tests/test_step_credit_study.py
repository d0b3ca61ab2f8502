"""The step-credit measurement's budget accounting (credit_jax/experiments/step_credit):
every method's updates fit the same env-step budget, with vine and branch steps counted
as the recipes count them."""
import numpy as np

from credit_jax import algos, tree_rollouts
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
    assert per_update["tree"] == 8 * tree_rollouts.tree_env_steps(
        2, (horizon // 4, horizon // 2, 3 * horizon // 4), horizon)
    # 32 environments, and 2 vines from t = 0, T/4, T/2, 3T/4 of each: 2.5 T per vine set.
    assert per_update["vine"] == 32 * horizon + 32 * 2 * (horizon * 10 // 4)
  assert [c[0] for c in step_credit.cells(config)][:2] == ["T100/grpo", "T100/ppo"]
  np.testing.assert_array_equal(sorted({c[1] for c in step_credit.cells(config)}),
                                [100, 1000])
