"""The step-level credit features (VinePPO's vines, GiGPO's anchors, tree groups) and the
few calls a recipe makes to take them through the hooks protocol (`hooks.py`).

`check` validates or refuses them for a recipe, `wrap_env` applies their environments,
`hparams` lists their traced hyperparameters and `bind` returns the run's `hooks.Hooks`.
A recipe then calls `Hooks.collect` where it collects its group rollout and
`Hooks.advantages` after computing its own advantages. These features run with an MLP
policy in the recipes (`network.kind = "mlp"`); the estimators under them
(`credit_jax/vine.py`, `anchors.py`, `tree_rollouts.py`) also take sequence policies.
"""
from __future__ import annotations

import types
from typing import Any, Sequence

from credit_jax.addons import gigpo, hooks, tree_groups, vine_ppo
from credit_jax.config import require

__all__ = ["FEATURES", "check", "enabled", "wrap_env", "hparams", "bind"]

FEATURES: Sequence[hooks.Feature] = (vine_ppo.VineFeature(), gigpo.GigpoFeature(),
                                     tree_groups.TreeFeature())


def _enabled(config):
  return [f for f in FEATURES if f.enabled(config)]


def enabled(config) -> bool:
  """Whether `config` turns on any of these features."""
  return bool(_enabled(config))


def check(config, recipe: hooks.Recipe) -> None:
  """Raises `ConfigError` naming the field of a feature `recipe` does not take, or the
  first field an accepted one cannot run with."""
  hooks.check(config, recipe, FEATURES)
  for f in _enabled(config):
    kind = str(config.get("network", {}).get("kind", "mlp"))
    require(kind == "mlp", "network.kind",
            f"the {f.name} hook runs with an MLP policy in the recipes, got {kind!r}")


def wrap_env(config, env, env_params):
  for f in _enabled(config):
    env, env_params = f.wrap_env(config, env, env_params)
  return env, env_params


def hparams(config):
  out = {}
  for f in _enabled(config):
    out.update(f.hparams(config))
  return out


def bind(config, recipe: hooks.Recipe, env, env_params, policy: Any, batch: int
         ) -> hooks.Hooks:
  """The run's hooks; `policy` is the recipe's rollout policy (what the features see as
  `context.agent.policy()`)."""
  agent = types.SimpleNamespace(policy=lambda: policy)
  context = hooks.Context(config=config, recipe=recipe, env=env, env_params=env_params,
                          agent=agent, batch=int(batch))
  return hooks.Hooks([(f.name, f.bind(context)) for f in _enabled(config)])
