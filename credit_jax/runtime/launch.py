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

What it sets, and why: XLA CPU thread settings (`_CPU_FLAGS`), an optional tuning, not a
guard. jaxlib 0.10's batched CPU QR kernel (flax's orthogonal initialiser, vmapped over
seeds) can wedge the process for good; the library never reaches it, on any setting:
every network's orthogonal initialiser maps the unbatched QR over a vmapped batch
(credit_jax/nets/initializers.py), so `import credit_jax` followed by any documented call
needs no setup (BUILD.md "No hang from Python"). The flags, which also avoided the wedge
before that change, stay the setting entry points run multi-seed programs with on jaxlib
0.10 (measured cost-neutral on 2 cores, BUILD.md "Hang soak"). XLA reads `XLA_FLAGS`
once, when JAX creates its first backend; `import credit_jax` starts none, so a call
right after it applies in the process itself. A call after a backend has started changes
nothing and says nothing (the settings are optional: no re-execution, no warning).
`xla_flags_for` returns nothing for jaxlib versions not known to accept the flags (XLA
aborts the whole process on a flag it does not know). scripts/distributed.py loads this
file by path and sets the flags before `jax.distributed` starts.

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

# (flag name, value) pairs applied on CPU, per jaxlib (major, minor): to any program when
# `num_seeds` is None, to multi-seed programs when an entry point gives it.
# A flag already named in XLA_FLAGS (either way) is left as the user set it.
# jaxlib 0.10 (BUILD.md "No hang from Python"): its CPU LAPACK QR kernel splits a vmapped
# batch over XLA's intra-op thread pool and waits for the pieces from inside that pool;
# with the concurrency-optimised thunk scheduler two such kernels can occupy every pool
# thread of a 2-core machine, each waiting for work queued behind the other. PPO with a
# GRU and flax's initialiser, 2 vmapped seeds, no flags: 5 of 5 runs hung; with the
# scheduler off 5 of 5 finished. The library's own initialiser no longer batches the QR
# (credit_jax/nets/initializers.py); these flags remain a second line for a user's own
# vmapped LAPACK call, and the setting multi-seed entry points were measured with.
_CPU_FLAGS = {
    (0, 10): (("xla_cpu_enable_concurrency_optimized_scheduler", "false"),
              ("xla_cpu_multi_thread_eigen", "false")),
}


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
                      version: Optional[Tuple[int, int]] = None) -> List[str]:
  """Adds the XLA CPU settings for `num_seeds` vmapped seeds to XLA_FLAGS, where they can
  still apply; returns the flags added.

  Optional (module doc): nothing the library does needs it. Call it before any JAX
  computation (`cj.configure_process()` right after `import credit_jax as cj`; entry
  points pass `num_seeds`, None means any program). When a JAX backend has already
  started, XLA has read its flags: the call changes nothing and returns [].
  `environ` (default `os.environ`) other than the process's own is always updated.
  """
  environ = os.environ if environ is None else environ
  existing = environ.get("XLA_FLAGS", "")
  added = xla_flags_for(num_seeds, version, existing)
  if not added or (environ is os.environ and _backend_started()):
    return []
  environ["XLA_FLAGS"] = " ".join([existing] + added).strip()
  return added


def hang_advice(version: Optional[Tuple[int, int]] = None,
                environ: Optional[MutableMapping[str, str]] = None) -> str:
  """What to do after a hang, for the watchdog's message."""
  environ = os.environ if environ is None else environ
  version = jaxlib_version() if version is None else version
  current = environ.get("XLA_FLAGS", "")
  known = [f"--{name}={value}" for name, value in _CPU_FLAGS.get(version, ())]
  missing = [f for f in known if f.split("=")[0][2:] not in current]
  where = f"jaxlib {'.'.join(map(str, version)) if version else '(unknown)'}"
  if missing:
    return (f"On {where} a vmapped QR (flax's nn.initializers.orthogonal in your own "
            f"model, jnp.linalg.qr) can wedge the CPU runtime: use "
            f"credit_jax.nets.orthogonal(scale) as its kernel_init (the same values), or "
            f"start Python with XLA_FLAGS='{' '.join([current] + missing).strip()}'.")
  if known:
    return (f"XLA_FLAGS already holds credit_jax.runtime.launch's setting for {where} "
            f"({' '.join(known)}); try fewer seeds, and report the stacks above.")
  return (f"credit_jax.runtime.launch knows no XLA setting against hangs on {where} "
          f"(XLA_FLAGS={current!r}); try fewer seeds, and report the stacks above.")


# --- environment options from the command line --------------------------------------------

# `--config.env_kwargs.NAME=VALUE` (or `... VALUE`) arguments taken out of argv by the
# parser `make_flags_parser` returns, for `apply_env_overrides`.
_ENV_OVERRIDES: Dict[str, str] = {}


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
  by itself.
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
  from credit_jax import envs  # pylint: disable=g-import-not-at-top
  try:
    envs.resolve(config.env_name)
  except ValueError:   # a misspelt id: its own error comes next, with no note before it
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
  for kind, what in ((int, "an integer"), (float, "a number")):
    if isinstance(default, kind):
      try:
        return kind(raw)
      except ValueError:
        raise ValueError(f"expected {what}") from None
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
