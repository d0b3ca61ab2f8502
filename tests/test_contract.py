"""The recipe contract (credit_jax/algos/__init__.py, docs/RECIPES.md), checked for every
recipe in `algos.RECIPES`: the three exports, a comment on every default field,
validation that names the field, the contract's metrics over a few updates, a run
killed between chunks that resumes from its checkpoint to the same numbers, and that
run's evaluation (scripts/evaluate.py's logic).

Each recipe runs a tiny variant of its `default_config()` (TINY below: only shapes and
lengths shrink), so the whole file is a few compiles per recipe.
"""
import ast
import inspect
import io
import json
import os
import tokenize

import numpy as np
import pytest

from credit_jax import algos
from credit_jax.runtime import evaluate
from credit_jax.runtime import metrics as metrics_lib
from credit_jax.runtime import run as runner
from credit_jax.algos import train as train_lib
from credit_jax import episodes

NAMES = sorted(algos.RECIPES)

# Shapes and lengths of a few-second run of each recipe; every value is a shrink of the
# recipe's default (a new recipe needs an entry: test_every_recipe_has_a_tiny_variant).
_KEYCHAIN = {"env_kwargs.horizon": 4, "env_kwargs.num_pivotal": 1,
             "env_kwargs.num_actions": 2, "horizon": 4}
_GROUPS = {"num_tasks": 2, "group_size": 2, "update_epochs": 1, "num_minibatches": 1}
TINY = {
    "ppo": {"num_envs": 2, "num_steps": 8, "total_timesteps": 48, "update_epochs": 1,
            "num_minibatches": 2},
    "grpo": {**_KEYCHAIN, **_GROUPS},
    "reinforce": {**_KEYCHAIN, "num_envs": 4},
    "dqn": {"env_kwargs.num_bits": 3, "horizon": 3, "num_envs": 2, "eval_envs": 2,
            "buffer_size": 64, "batch_size": 8, "grad_steps": 2},
    "grpo_relabel": {"env_kwargs.size": 3, "env_kwargs.max_steps_in_episode": 4,
                       "horizon": 4, **_GROUPS},
    "search_then_train": {**_KEYCHAIN, **_GROUPS, "search_tasks": 2,
                          "search_simulations": 4},
    "hierarchy": {"env_kwargs.size": 5, "env_kwargs.max_steps_in_episode": 8,
                  "horizon": 8, "segment_length": 4, "subgoal_stride": 2, **_GROUPS},
    "token_agent": {"env_kwargs.num_turns": 1, **_GROUPS, "sft_steps": 2,
                    "sft_batch": 2, "network.d_model": 8},
}
# Every run: 3 updates (PPO: 48 steps of 2 x 8), 2 seeds, one update per compiled chunk.
RUN = {"num_updates": 3, "seeds": 2, "chunk_updates": 1, "checkpoint_every": 1,
       "keep_checkpoints": 3, "network.hidden_sizes": (8,)}
# One recipe-specific field per recipe with a value it cannot run with.
BAD = {"ppo": ("clip_eps", 0.0), "grpo": ("group_size", 1),
       "reinforce": ("credit", "oracle"), "dqn": ("her_strategy", "all"),
       "grpo_relabel": ("relabel", "both"), "search_then_train": ("search_weight", 2.0),
       "hierarchy": ("segment_length", 5), "token_agent": ("estimator", "a2c")}


def _set(c, path, value):
  *parents, leaf = path.split(".")
  for p in parents:
    c = c[p]
  c[leaf] = value


def tiny_config(name):
  c = algos.RECIPES[name].default_config()
  for path, value in {**RUN, **TINY[name]}.items():
    if path == "num_updates" and "num_updates" not in c:
      continue  # PPO counts env steps (total_timesteps) instead
    _set(c, path, value)
  return c


def _leaves(c, prefix=""):
  """Dotted names of a config's leaves (an empty ConfigDict counts as a leaf)."""
  out = []
  for k, v in c.items():
    if hasattr(v, "items") and len(v):
      out += _leaves(v, prefix + k + ".")
    else:
      out.append(prefix + k)
  return out


def _commented_fields(source):
  """Dotted field names assigned as `<name>.<field>... = ...` with a comment on one of the
  assignment's lines (or on a comment-only line right above) anywhere in `source`."""
  comments = {tok.start[0]: tok.line.strip().startswith("#")
              for tok in tokenize.generate_tokens(io.StringIO(source).readline)
              if tok.type == tokenize.COMMENT}
  fields = set()
  for node in ast.walk(ast.parse(source)):
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
      continue
    parts, target = [], node.targets[0]
    while isinstance(target, ast.Attribute):
      parts.append(target.attr)
      target = target.value
    if not parts or not isinstance(target, ast.Name):
      continue
    lines = range(node.lineno, node.end_lineno + 1)
    if any(line in comments for line in lines) or comments.get(node.lineno - 1):
      fields.add(".".join(reversed(parts)))
  return fields


def _sources(module):
  """The module and the credit_jax.algos modules it imports (where its defaults start)."""
  mods = [module]
  for node in ast.walk(ast.parse(inspect.getsource(module))):
    if isinstance(node, ast.ImportFrom) and node.module == "credit_jax.algos":
      mods += [getattr(algos, a.name) for a in node.names if hasattr(algos, a.name)]
  return mods


