"""The registry of every feature a recipe can take through the hooks protocol
(`hooks.py`), and the few calls a recipe makes to take them.

`FEATURES` lists them in the order their slots run: the horizon curriculum (it replaces
the environment, so it comes first), PRM shaping, then the step-level credit estimators
(VinePPO's vines, GiGPO's anchors, tree-structured groups), then the learned ones
(RUDDER, HCA, COCOA). A recipe names the ones it
accepts in its `Recipe` (`hooks.Recipe(name, accepts=HOOKS, ...)`); `train.validate`
calls `check` for every recipe, so a feature a recipe does not accept is refused here,
in one place, naming the feature's field.

A fork's feature is not listed here: it is an object passed to a recipe,
`make_train(config, features=(MyCredit(),))`, and every call below takes such objects
as `passed` (after the registry's, in the order given).

In a recipe's `make_train`: `env, env_params = wrap_env(config, env, env_params, passed)`,
then `hooks = bind(config, RECIPE, env, env_params, policy, batch, network, logits,
discount, passed)`, `hparams(config, passed)` joined to the recipe's default hparams, and
each slot of `hooks` called once per update.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import ml_collections

from credit_jax.addons import (curriculum, gigpo, hindsight_credit, hooks, prm, rudder,
                               tree_groups, vine_ppo)
from credit_jax.config import require

__all__ = ["CONFIG_WRAPPERS", "FEATURES", "bind", "check", "config_wrappers", "enabled",
           "hparams", "wrap_env"]

# The step-level credit estimators: they run with an MLP policy in the recipes (the
# estimators in their modules, gigpo.py, vine_ppo.py, tree_groups.py, also take
# sequence policies).
_STEP_CREDIT: Tuple[hooks.Feature, ...] = (vine_ppo.VineFeature(), gigpo.GigpoFeature(),
                                          tree_groups.TreeFeature())
# The learned credit estimators: RUDDER's redistribution (`shape_rewards`), HCA's and
# COCOA's hindsight credit (`advantages`), each with its model trained online.
_LEARNED_CREDIT: Tuple[hooks.Feature, ...] = (rudder.RudderFeature(),
                                             hindsight_credit.HcaFeature(),
                                             hindsight_credit.CocoaFeature())
FEATURES: Tuple[hooks.Feature, ...] = (curriculum.CurriculumFeature(),
                                       prm.PrmFeature()) + _STEP_CREDIT + _LEARNED_CREDIT


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


def enabled(config, passed: Sequence[hooks.Feature] = ()) -> Tuple[str, ...]:
  """The names of the features `config` turns on (empty: none)."""
  return tuple(f.name for f in _enabled(config, passed))


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
  hooks.check(config, recipe, FEATURES, passed)
  kind = str(config.get("network", {}).get("kind", "mlp"))
  for f in (f for f in _STEP_CREDIT if f.enabled(config)):
    require(kind in ("mlp", "tabular", "linear"), "network.kind",
            f"the {f.name} hook runs with a memoryless policy (mlp, tabular, linear) in "
            f"the recipes, got {kind!r}")


# Environment wrappers a config turns on with a top-level field rather than a feature
# block: {field: the module supplying `wrap_env_from_config(config, env, env_params)`},
# imported only when the field is set (to a truthy value). `algos/train.make_env` applies
# them, under the history window, naming none; a fork's own environment wrapper is an
# environment (`credit_jax.envs.register`) or a feature's `wrap_env`, not an entry here.
CONFIG_WRAPPERS: Dict[str, str] = {
    "retry_attempts": "credit_jax.addons.critique",   # retry episodes with critiques
}


def config_wrappers(config, env, env_params):
  """`(env, env_params)` inside every `CONFIG_WRAPPERS` entry whose field `config` sets,
  in the table's order."""
  for field, module in CONFIG_WRAPPERS.items():
    if config.get(field):
      env, env_params = importlib.import_module(module).wrap_env_from_config(
          config, env, env_params)
  return env, env_params


def wrap_env(config, env, env_params, passed: Sequence[hooks.Feature] = ()):
  """`(env, env_params)` after every enabled feature's `wrap_env`, in registry order
  (then the `passed` objects')."""
  for f in _enabled(config, passed):
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
         network: Optional[Any] = None, logits: Optional[Callable] = None,
         discount: Callable = hooks.undiscounted,
         passed: Sequence[hooks.Feature] = ()) -> hooks.Hooks:
  """The run's hooks: every enabled feature (the registry's, then the `passed` objects)
  bound to one `hooks.Context` of the recipe's pieces: `policy` its rollout policy,
  `network` its flax network (None where it has several), `logits(params, traj) ->
  [T, B..., A]` (default: `network`'s first output at `traj.obs`), `discount(hp)`."""
  if logits is None and network is not None:
    logits = lambda params, traj: network.apply(params, traj.obs)[0]
  context = hooks.Context(config=config, recipe=recipe, env=env, env_params=env_params,
                          policy=policy, network=network, logits=logits,
                          discount=discount, batch=int(batch))
  return hooks.Hooks([(f.name, f.bind(context)) for f in _enabled(config, passed)])
