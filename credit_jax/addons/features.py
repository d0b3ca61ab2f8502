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

import ml_collections

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


def _enabled(config, passed: Sequence[hooks.Feature] = ()):
  return [f for f in known(passed) if f.enabled(config)]


def known(passed: Sequence[hooks.Feature] = ()) -> Tuple[hooks.Feature, ...]:
  """The registry's features, then the `passed` ones (a fork's objects, given to a
  recipe's `make_train(config, features=...)`); ValueError on a name used twice."""
  out = FEATURES + tuple(passed)
  for f in passed:
    if not isinstance(f, hooks.Feature):
      raise ValueError(f"features: {f!r} is not a hooks.Feature")
  names = [f.name for f in out]
  dup = sorted({n for n in names if names.count(n) > 1})
  if dup or not all(names):
    raise ValueError(f"features: every feature needs a name of its own; {dup or names}")
  return out


def enabled(config) -> Tuple[str, ...]:
  """The names of the features `config` turns on (empty: none)."""
  return tuple(f.name for f in _enabled(config))


def check(config, recipe: hooks.Recipe, passed: Sequence[hooks.Feature] = (),
          blocks: Sequence[str] = ()) -> None:
  """Raises `ConfigError` naming the first config block no feature claims (a block is a
  group of fields, `config.<name>`; `blocks` are the recipe's own, such as `network`),
  then the field of a feature `recipe` does not take, or the first field an accepted one
  cannot run with. `passed`: the feature objects given to the recipe's `make_train`."""
  feats = known(passed)
  claimed = {f.block for f in feats} | set(blocks)
  for key in config.keys():
    if isinstance(config[key], ml_collections.ConfigDict) and key not in claimed:
      require(False, key, f"no feature claims this block, so it would be ignored; the "
              f"registry's are {sorted({f.block for f in FEATURES})}, a fork's feature is "
              f"passed as make_train(config, features=(MyFeature(),))")
  hooks.check(config, recipe, feats)
  kind = str(config.get("network", {}).get("kind", "mlp"))
  for f in (f for f in STEP_CREDIT if f.enabled(config)):
    require(kind in ("mlp", "tabular", "linear"), "network.kind",
            f"the {f.name} hook runs with a memoryless policy (mlp, tabular, linear) in "
            f"the recipes, got {kind!r}")


def wrap_env(config, env, env_params):
  """`(env, env_params)` after every enabled feature's `wrap_env`, in registry order."""
  for f in _enabled(config):
    env, env_params = f.wrap_env(config, env, env_params)
  return env, env_params


def hparams(config, passed: Sequence[hooks.Feature] = ()):
  """The traced hyperparameters of the enabled features, `{dotted config path: value}`.

  Raises ValueError when a feature names one by anything but its config path (a sweep
  reads each cell's value from that path)."""
  out = {}
  for f in _enabled(config, passed):
    for name, value in f.hparams(config).items():
      try:
        hooks.config_value(config, name)
      except KeyError as e:
        raise ValueError(f"feature {f.name!r} names a traced hyperparameter {name!r}, "
                         f"which is not a field of the config: name it by its dotted "
                         f"config path") from e
      out[name] = value
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