def test_every_recipe_has_a_tiny_variant():
  assert set(TINY) == set(NAMES) == set(BAD), "add the new recipe to TINY and BAD"


@pytest.mark.parametrize("name", NAMES)
def test_recipe_exports_the_contract(name):
  module = algos.RECIPES[name]
  for fn in ("default_config", "validate_config", "make_train"):
    assert callable(getattr(module, fn, None)), f"{module.__name__} lacks {fn}"
  c = module.default_config()
  assert c.algo == name
  # Complete and runnable: it validates both ways, and holds every shared field.
  module.validate_config(c)
  algos.validate_config(c)
  missing = set(_leaves(train_lib.base_config())) - set(_leaves(c)) - {"env_kwargs"}
  assert not missing, f"default_config lacks shared fields {sorted(missing)}"


@pytest.mark.parametrize("name", NAMES)
def test_every_default_field_has_a_comment(name):
  module = algos.RECIPES[name]
  commented = set()
  for m in _sources(module):
    commented |= _commented_fields(inspect.getsource(m))
  fields = _leaves(module.default_config())
  bare = [f for f in fields if f not in commented]
  assert not bare, f"fields of {name}.default_config() without a comment: {bare}"


def test_the_comment_check_can_fail():
  source = ("def f(c):\n  c.a = 1  # said\n  # said above\n  c.net.b = (2,\n    3)\n"
            "  c.d = 3\n  # a comment, then a blank line\n\n  c.e = 4\n")
  assert _commented_fields(source) == {"a", "net.b"}


@pytest.mark.parametrize("name", NAMES)
def test_validate_config_names_the_bad_field(name):
  module = algos.RECIPES[name]
  field, value = BAD[name]
  for path, bad in ((field, value), ("lr", -1.0), ("optimizer", "lion"),
                    ("network.hidden_sizes", ()), ("algo", "other")):
    c = module.default_config()
    _set(c, path, bad)
    with pytest.raises(train_lib.ConfigError, match=rf"^config\.{path}: "):
      module.validate_config(c)
    with pytest.raises(train_lib.ConfigError, match=rf"^config\.{path}: "):
      module.make_train(c)
  c = module.default_config()
  c.algo = "nope"
  with pytest.raises(train_lib.ConfigError, match="unknown recipe 'nope'"):
    algos.validate_config(c)


class _Killed(Exception):
  pass


@pytest.fixture
def compile_once(monkeypatch):
  """The runner's compiled functions, kept from one `train_and_evaluate` call to the
  next of the same config: the resumed call restores its state from the checkpoint as
  any fresh call does, but skips recompiling the same program (compiles dominate)."""
  cache = {}
  make_run_fns = runner.make_run_fns

  def cached(train):
    key = json.dumps(runner.config_to_json(train.config), sort_keys=True)
    if key not in cache:
      cache[key] = make_run_fns(train)
    return cache[key]
  monkeypatch.setattr(runner, "make_run_fns", cached)
  return cache


@pytest.mark.parametrize("name", NAMES)
def test_runs_reports_the_contract_metrics_and_resumes(name, tmp_path, compile_once):
  c = tiny_config(name)
  train = algos.RECIPES[name].make_train(c)
  assert isinstance(train, train_lib.Train) and train.num_updates == 3
  assert set(train.default_hparams) and train.headline

  # Killed after its 3rd chunk was computed and logged but before its checkpoint: the
  # metrics file then holds the uninterrupted run's 3 updates.
  def kill_at_last(line):
    if line.startswith("update 3/3"):
      raise _Killed(line)
  with pytest.raises(_Killed):
    runner.train_and_evaluate(c, str(tmp_path), log=kill_at_last)
  path = os.path.join(tmp_path, metrics_lib.METRICS_FILE)
  whole = metrics_lib.read_jsonl(path)
  assert [r["update"] for r in whole] == [1, 2, 3]

  for r in whole:
    assert np.all(np.isfinite(r["per_seed"]["loss"])), r
    if episodes.has_success(c):
      assert 0.0 <= r["success"] <= 1.0, r
    else:
      assert "success" not in r
    if "greedy_success" in r:
      assert 0.0 <= r["greedy_success"] <= 1.0, r
  assert ("greedy_success" in whole[0]) == (name in ("dqn", "search_then_train"))

  # A fresh call resumes from the checkpoint of update 2 and redoes update 3 exactly.
  summary = runner.train_and_evaluate(c, str(tmp_path), log=lambda _: None)
  assert summary["resumed_from"] == 2
  resumed = metrics_lib.read_jsonl(path)
  assert json.dumps(resumed, sort_keys=True) == json.dumps(whole, sort_keys=True)
  assert len(compile_once) == 1
  assert set(summary["final"]) <= set(train.headline)

  # The run's latest checkpoint evaluates with the recipe's sampled and greedy policies
  # (scripts/evaluate.py; tests/test_evaluate.py: the other network kinds): 8 episodes
  # per seed and policy.
  out = evaluate.evaluate_run(str(tmp_path), episodes=8, log=lambda _: None)
  assert out["checkpoint"]["update"] == 3 and os.path.exists(out["written_to"])
  for policy in ("sampled", "greedy"):
    res = out["results"][policy]["all"]
    assert res["episodes"] == 8 * c.seeds and res["ended"] == 1.0, (policy, res)
    if episodes.has_success(c):
      assert 0.0 <= res["success"] <= 1.0, (policy, res)
