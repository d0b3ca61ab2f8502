"""Process setup for entry points, from the parsed config, in one place.

Library modules never touch process-wide settings (see docs/ARCHITECTURE.md). Entry
points (scripts/train.py, the experiment scripts, the sweep runner, benchmarks) call
`configure_process` at the top of their `main`, after absl has parsed the flags and the
config and before anything runs a JAX computation:

    def main(argv):
      config = _CONFIG.value
      launch.configure_process(num_seeds=int(config.seeds))
      ...

`make_flags_parser` / `apply_env_overrides` let a command line set any option of the
configured environment (`--config.env_kwargs.NAME=VALUE`), even one the config file does
not name:

    app.run(main, flags_parser=launch.make_flags_parser("config"))
    ...
    config = launch.apply_env_overrides(_CONFIG.value)   # after configure_process

What it sets, and why: jaxlib 0.10's XLA CPU runtime was seen to wedge for good (every
thread parked, the result never ready) on vmapped multi-seed programs. `xla_flags_for`
returns the XLA flags that avoid it on the installed jaxlib, and nothing for jaxlib
versions not known to accept them (XLA aborts the whole process on a flag it does not
know). XLA reads `XLA_FLAGS` once, when JAX creates its first backend; when a backend
already exists and the flags are missing, the process re-executes itself with them (the
same argv), so the setting never silently fails to apply. Importing the credit_jax
package starts a backend (gymnax runs a JAX operation at import), so an entry point that
imports it at the top re-executes once for a multi-seed run (a few seconds).
scripts/distributed.py loads this file by path instead and sets the flags before
`jax.distributed` starts, where a re-execution would break the processes' connection.

This file imports no JAX (nor any credit_jax module) at import time; it only reads
jaxlib's version from the installed package metadata (`apply_env_overrides` imports
credit_jax when called).
"""
from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import inspect
import os
import re
import sys
from typing import (Any, Callable, Dict, List, MutableMapping, Optional, Sequence,
                    Tuple)

# (flag name, value) pairs applied on CPU for multi-seed programs, per jaxlib (major, minor).
# A flag already named in XLA_FLAGS (either way) is left as the user set it.
# jaxlib 0.10: both the concurrency-optimised thunk scheduler and Eigen's intra-op thread
# pool off. The wedge was seen once each in scripts/hindsight.py part b (GRPO cell) and
# with 16 vmapped PPO seeds; reruns with one of the two off finished (issue 23; other
# projects saw eigen=false remove it: 12 passes / 0 hangs against 2 / 14). Our soak
# (scripts/soak.py, BUILD.md "Hang soak", jaxlib 0.10.2, 2 cores) saw 0 wedges in 11
# default runs, so it cannot say which flag is needed; with both off, 20 of 20 runs of
# hindsight.py part b and 20 of 20 16-seed PPO runs finished, none hung. CPU time per
# run was the same with and without them (within the noise).
_CPU_FLAGS = {
    (0, 10): (("xla_cpu_enable_concurrency_optimized_scheduler", "false"),
              ("xla_cpu_multi_thread_eigen", "false")),
}
# Set in the re-executed child so that it never re-executes again.
_REEXEC_MARK = "CREDIT_JAX_LAUNCH_REEXEC"


def jaxlib_version() -> Optional[Tuple[int, int]]:
  """(major, minor) of the installed jaxlib, or None if it is missing or unparsable."""
  try:
    version = importlib.metadata.version("jaxlib")
  except importlib.metadata.PackageNotFoundError:
    return None
  match = re.match(r"(\d+)\.(\d+)", version)
  return (int(match.group(1)), int(match.group(2))) if match else None


def xla_flags_for(num_seeds: int, version: Optional[Tuple[int, int]] = None,
                  existing: str = "") -> List[str]:
  """The `--name=value` XLA flags to add for a run of `num_seeds` vmapped seeds.

  Args:
    num_seeds: seeds (or cells) the program vmaps; one-seed runs get no flag (the wedge
      was only seen with more than one, and the flags cost time at one).
    version: jaxlib (major, minor); default the installed one.
    existing: the current XLA_FLAGS; flags it already names are not added again.
  """
  if not isinstance(num_seeds, int) or isinstance(num_seeds, bool) or num_seeds < 1:
    raise ValueError(f"num_seeds must be an int >= 1, got {num_seeds!r}")
  version = jaxlib_version() if version is None else version
  if num_seeds <= 1:
    return []
  return [f"--{name}={value}" for name, value in _CPU_FLAGS.get(version, ())
          if name not in existing]


