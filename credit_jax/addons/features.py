"""The registry of every feature a recipe can take through the hooks protocol
(`hooks.py`), and the few calls a recipe makes to take them.

`FEATURES` lists them in the order their slots run: the horizon curriculum (it replaces
the environment, so it comes first), PRM shaping, then the step-level credit estimators
(VinePPO's vines, GiGPO's anchors, tree-structured groups). A recipe names the ones it
accepts in its `Recipe` (`hooks.Recipe(name, accepts=HOOKS, ...)`); `train.validate`
calls `check` for every recipe, so a feature a recipe does not accept is refused here,
in one place, naming the feature's field.

In a recipe's `make_train`: `env, env_params = wrap_env(config, env, env_params)`, then
`hooks = bind(config, RECIPE, env, env_params, agent, batch)`, `hparams(config)` joined
to the recipe's default hparams, and each slot of `hooks` called once per update.
"""
from __future__ import annotations

import types
from typing import Any, Optional, Sequence, Tuple

from credit_jax.addons import curriculum, gigpo, hooks, prm, tree_groups, vine_ppo
from credit_jax.config import require

__all__ = ["FEATURES", "STEP_CREDIT", "bind", "check", "enabled", "hparams", "wrap_env"]

# The step-level credit estimators: they run with an MLP policy in the recipes (the
# estimators under them, credit_jax/vine.py, anchors.py, tree_rollouts.py, also take
# sequence policies).
STEP_CREDIT: Tuple[hooks.Feature, ...] = (vine_ppo.VineFeature(), gigpo.GigpoFeature(),
                                          tree_groups.TreeFeature())
FEATURES: Tuple[hooks.Feature, ...] = (curriculum.CurriculumFeature(),
                                       prm.PrmFeature()) + STEP_CREDIT


def _enabled(config, features: Sequence[hooks.Feature] = FEATURES):
  return [f for f in features if f.enabled(config)]


def enabled(config) -> Tuple[str, ...]:
  """The names of the features `config` turns on (empty: none)."""
  return tuple(f.name for f in _enabled(config))


def check(config, recipe: hooks.Recipe) -> None:
  """Raises `ConfigError` naming the field of a feature `recipe` does not take, or the
  first field an accepted one cannot run with."""
  hooks.check(config, recipe, FEATURES)
  kind = str(config.get("network", {}).get("kind", "mlp"))
  for f in _enabled(config, STEP_CREDIT):
    require(kind in ("mlp", "tabular", "linear"), "network.kind",
            f"the {f.name} hook runs with a memoryless policy (mlp, tabular, linear) in "
            f"the recipes, got {kind!r}")


def wrap_env(config, env, env_params):
  """`(env, env_params)` after every enabled feature's `wrap_env`, in registry order."""
  for f in _enabled(config):
    env, env_params = f.wrap_env(config, env, env_params)
  return env, env_params


def hparams(config):
  """The traced hyperparameters of the enabled features, `{name: value}`."""
  out = {}
  for f in _enabled(config):
    out.update(f.hparams(config))
  return out


def bind(config, recipe: hooks.Recipe, env, env_params, policy: Any, batch: int,
         network: Optional[Any] = None) -> hooks.Hooks:
  """The run's hooks. `policy` is the recipe's rollout policy and `network` its flax
  policy network (None where a feature may not use it): what the features see as
  `context.agent.policy()` and `context.agent.network`."""
  agent = types.SimpleNamespace(policy=lambda: policy, network=network)
  context = hooks.Context(config=config, recipe=recipe, env=env, env_params=env_params,
                          agent=agent, batch=int(batch))
  return hooks.Hooks([(f.name, f.bind(context)) for f in _enabled(config)])
