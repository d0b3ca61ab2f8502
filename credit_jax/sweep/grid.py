"""A sweep config -> the grid's cells -> the compiled calls that run them, checked up front.

A sweep config (see configs/sweeps/) names a base config and axes:

    sweep.base = "configs/ppo_cartpole.py:small"   # a config file, optionally ':variant'
    sweep.experiment = ""                          # "" (a recipe) or an experiment's name
    sweep.overrides.total_timesteps = 51_200       # set on the base before the axes
    sweep.axes.lr = (1e-4, 3e-4, 1e-3)             # one tuple of values per field ...
    sweep.axes.env_kwargs.num_pivotal = (1, 2)     # ... nested fields nest here too
    sweep.seeds = 8                                # seeds per cell

A cell is one point of the grid (the base with one value of every axis), run for
`sweep.seeds` seeds. For a recipe, the axes whose field is a traced hyperparameter of the
recipe (a key of `Train.default_hparams`) are vmapped together with the seeds: all cells
that agree on every other axis form one group and run as one compiled call of
`cells x seeds` runs. Any other field (horizon, group size, network, the recipe itself,
env kwargs) changes shapes or structure and gives a group, hence a compile, of its own.
An experiment's cells cannot be vmapped: each (cell, seed) is one call of its `run`.

Everything that can be wrong with the grid is found here, before anything compiles: an
axis naming an unknown field or holding no value, a value the recipe rejects (its
`validate_config`, with the cell named), and a call whose runs would not fit in memory.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import itertools
import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple

import ml_collections

from credit_jax.algos.train import ConfigError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass
class Cell:
  """One grid point: `values` {axis field: value}; `config` the full config it runs."""
  index: int
  name: str
  values: Dict[str, Any]
  config: Any


@dataclasses.dataclass
class Call:
  """Cells run by one compiled call (a recipe) or one cell of an experiment."""
  index: int
  name: str
  cells: List[Cell]
  train: Any = None            # the recipe's Train (None for an experiment)
  est_bytes: int = 0           # rough memory estimate of the call's runs


@dataclasses.dataclass
class Plan:
  sweep: Any                   # the sweep config
  base: Any                    # the base config with the overrides applied
  experiment: str              # "" for a recipe
  axes: List[Tuple[str, tuple]]
  traced: Tuple[str, ...]      # axis fields vmapped with the seeds
  static: Tuple[str, ...]      # axis fields that each give their own compile
  cells: List[Cell]
  calls: List[Call]

  @property
  def seeds(self) -> int:
    return int(self.sweep.seeds)

  def describe(self) -> str:
    runs = len(self.cells) * self.seeds
    if self.experiment:
      return (f"{len(self.cells)} cells x {self.seeds} seeds = {runs} runs of experiment "
              f"{self.experiment!r}, one call each (experiments are not vmapped)")
    vm = ", ".join(list(self.traced) + ["seeds"])
    st = ", ".join(self.static) or "none"
    return (f"{len(self.cells)} cells x {self.seeds} seeds = {runs} runs in "
            f"{len(self.calls)} compiled call(s), {self.num_compiles()} compile(s) "
            f"(vmapped together: {vm}; a compile per value of: {st})")

  def num_compiles(self, calls: Optional[List[Call]] = None) -> int:
    """Programs `calls` (default all) compile: one per call and chunk length (a shorter
    last chunk of a run compiles a second program)."""
    count = 0
    for call in self.calls if calls is None else calls:
      total, chunk = call.train.num_updates, int(call.cells[0].config.chunk_updates)
      count += 1 + int(total > chunk and total % chunk != 0)
    return count


def load_config_file(spec: str):
  """`get_config(variant)` of the config file `path[:variant]` (relative to the working
  directory or to the repository root)."""
  path, _, variant = spec.partition(":")
  for candidate in (path, os.path.join(REPO_ROOT, path)):
    if os.path.isfile(candidate):
      break
  else:
    raise ConfigError(f"sweep.base: no config file {path!r} (looked in the working "
                      f"directory and in {REPO_ROOT})")
  module_spec = importlib.util.spec_from_file_location(
      "_sweep_base_" + re.sub(r"\W", "_", os.path.abspath(candidate)), candidate)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  try:
    return module.get_config(variant or None)
  except ValueError as e:
    raise ConfigError(f"sweep.base: {spec!r}: {e}") from e


def _flatten_axes(axes, prefix: str = "") -> List[Tuple[str, tuple]]:
  """`[(dotted field, values)]` from the nested `sweep.axes` (leaves are tuples/lists)."""
  out = []
  for key in sorted(axes.keys()) if axes is not None else ():
    value, field = axes[key], prefix + key
    if isinstance(value, (ml_collections.ConfigDict, dict)):
      out += _flatten_axes(value, field + ".")
    elif isinstance(value, (tuple, list)):
      if not value:
        raise ConfigError(f"sweep.axes.{field}: empty axis; give at least one value")
      out.append((field, tuple(value)))
    else:
      raise ConfigError(f"sweep.axes.{field}: must be a tuple of values, got {value!r}")
  return out


def _leaves(tree, prefix: str = ""):
  for key in sorted(tree.keys()):
    value = tree[key]
    if isinstance(value, (ml_collections.ConfigDict, dict)):
      yield from _leaves(value, prefix + key + ".")
    else:
      yield prefix + key, value


def _set_field(config, field: str, value, where: str) -> None:
  """Sets the dotted `field` of `config`; ConfigError naming `where.field` if unknown."""
  *parents, last = field.split(".")
  node = config
  for i, part in enumerate(parents):
    if not isinstance(node, ml_collections.ConfigDict) or part not in node:
      raise ConfigError(f"{where}.{field}: unknown field {'.'.join(parents[:i + 1])!r} "
                        f"of the base config")
    node = node[part]
  if not isinstance(node, ml_collections.ConfigDict) or last not in node:
    raise ConfigError(f"{where}.{field}: unknown field {field!r} of the base config")
  if isinstance(node[last], ml_collections.ConfigDict):
    raise ConfigError(f"{where}.{field}: {field!r} is a group of fields; sweep its leaves")
  try:
    with node.unlocked():
      node[last] = value
  except (TypeError, ValueError) as e:
    raise ConfigError(f"{where}.{field}: cannot set {value!r}: {e}") from e


def _fmt(value) -> str:
  if isinstance(value, float):
    return f"{value:g}"
  if isinstance(value, (tuple, list)):
    return "x".join(_fmt(v) for v in value)
  return str(value)


def _cell_name(index: int, values: Dict[str, Any]) -> str:
  parts = [f"{field.split('.')[-1]}={_fmt(v)}" for field, v in values.items()]
  name = re.sub(r"[^A-Za-z0-9._=,+-]", "_", ",".join(parts))[:80]
  return f"c{index:03d}" + (f"-{name}" if name else "")


def _experiment_module(name: str):
  """`credit_jax.experiments.<name>` when importable, else None (run as a script)."""
  from credit_jax import experiments  # pylint: disable=g-import-not-at-top
  try:
    return experiments.module(name)
  except ImportError:
    return None


def _validate_cell(plan_kind: str, cell: Cell, module, features=()) -> None:
  from credit_jax import algos
  try:
    if not plan_kind:
      algos.validate_config(cell.config, features)
    elif module is not None:
      check = getattr(module, "validate_config", None) or getattr(module, "check_config",
                                                                  None)
      if check is not None:
        check(cell.config)
  except ValueError as e:
    where = ", ".join(f"sweep.axes.{k}={_fmt(v)}" for k, v in cell.values.items())
    raise ConfigError(f"cell {cell.name} ({where or 'the base'}): {e}") from e


def expand(sweep) -> Tuple[Any, List[Tuple[str, tuple]], List[Cell]]:
  """The base config (overrides applied), the axes and every cell's config."""
  if int(sweep.seeds) < 1:
    raise ConfigError(f"sweep.seeds: must be >= 1, got {sweep.seeds}")
  base = load_config_file(str(sweep.base))
  overrides = sweep.get("overrides")
  for field, value in (_leaves(overrides) if overrides is not None else ()):
    _set_field(base, field, value, "sweep.overrides")
  axes = _flatten_axes(sweep.get("axes"))
  for field, values in axes:   # every field is known before any cell is built
    _set_field(base.copy_and_resolve_references(), field, values[0], "sweep.axes")
  cells = []
  for index, combo in enumerate(itertools.product(*[v for _, v in axes])):
    values = {field: value for (field, _), value in zip(axes, combo)}
    config = base.copy_and_resolve_references()
    for field, value in values.items():
      _set_field(config, field, value, "sweep.axes")
    if "seeds" in config and not sweep.experiment:
      config.seeds = int(sweep.seeds)
    cells.append(Cell(index, _cell_name(index, values), values, config))
  return base, axes, cells


