"""The one error a config check raises, and the helpers every check uses.

Every layer that validates a config (recipes, add-ons, experiments, sweeps) raises
`ConfigError("config.<field>: ...")` naming the first field that cannot run, before
anything compiles; the entry points print it as one line and exit with status 2.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Union

__all__ = ["ConfigError", "require", "require_one_of", "require_range"]


class ConfigError(ValueError):
  """A config field holds a value the recipe cannot run with; the message names it."""


def require(ok: bool, field: str, message: str) -> None:
  """Raises `ConfigError("config.<field>: <message>")` unless `ok`."""
  if not ok:
    raise ConfigError(f"config.{field}: {message}")


def require_one_of(value: Any, field: str, choices: Sequence[Any]) -> None:
  """`require(value in choices, field, "must be one of <choices>, got <value!r>")`."""
  require(value in choices, field, f"must be one of {choices}, got {value!r}")


def require_range(block, fields: Union[str, Sequence[str]], low: float,
                  high: Optional[float] = None, *, strict: bool = False,
                  prefix: str = "") -> None:
  """`require` for each of `fields` (a name or names) of `block` (a config or one of its
  blocks, read as `block[f]`, named `prefix + f`): `>= low` ("must be >= 1, got 0"; `> low`
  when `strict`, an int `low` comparing `int(block[f])`), or with `high`, within
  [low, high] ("must lie in [0, 1], got 2")."""
  for f in (fields,) if isinstance(fields, str) else fields:
    value = block[f]
    if high is not None:
      require(low <= value <= high, prefix + f,
              f"must lie in [{low:g}, {high:g}], got {value}")
    else:
      number = int(value) if isinstance(low, int) else value
      require(number > low if strict else number >= low, prefix + f,
              f"must be {'>' if strict else '>='} {low:g}, got {value}")
