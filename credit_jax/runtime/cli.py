"""How every entry point fails: one line on stderr and a documented exit status.

scripts/train.py, scripts/evaluate.py, scripts/sweep.py and every experiment script
(credit_jax/experiments/cli.py) parse their flags with `parse_flags` and run their body
under `guard`, so a failure prints one line, `error: <what> ...; <what to do>`, and exits
with one of these statuses:

  0      done
  1      an unexpected error inside the library (a bug): one line naming it
  2      the command line, config or workdir cannot run: an unknown flag or config field
         (with a did-you-mean), a config override before --config, a bad variant, a
         missing config file, a field value a recipe refuses, a workdir that is a file
         or not writable, in use by another run, or holding another config's run
  3      the run cannot go on: a non-finite loss, or no checkpoint restores
  4      the watchdog found the run hung (credit_jax/runtime/watchdog.py)
  5      a write failed while saving a checkpoint or metrics (disk full, I/O error):
         what was saved before is intact; free space and rerun the same command
  128+N  stopped by signal N (SIGINT 130, SIGTERM 143) after saving a checkpoint

`--debug` on the command line (or `CREDIT_JAX_DEBUG=1` in the environment) turns the
guard off: the error is raised with its traceback, and the log lines of the libraries
underneath (orbax's, jax's) are printed as they come.

Errors are matched to statuses by class name along the exception's MRO
(`_EXIT_CODES`), so that this module imports nothing of credit_jax: scripts/sweep.py
loads it by path before JAX may start.
"""
from __future__ import annotations

import errno
import logging
import os
import re
import shlex
import sys
from typing import Callable, Dict, NoReturn, Optional, Sequence

DEBUG_ENV = "CREDIT_JAX_DEBUG"
EXIT_BUG, EXIT_USAGE, EXIT_RUN, EXIT_HANG, EXIT_WRITE = 1, 2, 3, 4, 5

# Exception class name -> exit status; the first name found along the MRO wins.
_EXIT_CODES: Dict[str, int] = {
    "UsageError": EXIT_USAGE,            # absl.app
    "ConfigError": EXIT_USAGE,           # credit_jax.config
    "WorkdirError": EXIT_USAGE,          # credit_jax.runtime.workdir
    "WorkdirBusyError": EXIT_USAGE,
    "NonFiniteLossError": EXIT_RUN,      # credit_jax.runtime.run
    "CheckpointError": EXIT_RUN,         # credit_jax.runtime.checkpoint
    "CheckpointSaveError": EXIT_WRITE,
    "OutputError": EXIT_WRITE,           # credit_jax.runtime.evaluate (--output=PATH)
}
# errnos of a write that failed for want of room or a writable device.
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG)


def debug_enabled(argv: Optional[Sequence[str]] = None) -> bool:
  """True when the command line has `--debug` (not `--nodebug`) or the environment sets
  `CREDIT_JAX_DEBUG` to 1/true/yes."""
  if os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes"):
    return True
  found = False
  for arg in sys.argv if argv is None else argv:
    if arg in ("--debug", "-debug", "--debug=true", "--debug=True", "--debug=1"):
      found = True
    elif arg in ("--nodebug", "--debug=false", "--debug=False", "--debug=0"):
      found = False
  return found


def _define_debug_flag(flags_module) -> None:
  """Defines `--debug` on absl's flags (once), so absl accepts it."""
  if "debug" not in flags_module.FLAGS:
    flags_module.DEFINE_bool(
        "debug", False, f"Show the library's traceback and its libraries' log lines "
        f"instead of one error line (also: {DEBUG_ENV}=1).")


def fail(message: str, code: int) -> NoReturn:
  """Prints `error: <message>` (one line) to stderr and exits with `code`."""
  sys.stdout.flush()
  print(f"error: {_one_line(message)}", file=sys.stderr, flush=True)
  if code == EXIT_WRITE:
    # A failed save leaves orbax's writer threads mid-flight; Python's shutdown would
    # print their complaints. Everything this process had to keep is on disk already.
    os._exit(code)  # pylint: disable=protected-access
  sys.exit(code)


def _one_line(text: str) -> str:
  return " ".join(str(text).split())


def _chain(error: BaseException):
  """`error` and the exceptions it was raised from or during."""
  seen = []
  while error is not None and error not in seen:
    seen.append(error)
    error = error.__cause__ or error.__context__
  return seen