def plan(sweep, memory_limit_bytes: Optional[int] = None, features=()) -> Plan:
  """Expands, validates and groups the grid; raises ConfigError before any compile.

  `features`: feature objects every cell's recipe is given (`algos.make_train(config,
  features)`); their traced hyperparameters (dotted config paths) are vmapped axes too."""
  base, axes, cells = expand(sweep)
  experiment = str(sweep.get("experiment", "") or "")
  if experiment:
    module = _experiment_module(experiment)
    for cell in cells:
      _validate_cell(experiment, cell, module)
    calls = [Call(c.index, c.name, [c]) for c in cells]
    return Plan(sweep, base, experiment, axes, (), tuple(f for f, _ in axes), cells, calls)

  from credit_jax import algos
  for cell in cells:
    _validate_cell("", cell, None, features)
  # Traced: fields every cell's recipe takes as a hyperparameter leaf.
  hparam_keys = None
  for algo in sorted({c.config.algo for c in cells}):
    first = next(c for c in cells if c.config.algo == algo)
    keys = set(algos.make_train(first.config, features).default_hparams)
    hparam_keys = keys if hparam_keys is None else hparam_keys & keys
  traced = tuple(f for f, _ in axes if f in hparam_keys)
  static = tuple(f for f, _ in axes if f not in hparam_keys)
  groups: Dict[str, List[Cell]] = {}
  for cell in cells:
    key = json.dumps([_fmt(cell.values[f]) for f in static])
    groups.setdefault(key, []).append(cell)
  per_call = int(sweep.get("cells_per_call", 0) or 0)
  calls = []
  for group in groups.values():
    step = per_call if per_call > 0 else len(group)
    for i in range(0, len(group), step):
      part = group[i:i + step]
      name = f"k{len(calls):03d}-" + part[0].name.split("-", 1)[0] + (
          f"..{part[-1].name.split('-', 1)[0]}" if len(part) > 1 else "")
      calls.append(Call(len(calls), name, part,
                        train=algos.make_train(part[0].config, features)))
  result = Plan(sweep, base, "", axes, traced, static, cells, calls)
  _check_memory(result, memory_limit_bytes)
  return result


