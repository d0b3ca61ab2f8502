"""The package's layers: every module imports only from its own layer or those below it,
and no modules import each other in a circle (docs/ARCHITECTURE.md draws the layers)."""
import ast
import collections
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
# The top-level modules of credit_jax/ (everything else is a layer folder).
CORE = {"types", "config", "recurrence", "returns", "baselines", "relabel", "replay",
        "episodes", "rollout", "diagnostics", "stats", "fast_paths",
        "threefry_cpu", "exact"}
# Lowest first: a module may import from its own layer and those before it.
ORDER = ("envs", "core", "nets", "search", "addons", "algos", "runtime", "experiments",
         "sweep")


def _modules():
  mods = {}
  for dirpath, _, files in os.walk(os.path.join(ROOT, "credit_jax")):
    for f in files:
      if f.endswith(".py"):
        path = os.path.join(dirpath, f)
        rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
        mods[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = path
  return mods


def _imports(mods):
  edges = collections.defaultdict(set)
  for mod, path in mods.items():
    with open(path) as f:
      tree = ast.parse(f.read())
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        if node.module.startswith("credit_jax"):
          for alias in node.names:
            full = f"{node.module}.{alias.name}"
            edges[mod].add(full if full in mods else node.module)
      elif isinstance(node, ast.Import):
        edges[mod] |= {a.name for a in node.names if a.name.startswith("credit_jax")}
    edges[mod].discard(mod)
  return edges


def _layer(mod):
  parts = mod.split(".")
  if len(parts) == 1:
    return None                      # the package root, which re-exports every layer
  return "core" if parts[1] in CORE else parts[1]


def test_every_module_belongs_to_a_layer():
  unknown = {m for m in _modules() if _layer(m) not in ORDER + (None,)}
  assert not unknown, f"modules outside the layers {ORDER}: {sorted(unknown)}"


def test_no_import_climbs_to_a_higher_layer():
  mods = _modules()
  up = []
  for mod, targets in _imports(mods).items():
    if _layer(mod) is None:
      continue
    for t in targets:
      if _layer(t) is None:
        up.append(f"{mod} imports the package root (import the module itself)")
      elif ORDER.index(_layer(t)) > ORDER.index(_layer(mod)):
        up.append(f"{mod} ({_layer(mod)}) imports {t} ({_layer(t)})")
  assert not up, "\n".join(sorted(up))


def test_no_import_cycles():
  mods = _modules()
  # A package's __init__ importing its own submodules is how it re-exports them.
  graph = {m: {t for t in ts if t in mods and not t.startswith(m + ".")}
           for m, ts in _imports(mods).items()}
  state, cycles = {}, []

  def visit(u, path):
    state[u] = "open"
    for v in sorted(graph.get(u, ())):
      if state.get(v) == "open":
        cycles.append(" -> ".join(path[path.index(v):] + [v]))
      elif v not in state:
        visit(v, path + [v])
    state[u] = "done"

  for m in sorted(graph):
    if m not in state:
      visit(m, [m])
  assert not cycles, "import cycles:\n" + "\n".join(cycles)