def is_write_failure(error: BaseException) -> bool:
  """True when `error` (or one it came from) is a failed write: an OSError with an errno
  of `_WRITE_ERRNOS`, or an orbax/tensorstore error that reports one (they raise
  ValueError with the OS error in the text)."""
  for e in _chain(error):
    if isinstance(e, OSError) and e.errno in _WRITE_ERRNOS:
      return True
    match = re.search(r"os_error_code='?(\d+)", str(e))
    if match and int(match.group(1)) in _WRITE_ERRNOS:
      return True
    if "No space left on device" in str(e) or "Disk quota exceeded" in str(e):
      return True
  return False


def exit_code_of(error: BaseException) -> int:
  """The exit status for `error` (see the module docstring)."""
  for cls in type(error).__mro__:
    if cls.__name__ in _EXIT_CODES:
      return _EXIT_CODES[cls.__name__]
  if is_write_failure(error):
    return EXIT_WRITE
  return EXIT_BUG


def message_of(error: BaseException) -> str:
  """The one line printed for `error`."""
  code = exit_code_of(error)
  text = _one_line(error)
  if code == EXIT_BUG:
    return (f"unexpected {type(error).__name__}: {text} (a bug in credit_jax or a "
            f"library it uses; rerun with --debug for the traceback)")
  if code == EXIT_WRITE and type(error).__name__ not in ("CheckpointSaveError",
                                                          "OutputError"):
    return (f"a write failed ({text[:300]}); what was saved before is intact: free space "
            f"and rerun the same command to resume")
  return text


def guard(body: Callable[[], object], passthrough: tuple = ()) -> object:
  """Runs `body()`; an exception becomes one line and its exit status (see the module
  docstring), unless `debug_enabled()`. SystemExit, KeyboardInterrupt and the classes in
  `passthrough` (the caller's own handling) pass."""
  if debug_enabled():
    return body()
  try:
    return body()
  except (SystemExit, KeyboardInterrupt) + tuple(passthrough):
    raise
  except Exception as e:  # pylint: disable=broad-except
    fail(message_of(e), exit_code_of(e))


def config_value(holder, name: str = "config"):
  """`holder.value` (a config flag's), its fields readable: a config file that failed to
  load is one line and exit status 2 (ml_collections raises only when a field is read)."""
  config = holder.value
  try:
    config.get("seeds", None) if hasattr(type(config), "get") else config.keys()
  except OSError as e:
    cause = e.__cause__ or e
    fail(flag_error_line(OSError(f"flag --{name}: config file: {cause}"), sys.argv),
         EXIT_USAGE)
  line = comma_string_tuple_error(config, sys.argv, name)
  if line:
    fail(line, EXIT_USAGE)
  return config


def comma_string_tuple_error(config, argv: Sequence[str], name: str = "config"):
  """The one-line error for `--config.F=a,b` on a tuple-of-strings field F, or None.

  ml_collections reads `a,b` there as the one string 'a,b' (ints and floats split on
  commas, strings do not), which the experiment would then reject as an unknown name or,
  worse, accept; the line shows the syntax that gives a tuple."""
  for arg in argv[1:]:
    m = re.match(rf"^--?{re.escape(name)}\.([\w.]+)=(.*)$", arg)
    if not m or "," not in m.group(2):
      continue
    value = config
    try:
      for part in m.group(1).split("."):
        value = value[part]
    except (KeyError, AttributeError, TypeError):
      continue
    if (isinstance(value, (tuple, list)) and len(value) == 1
        and isinstance(value[0], str) and "," in value[0]):
      items = ",".join(repr(v.strip()) for v in value[0].split(","))
      return (f"error: {name}.{m.group(1)}: {m.group(2)!r} was read as one string; a "
              f"tuple of strings is written --{name}.{m.group(1)}=\"({items})\"")
  return None


# --- flag parsing ----------------------------------------------------------------------

def _reordered(argv: Sequence[str], config_flag: str) -> str:
  """The command line with `--<config_flag>=...` moved before its overrides."""
  args = list(argv[1:])
  spec = [a for a in args if re.match(rf"^--?{config_flag}(=|$)", a)]
  rest = [a for a in args if a not in spec]
  return " ".join(shlex.quote(a) for a in ["python3", argv[0]] + spec + rest)


