"""Sweeps over a feature's traced hyperparameter (issue 45): the axis is the feature's
dotted config path (`gigpo.step_weight`, `prm.weight`, `tree.episode_weight`), the
planner vmaps it with the seeds (one compile per recipe x env), and the runner reads each
cell's value from that path."""
import json
import os
import textwrap

import ml_collections
import numpy as np
import pytest

from credit_jax import sweep
from credit_jax.addons import features, gigpo, hooks
from credit_jax.algos import grpo
from credit_jax.sweep import execute

BASE = textwrap.dedent('''
    from credit_jax.addons import gigpo, tree_groups
    from credit_jax.algos import grpo

    def get_config(arg=None):
      c = grpo.default_config()
      c.env_kwargs.horizon, c.horizon, c.env_kwargs.num_pivotal = 6, 6, 1
      c.num_updates, c.num_tasks, c.group_size = 2, 4, 4
      c.num_minibatches, c.update_epochs = 1, 1
      c.network.hidden_sizes = (16,)
      c.chunk_updates, c.checkpoint_every, c.keep_checkpoints = 2, 2, 1
      if arg == "gigpo":
        gigpo.add_config(c)
      elif arg == "tree":
        tree_groups.add_config(c, branch=2, branch_steps=(0, 3), episode_weight=0.5)
      return c
''')


def _sweep(base, axes, overrides=None):
  s = ml_collections.ConfigDict()
  s.base, s.experiment, s.seeds = base, "", 2
  s.overrides = ml_collections.ConfigDict(overrides or {})
  s.axes = ml_collections.ConfigDict(axes)
  s.metric, s.metrics = "loss", ("loss", "return")
  s.cells_per_call, s.memory_limit_gb, s.final_window = 0, 0.0, 1
  return s


def _base(tmp_path):
  path = tmp_path / "grpo_tiny.py"
  path.write_text(BASE)
  return str(path)


def _run(s, workdir, path, values):
  plan = sweep.plan(s)
  assert plan.traced == (path,) and plan.static == ()
  assert len(plan.calls) == 1 and plan.num_compiles() == 1, plan.describe()
  out = execute.run_sweep(s, str(workdir), log=lambda _: None)
  assert out["cells"] == 2 and out["missing"] == []
  rows = {}
  for cell in plan.cells:
    with open(os.path.join(workdir, "cells", cell.name, execute.ROWS_FILE)) as f:
      rows[cell.name] = json.load(f)
  _, hp = execute._call_inputs(plan.calls[0], 2)
  np.testing.assert_allclose(hp[path], np.repeat(values, 2),
                             rtol=1e-6)
  return plan, rows


@pytest.mark.parametrize("variant,path,values", [
    ("gigpo", "gigpo.step_weight", (0.0, 2.0)),
    ("tree", "tree.episode_weight", (0.0, 1.0))])
def test_sweep_over_a_grpo_feature_hparam_is_one_compile(tmp_path, variant, path, values):
  block, field = path.split(".")
  s = _sweep(f"{_base(tmp_path)}:{variant}", {block: {field: values}})
  plan, rows = _run(s, tmp_path / "w", path, values)
  assert [c.config[block][field] for c in plan.cells] == list(values)
  assert len(rows) == 2 and all(rows.values())


def test_sweep_over_the_prm_weight_is_one_compile(tmp_path):
  s = _sweep("configs/ppo_prm.py:small", {"prm": {"weight": (0.0, 0.5)}},
             overrides={"total_timesteps": 16 * 32 * 2, "chunk_updates": 2,
                        "checkpoint_every": 2, "prm": {"demo_episodes": 16,
                                                       "train_steps": 5}})
  _run(s, tmp_path / "w", "prm.weight", (0.0, 0.5))


def test_a_feature_hparam_is_named_by_its_config_path():
  c = gigpo.add_config(grpo.default_config())
  assert {"gigpo.step_weight", "gigpo.gamma"} <= set(features.hparams(c))
  assert hooks.config_value(c, "gigpo.step_weight") == c.gigpo.step_weight

  class Misnamed(gigpo.GigpoFeature):
    name = "misnamed"

    def hparams(self, config):
      return {"gigpo_step_weight": 1.0}

  with pytest.raises(ValueError, match="gigpo_step_weight.*dotted config path"):
    features.hparams(c, (Misnamed(),))