def _backend_started() -> bool:
  """True when JAX has already created a backend (XLA_FLAGS can no longer change)."""
  if "jax" not in sys.modules:
    return False
  try:
    from jax._src import xla_bridge  # pylint: disable=g-import-not-at-top
    return bool(xla_bridge.backends_are_initialized())
  except (ImportError, AttributeError):   # a jax without this private helper: assume yes
    return True


def _stderr(line: str) -> None:
  print(line, file=sys.stderr, flush=True)


def configure_process(num_seeds: int = 1, *,
                      environ: Optional[MutableMapping[str, str]] = None,
                      version: Optional[Tuple[int, int]] = None,
                      argv: Optional[Sequence[str]] = None,
                      reexec: bool = True,
                      log: Callable[[str], None] = _stderr) -> List[str]:
  """Adds the XLA flags for `num_seeds` vmapped seeds to XLA_FLAGS; returns those added.

  Call before any JAX computation. If a JAX backend already exists and flags had to be
  added, the process re-executes itself with `argv` (default: the command line as given)
  and the new
  environment (saying so through `log`), unless `reexec` is False, in which case it
  raises RuntimeError.
  """
  environ = os.environ if environ is None else environ
  existing = environ.get("XLA_FLAGS", "")
  added = xla_flags_for(num_seeds, version, existing)
  if not added:
    if environ is os.environ:
      os.environ.pop(_REEXEC_MARK, None)   # a re-executed child: its children start clean
    return []
  environ["XLA_FLAGS"] = " ".join([existing] + added).strip()
  if environ is os.environ and _backend_started():
    if not reexec or os.environ.get(_REEXEC_MARK):
      raise RuntimeError(
          f"JAX started its backend before credit_jax.runtime.launch.configure_process could set "
          f"XLA_FLAGS={environ['XLA_FLAGS']!r}; call it before any JAX computation, or "
          f"start Python with that XLA_FLAGS")
    os.environ[_REEXEC_MARK] = "1"
    log(f"launch: JAX had started before XLA_FLAGS could be set; re-executing with "
        f"XLA_FLAGS={environ['XLA_FLAGS']!r}")
    sys.stdout.flush()
    sys.stderr.flush()
    args = list(argv if argv is not None else (_ORIGINAL_ARGV or sys.argv))
    os.execv(sys.executable, [sys.executable] + args)
  return added


def hang_advice(version: Optional[Tuple[int, int]] = None,
                environ: Optional[MutableMapping[str, str]] = None) -> str:
  """One sentence on the XLA setting to try after a hang, for the watchdog's message."""
  environ = os.environ if environ is None else environ
  version = jaxlib_version() if version is None else version
  current = environ.get("XLA_FLAGS", "")
  known = [f"--{name}={value}" for name, value in _CPU_FLAGS.get(version, ())]
  missing = [f for f in known if f.split("=")[0][2:] not in current]
  where = f"jaxlib {'.'.join(map(str, version)) if version else '(unknown)'}"
  if missing:
    return (f"Start Python with XLA_FLAGS='{' '.join([current] + missing).strip()}' "
            f"(what credit_jax.runtime.launch sets for multi-seed runs on {where}).")
  if known:
    return (f"XLA_FLAGS already holds credit_jax.runtime.launch's setting for {where} "
            f"({' '.join(known)}); try fewer seeds, and report the stacks above.")
  return (f"credit_jax.runtime.launch knows no XLA setting against hangs on {where} "
          f"(XLA_FLAGS={current!r}); try fewer seeds, and report the stacks above.")


# --- environment options from the command line --------------------------------------------

# `--config.env_kwargs.NAME=VALUE` (or `... VALUE`) arguments taken out of argv by the
# parser `make_flags_parser` returns, for `apply_env_overrides`; and the command line as
# given, for a re-execution.
_ENV_OVERRIDES: Dict[str, str] = {}
_ORIGINAL_ARGV: List[str] = []


def split_env_overrides(argv: Sequence[str], config_flag: str = "config"
                        ) -> Tuple[List[str], Dict[str, str]]:
  """(argv without `--<config_flag>.env_kwargs.NAME[=]VALUE` arguments, {NAME: VALUE}).

  The last value given for a name wins. Raises ValueError for a name with no value.
  """
  prefix = f"--{config_flag}.env_kwargs."
  rest, found = [], {}
  args = list(argv)
  i = 0
  while i < len(args):
    arg = args[i]
    if not arg.startswith(prefix):
      rest.append(arg)
      i += 1
      continue
    name, eq, value = arg[len(prefix):].partition("=")
    if not eq:
      if i + 1 >= len(args) or args[i + 1].startswith("--"):
        raise ValueError(f"{arg} needs a value: {arg}=VALUE")
      value = args[i + 1]
      i += 1
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
      raise ValueError(f"{arg}: {name!r} is not an option name")
    found[name] = value
    i += 1
  return rest, found


