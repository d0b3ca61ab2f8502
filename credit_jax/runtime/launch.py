"""Process setup for scripts and entry points, in one place.

Library modules never touch process-wide settings (see docs/ARCHITECTURE.md). A script
that uses the library makes one call before its first JAX computation:

    import credit_jax as cj
    cj.configure_process()        # this module's configure_process, for any program

Entry points (scripts/train.py, the experiment scripts, the sweep runner, benchmarks)
call it at the top of their `main`, after absl has parsed the flags and the config, with
the number of seeds they vmap:

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

What it sets, and why: jaxlib 0.10's XLA CPU runtime wedges for good (every thread
parked, the result never ready) on vmapped programs that batch a LAPACK kernel, such as
any recipe's orthogonal initialisers vmapped over seeds (`_CPU_FLAGS`). `xla_flags_for`
returns the XLA flags that avoid it on the installed jaxlib, and nothing for jaxlib
versions not known to accept them (XLA aborts the whole process on a flag it does not
know). XLA reads `XLA_FLAGS` once, when JAX creates its first backend. `import
credit_jax` starts none (its submodules, and gymnax, which runs a JAX operation at
import, load at first use), so the call right after it applies in the process itself.
When a backend already exists and the flags are missing, a script re-executes itself with
them (the same argv, a few seconds), so the setting never silently fails to apply; where
there is no script to re-execute (`python3 -c`, a notebook) it raises, naming the
XLA_FLAGS to start Python with. The package warns once, at the first use of a `cj.` name,
when the installed jaxlib needs the flags and neither the call nor XLA_FLAGS set them
(`warn_if_unconfigured`; a warning, no change to JAX). scripts/distributed.py loads this
file by path and sets the flags before `jax.distributed` starts, where a re-execution
would break the processes' connection.

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
import warnings
from typing import (Any, Callable, Dict, List, MutableMapping, Optional, Sequence,
                    Tuple)

# (flag name, value) pairs applied on CPU, per jaxlib (major, minor): to any program when
# `num_seeds` is None, to multi-seed programs when an entry point gives it.
# A flag already named in XLA_FLAGS (either way) is left as the user set it.
# jaxlib 0.10 (BUILD.md "No hang from Python"): its CPU LAPACK kernels (QR, under every
# orthogonal initialiser) split a vmapped batch over XLA's intra-op thread pool and wait
# for the pieces from inside that pool. With the concurrency-optimised thunk scheduler,
# two such kernels can occupy every pool thread of a 2-core machine, each waiting for
# work queued behind the other: the process parks for good. PPO with a GRU, 2 vmapped
# seeds, 2 cores, no flags: 5 of 5 runs hung (jaxlib 0.10.2; 5 of 5 on 0.10.1), every one
# with the pool threads in QrFactorization -> ParallelBatchMap -> BlockingCounter::Wait;
# with the scheduler off 5 of 5 finished; Eigen's thread pool off alone, or XLA's YNN
# fusions off, hung 5 of 5. Eigen's pool stays off too: a wedge was once seen with the
# scheduler alone off (scripts/prm.py), and turning it off costs nothing measurable here.
# jaxlib 0.11.2 and later have no such wait (5 of 5 runs finished without flags).
_CPU_FLAGS = {
    (0, 10): (("xla_cpu_enable_concurrency_optimized_scheduler", "false"),
              ("xla_cpu_multi_thread_eigen", "false")),
}
# Set in the re-executed child so that it never re-executes again.
_REEXEC_MARK = "CREDIT_JAX_LAUNCH_REEXEC"
# Whether configure_process ran in this process, and whether the warning was given.
_CONFIGURED = False
_WARNED = False
# Set by `entry_point_will_configure()` (an absl main that calls configure_process
# itself once its flags are parsed): no warning at a first use before that.
_ENTRY_POINT = False


def entry_point_will_configure() -> None:
  """Marks this process as an entry point that calls `configure_process` itself, so
  `warn_if_unconfigured` does not tell its user to. `credit_jax.experiments.cli` calls it
  at import (scripts import it before their study); a library user never needs it."""
  global _ENTRY_POINT
  _ENTRY_POINT = True


def jaxlib_version() -> Optional[Tuple[int, int]]:
  """(major, minor) of the installed jaxlib, or None if it is missing or unparsable."""
  try:
    version = importlib.metadata.version("jaxlib")
  except importlib.metadata.PackageNotFoundError:
    return None
  match = re.match(r"(\d+)\.(\d+)", version)
  return (int(match.group(1)), int(match.group(2))) if match else None


def xla_flags_for(num_seeds: Optional[int] = None,
                  version: Optional[Tuple[int, int]] = None,
                  existing: str = "") -> List[str]:
  """The `--name=value` XLA flags to add for a program of `num_seeds` vmapped seeds.

  Args:
    num_seeds: seeds (or cells) the program vmaps, as an entry point knows it; one-seed
      runs get no flag (the wedge needs a batched kernel, see `_CPU_FLAGS`). None (a
      library user's script, which may vmap anything): the flags for any program.
    version: jaxlib (major, minor); default the installed one.
    existing: the current XLA_FLAGS; flags it already names are not added again.
  """
  if num_seeds is not None and (not isinstance(num_seeds, int)
                                or isinstance(num_seeds, bool) or num_seeds < 1):
    raise ValueError(f"num_seeds must be None or an int >= 1, got {num_seeds!r}")
  version = jaxlib_version() if version is None else version
  if num_seeds == 1:
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


def configure_process(num_seeds: Optional[int] = None, *,
                      environ: Optional[MutableMapping[str, str]] = None,
                      version: Optional[Tuple[int, int]] = None,
                      argv: Optional[Sequence[str]] = None,
                      reexec: bool = True,
                      log: Callable[[str], None] = _stderr) -> List[str]:
  """Adds the XLA flags for `num_seeds` vmapped seeds to XLA_FLAGS; returns those added.

  Call before any JAX computation (`cj.configure_process()` in a script; entry points
  pass `num_seeds`, None means any program). If a JAX backend already exists and flags had
  to be added, a script run as `python3 FILE ...` re-executes itself with `argv`
  (default: the command line as given) and the new environment (saying so through
  `log`); it raises RuntimeError instead when `reexec` is False or there is no script
  file to re-execute (`python3 -c`, a notebook, the REPL).
  """
  global _CONFIGURED
  environ = os.environ if environ is None else environ
  existing = environ.get("XLA_FLAGS", "")
  added = xla_flags_for(num_seeds, version, existing)
  if environ is os.environ:
    _CONFIGURED = True
  if not added:
    if environ is os.environ:
      os.environ.pop(_REEXEC_MARK, None)   # a re-executed child: its children start clean
    return []
  environ["XLA_FLAGS"] = " ".join([existing] + added).strip()
  if environ is os.environ and _backend_started():
    args = list(argv if argv is not None else (_ORIGINAL_ARGV or sys.argv))
    if not reexec or os.environ.get(_REEXEC_MARK) or not (args and os.path.isfile(args[0])):
      raise RuntimeError(
          f"JAX started its backend before credit_jax.configure_process could set "
          f"XLA_FLAGS={environ['XLA_FLAGS']!r}; call it before any JAX computation, or "
          f"start Python with that XLA_FLAGS")
    os.environ[_REEXEC_MARK] = "1"
    log(f"launch: JAX had started before XLA_FLAGS could be set; re-executing with "
        f"XLA_FLAGS={environ['XLA_FLAGS']!r}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable] + args)
  return added


def warn_if_unconfigured(environ: Optional[MutableMapping[str, str]] = None,
                         version: Optional[Tuple[int, int]] = None,
                         stacklevel: int = 2) -> None:
  """Warns once, in one line, when the installed jaxlib needs `_CPU_FLAGS` and neither
  `configure_process` ran in this process nor XLA_FLAGS holds them. Changes nothing.

  The package calls it at the first use of a `cj.` name (credit_jax/__init__.py).
  """
  global _WARNED
  if _WARNED or ((_CONFIGURED or _ENTRY_POINT) and environ is None):
    return
  environ = os.environ if environ is None else environ
  missing = xla_flags_for(None, version, environ.get("XLA_FLAGS", ""))
  if missing:
    _WARNED = True
    shown = (".".join(map(str, version)) if version is not None
             else importlib.metadata.version("jaxlib"))
    warnings.warn(
        f"jaxlib {shown} can hang for good on vmapped CPU "
        f"programs: call cj.configure_process() right after `import credit_jax as cj` "
        f"(or start Python with XLA_FLAGS='{' '.join(missing)}')",
        RuntimeWarning, stacklevel=stacklevel + 1)


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
  arguments for `apply_env_overrides` and parses the rest as absl does, except that a
  parse error is one line and exit status 2 (credit_jax/runtime/cli.py).

  The arguments are also taken out of `sys.argv`, which ml_collections' config flag reads
  by itself; `configure_process` re-executes with the command line as given.
  """

  def parse(argv: List[str]) -> List[str]:
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
    rest = _sibling("cli").parse_flags(rest)   # one-line errors, exit status 2
    _note_file_env(config_flag)
    return rest
  return parse


def _sibling(name: str):
  """credit_jax/runtime/<name>.py, without importing the credit_jax package when this
  file was itself loaded by path (scripts/distributed.py, scripts/sweep.py)."""
  module = sys.modules.get(f"credit_jax.runtime.{name}")
  if module is None:
    import importlib.util  # pylint: disable=g-import-not-at-top
    spec = importlib.util.spec_from_file_location(
        f"_credit_jax_{name}", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                            f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
  return module


# The config file's own env_name and env_kwargs, recorded by the parser of
# `make_flags_parser` when the command line changes `env_name` and not `env_kwargs`.
_FILE_ENV: Dict[str, Any] = {}


def _note_file_env(config_flag: str) -> None:
  from absl import flags  # pylint: disable=g-import-not-at-top
  _FILE_ENV.clear()
  flag = flags.FLAGS[config_flag]
  overrides = getattr(flag, "override_values", None) or {}
  if "env_name" not in overrides or any(k.split(".")[0] == "env_kwargs" for k in overrides):
    return
  try:
    file_config = flag.parser.parse(flag.config_filename)   # the file, no overrides
    _FILE_ENV.update(env_name=file_config.env_name,
                     env_kwargs=dict(file_config.get("env_kwargs") or {}))
  except Exception:  # pylint: disable=broad-except  # not a recipe config: nothing to drop
    pass


def _drop_file_env_kwargs(config) -> None:
  """When `--config.env_name` named another env than the config file's, the file's
  `env_kwargs` were options of that env: drop them (command-line options still apply)."""
  if not _FILE_ENV or "env_name" not in config or "env_kwargs" not in config:
    return
  if config.env_name == _FILE_ENV["env_name"] or not dict(config.env_kwargs or {}):
    return
  dropped = ", ".join(f"{k}={v!r}" for k, v in sorted(dict(config.env_kwargs).items()))
  unlocked = getattr(config, "unlocked", None)
  if unlocked is not None:
    import ml_collections  # pylint: disable=g-import-not-at-top
    with unlocked():
      config.env_kwargs = ml_collections.ConfigDict()
  else:
    config["env_kwargs"] = {}
  _stderr(f"note: --config.env_name={config.env_name}: the config file's env_kwargs "
          f"({dropped}) are options of {_FILE_ENV['env_name']} and were dropped; set "
          f"{config.env_name}'s options with --config.env_kwargs.NAME=VALUE")


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

  When the command line set `--config.env_name` to another env than the config file's
  (and did not set `--config.env_kwargs` as a whole), the file's `env_kwargs` are dropped
  first, with a note on stderr: they were options of the file's env.

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
  _drop_file_env_kwargs(config)
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
