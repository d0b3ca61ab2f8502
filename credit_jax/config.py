"""The one error a config check raises, and the helper every check uses.

Every layer that validates a config (recipes, add-ons, experiments, sweeps) raises
`ConfigError("config.<field>: ...")` naming the first field that cannot run, before
anything compiles; the entry points print it as one line and exit with status 2.
"""
from __future__ import annotations

__all__ = ["ConfigError", "require"]


class ConfigError(ValueError):
  """A config field holds a value the recipe cannot run with; the message names it."""


def require(ok: bool, field: str, message: str) -> None:
  """Raises `ConfigError("config.<field>: <message>")` unless `ok`."""
  if not ok:
    raise ConfigError(f"config.{field}: {message}")