def make_flags_parser(config_flag: str = "config") -> Callable[[List[str]], List[str]]:
  """A `flags_parser` for `absl.app.run` that sets aside `--<config_flag>.env_kwargs.*`
  arguments for `apply_env_overrides` and parses the rest as absl does.

  The arguments are also taken out of `sys.argv`, which ml_collections' config flag reads
  by itself; `configure_process` re-executes with the command line as given.
  """

  def parse(argv: List[str]) -> List[str]:
    from absl import app  # pylint: disable=g-import-not-at-top
    try:
      rest, found = split_env_overrides(argv, config_flag)
      sys_rest, _ = split_env_overrides(sys.argv, config_flag)
    except ValueError as e:
      _stderr(f"error: {e}")
      sys.exit(2)
    _ENV_OVERRIDES.clear()
    _ENV_OVERRIDES.update(found)
    _ORIGINAL_ARGV[:] = sys.argv
    sys.argv[:] = sys_rest
    return app.parse_flags_with_usage(rest)
  return parse


def _option_defaults(env_name: str) -> Tuple[Dict[str, Any], str]:
  """{option: default value} of what `cj.envs.make(env_name)` accepts, and a line that
  lists them."""
  from credit_jax import envs
  static, fields = envs.overrides_of(env_name)
  env, params = envs.make(env_name)
  signature = inspect.signature(type(env))
  defaults = {name: signature.parameters[name].default for name in static}
  defaults.update({f.name: getattr(params, f.name) for f in dataclasses.fields(params)
                   if f.name in fields})
  accepted = (f"constructor options: {', '.join(static) or '(none)'}; params fields: "
              f"{', '.join(fields) or '(none)'}")
  return defaults, accepted


def _parse_value(raw: str, default: Any) -> Any:
  """`raw` as the type of `default`; ValueError naming the type it wanted."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  if hasattr(default, "dtype") and getattr(default, "shape", None) == ():
    default = np.asarray(default).item()
  if isinstance(default, bool):
    if raw.lower() in ("true", "1", "yes"):
      return True
    if raw.lower() in ("false", "0", "no"):
      return False
    raise ValueError("expected true or false")
  if isinstance(default, int):
    try:
      return int(raw)
    except ValueError:
      raise ValueError("expected an integer") from None
  if isinstance(default, float):
    try:
      return float(raw)
    except ValueError:
      raise ValueError("expected a number") from None
  if isinstance(default, str):
    return raw
  try:
    return ast.literal_eval(raw)
  except (ValueError, SyntaxError):
    if default is None or default is inspect.Parameter.empty:
      return raw
    raise ValueError(f"expected a Python literal like {default!r}") from None


def apply_env_overrides(config, overrides: Optional[Dict[str, str]] = None):
  """Sets `config.env_kwargs[NAME]` for each command-line `NAME=VALUE`; returns `config`.

  Args:
    config: a parsed config with `env_name` and `env_kwargs` (a ConfigDict or dict, may
      be empty).
    overrides: {NAME: raw string}; default the ones `make_flags_parser`'s parser set aside.
  Each name must be an option `cj.envs.make(config.env_name)` accepts (see
  `cj.envs.overrides_of`); each value is parsed as the type of the option's default.
  Raises:
    credit_jax.algos.ConfigError: one line naming the option and listing what is
      accepted (entry points print it and exit 2).
  """
  overrides = dict(_ENV_OVERRIDES if overrides is None else overrides)
  if not overrides:
    return config
  from credit_jax.algos.train import ConfigError
  if "env_name" not in config or "env_kwargs" not in config:
    raise ConfigError(f"config.env_kwargs: this config has no env_name/env_kwargs to set "
                      f"{', '.join(sorted(overrides))} on")
  try:
    defaults, accepted = _option_defaults(config.env_name)
  except ValueError as e:
    raise ConfigError(f"config.env_name: {e}") from None
  values = {}
  for name, raw in overrides.items():
    if name not in defaults:
      raise ConfigError(f"config.env_kwargs.{name}: {config.env_name} has no option "
                        f"{name!r}; {accepted}")
    try:
      values[name] = _parse_value(raw, defaults[name])
    except ValueError as e:
      raise ConfigError(f"config.env_kwargs.{name}={raw!r}: {e}; {config.env_name} "
                        f"accepts {accepted}") from None
  unlocked = getattr(config, "unlocked", None)
  if unlocked is not None:
    with unlocked():
      for name, value in values.items():
        config.env_kwargs[name] = value
  else:
    config["env_kwargs"].update(values)
  return config
