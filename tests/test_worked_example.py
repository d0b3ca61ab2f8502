"""docs/RECIPES.md "Add a credit estimator", run as written (issue 45): the fork's one file
(`my_credit.py`), its config file and its sweep, taken from the page's three code blocks;
at the config's ",small" shapes, PPO and GRPO on the linear key-to-door and bsuite's
umbrella chain, `step_weight.scale` x 8 seeds in one compile per recipe x env."""
import os
import re
import sys

import numpy as np

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)


def _blocks():
  with open(os.path.join(REPO, "docs", "RECIPES.md")) as f:
    text = f.read()
  section = text.split("## Add a credit estimator", 1)[1].split("\n## ", 1)[0]
  return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_worked_example_runs_as_written(tmp_path, monkeypatch):
  feature, config_file, sweep = _blocks()
  assert len(feature.splitlines()) <= 60   # "a new feature in ~50 lines"
  (tmp_path / "my_credit.py").write_text(feature)
  (tmp_path / "configs").mkdir()
  (tmp_path / "configs" / "step_weight.py").write_text(config_file)
  monkeypatch.chdir(tmp_path)
  monkeypatch.syspath_prepend(str(tmp_path))
  sys.modules.pop("my_credit", None)
  namespace = {}
  exec(compile(sweep, "RECIPES.md: the sweep", "exec"), namespace)  # pylint: disable=exec-used
  out = namespace["sweep_step_weight"](str(tmp_path / "work"), small=True)
  assert sorted(out) == [("grpo", "lktd"), ("grpo", "umbrella"), ("ppo", "lktd"),
                         ("ppo", "umbrella")]
  for (algo, env), (plan, result) in out.items():
    assert plan.traced == ("step_weight.scale",) and plan.static == (), (algo, env)
    assert len(plan.calls) == 1 and plan.num_compiles() == 1, plan.describe()
    assert len(plan.cells) * plan.seeds == 24
    assert result["cells"] == 3 and result["missing"] == [], result
    assert {"step_weight.scale", "step_weight.lr"} <= set(plan.calls[0].train.default_hparams)
    # The three scales reached the runs: the estimator's hparams differ per cell.
    from credit_jax.sweep import execute  # pylint: disable=g-import-not-at-top
    _, hp = execute._call_inputs(plan.calls[0], plan.seeds)
    np.testing.assert_allclose(hp["step_weight.scale"], np.repeat([0.0, 0.5, 1.0], 8))
