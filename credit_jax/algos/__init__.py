"""Training recipes: `RECIPES` names them, and `make_train` / `validate_config` dispatch
on `config.algo`.

    train = cj.algos.make_train(config)            # validates, builds env + network
    state, metrics = jax.jit(train)(key)           # one seed, the whole run compiled
    states, metrics = jax.jit(jax.vmap(train))(jax.random.split(key, 16))   # 16 seeds

The contract every recipe keeps (its three functions, hparams and static fields, what
`Train` gives the runner, the metrics every recipe reports, the one optimiser and
minibatch path, and how to add a recipe) is written down in docs/RECIPES.md;
tests/test_contract.py checks it for every recipe in `RECIPES`.
"""
from __future__ import annotations

import sys
from typing import Optional

from credit_jax.algos import (train as train_lib, dqn, grpo, grpo_relabel, hierarchy,
                              ppo, reinforce, search_then_train, token_agent)
from credit_jax.algos.train import ConfigError, Train, TrainState

RECIPES = {"ppo": ppo, "grpo": grpo, "reinforce": reinforce, "dqn": dqn,
           "grpo_relabel": grpo_relabel, "search_then_train": search_then_train,
           "hierarchy": hierarchy, "token_agent": token_agent}
# Old recipe names that still work: `config.algo` is set to the new one, after one line
# on stderr naming it ("hindsight" now names HCA's learned credit only).
ALIASES = {"grpo_hindsight": "grpo_relabel"}

__all__ = ["ALIASES", "RECIPES", "ConfigError", "Train", "TrainState", "make_train",
           "validate_config"]


def _recipe(config):
  old = config.get("algo")
  if old in ALIASES:
    print(f"note: recipe {old!r} is now {ALIASES[old]!r}", file=sys.stderr)
    with config.unlocked():
      config.algo = ALIASES[old]
  train_lib.require(config.get("algo") in RECIPES, "algo",
                 f"unknown recipe {config.get('algo')!r}; known: {sorted(RECIPES)}")
  return RECIPES[config.algo]


def validate_config(config, features=()) -> Optional[train_lib.Checked]:
  """Raises `ConfigError` naming the field when `config` cannot be trained.

  The recipe named by `config.algo` validates it (shared fields, its own fields, the
  features: the registry's and the objects in `features`, then that the environment can
  be made); nothing is compiled. Returns the recipe's `train_lib.Checked` config where
  it gives one (PPO, GRPO, REINFORCE), which `make_train` builds on without validating
  or making the environment again; else None.
  """
  return _recipe(config).validate_config(config, features=tuple(features))


def make_train(config, features=()) -> Train:
  """Validates `config` and returns its recipe's `Train`; `features`: feature objects
  (`credit_jax.addons.hooks.Feature`) the recipe takes beside the registry's. `config`
  may be the `Checked` one `validate_config` returned: it is built on as it is."""
  inner = config.config if isinstance(config, train_lib.Checked) else config
  return _recipe(inner).make_train(config, features=tuple(features))