# Fields a user looks for in a recipe that spells the idea another way.
_FIELD_HINTS = {
    "horizon": ("; PPO has none: its rollout length is config.num_steps, the steps each "
                "environment takes per update, in windows that run on across episode "
                "boundaries (an episode that ends resets and continues in the same "
                "window), not one episode each; an episode's own length is the env's "
                "(--config.env_kwargs.horizon=N on KeyChain)"),
}


def flag_error_line(error: BaseException, argv: Sequence[str]) -> str:
  """One line for an error absl or ml_collections raised while parsing `argv`."""
  # ml_collections raises KeyError-in-AttributeError, whose text is a repr: unescape it.
  text = str(error).replace("\\n", " ").replace("\\'", "'")
  order = re.search(r"Found (\S+) in argv before a value for --(\w+) was specified", text)
  if order:
    arg, name = order.group(1), order.group(2)
    return (f"{arg} comes before --{name}=...: overrides of a config file are read "
            f"after it, so put --{name} first: {_reordered(argv, name)}")
  typo = re.search(r"'(\w+)'\s*Did you mean \"(\w+)\" instead of \"\w+\"\?", text)
  if typo or isinstance(error, (KeyError, AttributeError)):
    key = typo.group(1) if typo else text.strip("'\" ")
    arg = next((a for a in argv if re.search(rf"\.{re.escape(key)}(=|$)", a)), key)
    hint = f"; did you mean {typo.group(2)!r}?" if typo else _FIELD_HINTS.get(key, "")
    return f"{arg}: the config has no field {key!r}{hint}"
  flag = re.match(r"flag (--\S+?): ", text)
  where = flag.group(1) if flag else ""
  missing = re.search(r"No such file or directory: '([^']+)'", text)
  if missing and "config file" in text.lower():
    return (f"{where or 'config file'}: no config file {missing.group(1)!r} (relative "
            f"paths start from {os.getcwd()})")
  if "Error whilst parsing config file" in text:
    # The config file's get_config raised: its traceback ends with the error's line.
    last = [line.strip() for line in text.splitlines() if line.strip()][-1]
    last = re.sub(r"^\w+(Error|Exception): ", "", last)
    return f"{where}: {last}"
  return _one_line(text)


def parse_flags(argv: Sequence[str]) -> list:
  """`absl.app`'s flag parsing (a `flags_parser` for `app.run`), with every parse error
  one line and exit status 2 (see `flag_error_line`), unless `debug_enabled`."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  _define_debug_flag(flags)
  if debug_enabled(argv):
    from absl import app  # pylint: disable=g-import-not-at-top
    return app.parse_flags_with_usage(list(argv))
  try:
    return flags.FLAGS(list(argv))
  except (SystemExit, KeyboardInterrupt):
    raise
  except Exception as e:  # pylint: disable=broad-except
    fail(flag_error_line(e, argv), EXIT_USAGE)


# --- library log lines -----------------------------------------------------------------

class _DropLibraryRecords(logging.Filter):
  """Drops log records of the libraries below credit_jax (orbax's errors after a failed
  save repeat, in ~250 lines, what the error line says)."""

  def __init__(self, packages: Sequence[str]):
    super().__init__()
    self.parts = tuple(f"{os.sep}{p}{os.sep}" for p in packages)

  def filter(self, record: logging.LogRecord) -> bool:
    return not any(p in (record.pathname or "") for p in self.parts)


def quiet_library_logs(packages: Sequence[str] = ("orbax",)) -> None:
  """For entry points: absl's log level WARNING unless `--verbosity` was given (jax logs
  at INFO, e.g. "Unable to initialize backend 'tpu'", when its backend starts after absl
  took over logging), and the log records of `packages` dropped, unless `debug_enabled`."""
  from absl import flags, logging as absl_logging  # pylint: disable=g-import-not-at-top
  if "verbosity" not in flags.FLAGS or not flags.FLAGS["verbosity"].present:
    absl_logging.set_verbosity(absl_logging.WARNING)
  if debug_enabled():
    return
  filt = _DropLibraryRecords(packages)
  for logger in (logging.getLogger(), logging.getLogger("absl")):
    logger.addFilter(filt)
    for handler in logger.handlers:
      handler.addFilter(filt)
