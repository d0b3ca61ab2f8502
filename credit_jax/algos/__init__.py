"""Training recipes, and the contract every recipe keeps (also in docs/RECIPES.md).

    train = cj.algos.make_train(config)            # validates, builds env + network
    state, metrics = jax.jit(train)(key)           # one seed, the whole run compiled
    states, metrics = jax.jit(jax.vmap(train))(jax.random.split(key, 16))   # 16 seeds
    hp = {k: jnp.full((8,), v) for k, v in train.default_hparams.items()}
    hp["lr"] = jnp.geomspace(1e-4, 1e-2, 8)        # a sweep is a vmap, not a recompile
    states, metrics = jax.jit(jax.vmap(train))(jax.random.split(key, 8), hp)

A recipe is one module `credit_jax/algos/<name>.py`, registered in `RECIPES` below, that
exports three functions:

  * `default_config() -> ml_collections.ConfigDict`: a complete, runnable config. It
    starts from `train_lib.base_config()` (the fields every recipe shares: algo, env_name,
    env_kwargs, history_window, seed, seeds, optimizer, lr, anneal_lr, adam_eps,
    weight_decay, momentum, max_grad_norm, network.*, chunk_updates, checkpoint_every,
    keep_checkpoints) or from another recipe's default, and adds its own fields. Every
    field is assigned on its own line with a comment saying what it means.
  * `validate_config(config)`: raises `train_lib.ConfigError("config.<field>: ...")` naming
    the first field that cannot run, before anything compiles; it is
    `train_lib.validate(config, "<name>", validate_fields)`: the shared fields, the recipe's
    own (`validate_fields`), then that the environment can be made. A recipe whose
    `config.horizon` is the rollout length of whole episodes says so there
    (`whole_episodes=True`), and the rollout is checked to hold one; the runner keeps
    no list of recipe names.
  * `make_train(config, features=()) -> train_lib.Train`: validates, then builds the pure
    training run; `features` are feature objects (`credit_jax/addons/hooks.py`) beside
    the registry's, which a recipe whose program calls the hook slots runs (REINFORCE,
    PPO, GRPO) and any other refuses once turned on.

Hparams and static fields: numeric settings a sweep may vary (lr, max_grad_norm, gamma,
clip and loss coefficients...) are leaves of `hparams`, a dict of float32 scalars given
to `train(key, hparams)` and traced, so seeds x hparams vmap in one compiled program;
`train.default_hparams` holds the config's values. Everything that fixes shapes or
program structure (batch sizes, horizon, group size, epochs, network, optimizer kind,
env) is static: it is read from the config when `make_train` runs, and changing it
recompiles.

`Train` (see `train_lib.Train`): `train.init(key, hparams) -> TrainState` (params,
optimiser state, the run's RNG key, update count, recipe carry `aux`) and
`train.run(state, hparams, num_updates) -> (state, metrics)` (a `lax.scan` of updates;
metrics `{name: [num_updates]}`); `train(key, hparams)` is both for `train.num_updates`.
`credit_jax.runtime.run.train_and_evaluate(config, workdir)` calls `init` once (or restores a
checkpoint of that state's shape), then `run` in compiled chunks of
`config.chunk_updates` updates with all seeds vmapped; because the key lives in the
state, chunked, resumed and whole runs give the same numbers. It also uses
`train.num_updates`, `train.env_steps_per_update` (progress and env-step axes) and
`train.headline` (the metrics printed, plotted and summarised).

Metrics: every update returns `{name: [] float32}` and every recipe reports
  * `loss`: the loss the update minimised, averaged over its gradient steps; the runner
    stops a run whose `loss` is not finite (before saving that chunk);
  * `success`, where the environment has a notion of success (`episodes.has_success`:
    credit_jax's own environments): the fraction of the episodes sampled by the policy
    the recipe trains with (DQN: its epsilon-greedy behaviour policy) that solved their
    original task (not a relabeled goal, not a searched episode);
  * `greedy_success`, where a recipe measures the greedy policy (DQN, search-then-train):
    the same fraction for the greedy policy's episodes.
Recipes add their own (`return`, `grad_norm`, `lr`, `degenerate_frac`, ...).

Optimiser and minibatches: all recipes step through `train_lib.make_optimizer(config)`
(gradient clipping, then `config.optimizer`: adam by default, adamw or sgd; the learning
rate applied outside the optimiser state so it stays a traced hparam) and, where they
take several gradient steps over one batch, `train_lib.minibatch_epochs`.

Adding a recipe is one module plus one config file: write `credit_jax/algos/<name>.py`
with the three functions, add it to `RECIPES`, and add `configs/<name>_<env>.py` whose
`get_config(arg)` starts from `<name>.default_config()`, overrides what differs and has
a "small" variant; tests/test_contract.py then checks it (it needs a tiny variant there).
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
