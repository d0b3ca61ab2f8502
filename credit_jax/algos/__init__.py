"""Training recipes: `make_train(config) -> Train`, each pure, jittable and vmappable.

    train = cj.algos.make_train(config)            # validates, builds env + network
    state, metrics = jax.jit(train)(key)           # one seed, the whole run compiled
    states, metrics = jax.jit(jax.vmap(train))(jax.random.split(key, 16))   # 16 seeds
    hp = {k: jnp.full((8,), v) for k, v in train.default_hparams.items()}
    hp["lr"] = jnp.geomspace(1e-4, 1e-2, 8)        # a sweep is a vmap, not a recompile
    states, metrics = jax.jit(jax.vmap(train))(jax.random.split(key, 8), hp)

`config.algo` picks the recipe ("ppo", "grpo", "reinforce", "dqn", "grpo_hindsight",
"search_then_train");
see each module for its fields and `configs/` for documented examples.
`credit_jax.run.train_and_evaluate` adds chunked execution, progress, metrics files,
checkpoints and plots around a `Train`.
"""
from __future__ import annotations

from credit_jax import envs
from credit_jax.algos import (common, dqn, grpo, grpo_hindsight, ppo, reinforce,
                              search_then_train)
from credit_jax.algos.common import ConfigError, Train, TrainState

RECIPES = {"ppo": ppo, "grpo": grpo, "reinforce": reinforce, "dqn": dqn,
           "grpo_hindsight": grpo_hindsight, "search_then_train": search_then_train}

__all__ = ["RECIPES", "ConfigError", "Train", "TrainState", "make_train",
           "validate_config"]


def _validate_common(config) -> None:
  req = common.require
  req(config.get("algo") in RECIPES, "algo",
      f"unknown recipe {config.get('algo')!r}; known: {sorted(RECIPES)}")
  req(int(config.seeds) >= 1, "seeds", f"must be >= 1, got {config.seeds}")
  req(config.lr >= 0.0, "lr", f"learning rate must be >= 0, got {config.lr}")
  req(config.max_grad_norm > 0.0, "max_grad_norm",
      f"must be > 0, got {config.max_grad_norm}")
  req(config.adam_eps > 0.0, "adam_eps", f"must be > 0, got {config.adam_eps}")
  req(int(config.history_window) >= 0, "history_window",
      f"must be >= 0 (0: no history), got {config.history_window}")
  sizes = tuple(config.network.hidden_sizes)
  req(len(sizes) >= 1 and all(int(s) >= 1 for s in sizes), "network.hidden_sizes",
      f"must be a non-empty list of positive ints, got {sizes}")
  req(config.network.activation in ("tanh", "relu", "gelu", "silu"), "network.activation",
      f"must be tanh, relu, gelu or silu, got {config.network.activation!r}")
  req(int(config.chunk_updates) >= 1, "chunk_updates",
      f"must be >= 1, got {config.chunk_updates}")
  req(int(config.checkpoint_every) >= 0, "checkpoint_every",
      f"must be >= 0 (0: only at the end), got {config.checkpoint_every}")
  req(config.checkpoint_every % config.chunk_updates == 0, "checkpoint_every",
      f"{config.checkpoint_every} must be a multiple of chunk_updates="
      f"{config.chunk_updates} (checkpoints are taken between compiled chunks)")
  req(int(config.keep_checkpoints) >= 1, "keep_checkpoints",
      f"must be >= 1, got {config.keep_checkpoints}")


def _validate_env(config) -> None:
  known = envs.registered_envs()
  common.require(config.env_name in known, "env_name",
                 f"unknown environment {config.env_name!r}; known: {', '.join(known)}")
  try:
    common.make_env(config)
  except ValueError as e:
    raise ConfigError(
        f"config.env_kwargs: cannot make {config.env_name!r} with "
        f"{dict(config.env_kwargs)}: {e}") from e


def validate_config(config) -> None:
  """Raises `ConfigError` naming the field when `config` cannot be trained.

  Checks run before anything compiles: shared fields, the recipe's own fields, then
  that the environment can be made with the given overrides.
  """
  _validate_common(config)
  RECIPES[config.algo].validate_config(config)
  _validate_env(config)


def make_train(config) -> Train:
  """Validates `config` and returns its recipe's `Train`."""
  validate_config(config)
  return RECIPES[config.algo].make_train(config)
