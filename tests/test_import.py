"""Importing credit_jax changes nothing outside it: no lowering registered, no environment
variable or XLA flag set, no JAX computation run (each checked in a fresh interpreter)."""
import json
import os
import subprocess
import sys

CHILD = r"""
import importlib, json, os, pkgutil, re, sys
import jax


def import_everything():
  import credit_jax
  names = ["credit_jax"]
  for info in pkgutil.walk_packages(credit_jax.__path__, "credit_jax."):
    importlib.import_module(info.name)
    names.append(info.name)
  return names


def backend_started():
  try:
    from jax._src import xla_bridge
    return bool(xla_bridge.backends_are_initialized())
  except (ImportError, AttributeError):
    return None   # a jax without this private helper: not checked


def compiled_draw():
  # The compiled HLO of a random draw, without source locations (they name call sites).
  text = jax.jit(lambda k: jax.random.uniform(k, (8,))).lower(
      jax.random.PRNGKey(0)).compile().as_text()
  text = re.sub(r",? metadata=\{[^}]*\}", "", text)
  if "FileLocations" in text:
    text = text[text.index("\n\n", text.index("FileLocations")):]
  return text


def dependency_names():
  import ast
  root = os.path.dirname(importlib.util.find_spec("credit_jax").origin)
  names = set()
  for folder, _, files in os.walk(root):
    for f in files:
      if f.endswith(".py"):
        tree = ast.parse(open(os.path.join(folder, f)).read())
        for node in ast.walk(tree):
          if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
          elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
  return sorted(n for n in names if n.split(".")[0] != "credit_jax")


if sys.argv[1] == "side_effects":
  import importlib.util
  started_before_any = backend_started()
  for name in dependency_names():
    try:
      importlib.import_module(name)
    except ImportError:
      pass   # an optional dependency, imported by credit_jax behind try/except
  env_before = dict(os.environ)
  config_before = dict(jax.config.values) if hasattr(jax.config, "values") else None
  started_before = backend_started()
  # Every JAX operation, eager or traced, binds a primitive; count those during the
  # imports (jax's Primitive.bind is private: not counted where it is missing) and the
  # tracing / compilation events jax reports.
  binds, events = [], []
  try:
    from jax._src import core as jax_core
    original_bind = jax_core.Primitive.bind
    def counting_bind(self, *args, **params):
      binds.append(self.name)
      return original_bind(self, *args, **params)
    jax_core.Primitive.bind = counting_bind
  except (ImportError, AttributeError):
    original_bind = None
  jax.monitoring.register_event_duration_secs_listener(
      lambda name, *a, **k: events.append(name))
  names = import_everything()
  if original_bind is not None:
    jax_core.Primitive.bind = original_bind
  env_after = dict(os.environ)
  print(json.dumps({
      "modules": names, "binds": binds, "events": events,
      "env_changed": sorted(k for k in set(env_before) | set(env_after)
                            if env_before.get(k) != env_after.get(k)),
      "config_changed": None if config_before is None else sorted(
          k for k, v in jax.config.values.items() if config_before.get(k) != v),
      "backend_before_any": started_before_any, "backend_before": started_before,
      "backend_after": backend_started()}))
else:
  before = compiled_draw()
  import_everything()
  after_import = compiled_draw()
  from credit_jax import fast_paths
  fast_paths.enable()       # the comparison can fail: the fast paths change this text
  enabled = compiled_draw()
  restored = fast_paths.disable()
  disabled = compiled_draw()
  print(json.dumps({"same_after_import": after_import == before,
                    "same_when_enabled": enabled == before,
                    "restored": restored, "same_after_disable": disabled == before,
                    "loop_before": "while" in before, "loop_enabled": "while" in enabled}))
"""


def _child(mode: str):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True,
                       text=True, env=env, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_every_module_sets_nothing_and_runs_no_computation():
  # Measured after importing the third-party modules credit_jax imports, whose own
  # import-time effects are theirs (with gymnax 0.0.x a backend is started by then).
  report = _child("side_effects")
  assert "credit_jax.fast_paths" in report["modules"]
  assert "credit_jax.algos.ppo" in report["modules"]
  assert report["backend_before_any"] in (False, None)
  assert report["env_changed"] == []
  assert report["config_changed"] in (None, [])
  assert report["binds"] == [], "an import ran JAX operations"
  assert report["events"] == [], "an import traced or compiled a JAX function"
  if report["backend_before"] is False:
    assert report["backend_after"] is False, "an import started a JAX backend"


def test_importing_every_module_keeps_jax_random_lowering():
  report = _child("lowering")
  assert report["same_after_import"]
  # On CPU jax's own lowering keeps its loop in the compiled text and the fast paths'
  # does not, so the check above would see a registration...
  assert report["loop_before"] and not report["loop_enabled"]
  assert not report["same_when_enabled"]
  # ...and turning them off again restores jax's lowering (where jax's lowering table can
  # be read, as in jax 0.10; otherwise the unrolled one stays, and disable() says so).
  assert report["same_after_disable"] == report["restored"]