def _run_bytes(train) -> int:
  """A rough per-run memory estimate: the train state 4x (parameters, Adam moments,
  gradients, a copy between chunks) plus 8 copies of one update's rollout (float32
  observations and ~16 floats per step: actions, values, advantages, the backward pass)."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from credit_jax.algos import train as train_lib
  shapes = jax.eval_shape(train.init, jax.ShapeDtypeStruct((2,), np.uint32),
                          train.default_hparams)
  state = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(shapes))
  env, env_params = train_lib.make_env(train.config)
  obs = int(np.prod(env.observation_space(env_params).shape)) * 4
  return 4 * state + 8 * train.env_steps_per_update * (obs + 64)


def _default_memory_limit() -> int:
  """Half the host's RAM on a CPU; 80% of the first device's memory otherwise."""
  import jax  # pylint: disable=g-import-not-at-top
  device = jax.local_devices()[0]
  if device.platform != "cpu":
    stats = device.memory_stats() or {}
    if stats.get("bytes_limit"):
      return int(0.8 * stats["bytes_limit"])
  return int(0.5 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _check_memory(plan_: Plan, limit: Optional[int] = None) -> None:
  gb = float(plan_.sweep.get("memory_limit_gb", 0.0) or 0.0)
  limit = limit if limit is not None else (int(gb * 2**30) if gb > 0
                                          else _default_memory_limit())
  for call in plan_.calls:
    runs = len(call.cells) * plan_.seeds
    call.est_bytes = _run_bytes(call.train) * runs
    if call.est_bytes > limit:
      vm = ", ".join([f"sweep.axes.{f}" for f in plan_.traced] + ["sweep.seeds"])
      raise ConfigError(
          f"sweep.seeds / sweep.axes: call {call.name} vmaps {len(call.cells)} cells x "
          f"{plan_.seeds} seeds = {runs} runs, estimated {call.est_bytes / 2**30:.2f} GiB, "
          f"over the limit of {limit / 2**30:.2f} GiB (sweep.memory_limit_gb); use fewer "
          f"values of {vm}, or split the calls with sweep.cells_per_call")
