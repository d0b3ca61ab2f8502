"""Library size as issue 45 counts it: lines and module-level public names of credit_jax/
outside credit_jax/experiments/ (what a fork imports).

A public name is a top-level `def` / `class` or assignment target of a module that does not
start with '_'; imports and `__all__` are not names. Usage, from the repository root:

  python3 scripts/repro/library_size.py            # totals
  python3 scripts/repro/library_size.py --files    # per file, largest first
"""
import ast
import os
import sys


def public_names(tree: ast.Module) -> int:
  count = 0
  for node in tree.body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      targets = [node.name]
    elif isinstance(node, ast.Assign):
      targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
      targets = [node.target.id]
    else:
      targets = []
    count += sum(1 for t in targets if not t.startswith("_") and t != "__all__")
  return count


def library_files(root: str):
  package = os.path.join(root, "credit_jax")
  for folder, subfolders, files in os.walk(package):
    if os.path.relpath(folder, package).split(os.sep)[0] == "experiments":
      subfolders[:] = []
      continue
    for name in sorted(files):
      if name.endswith(".py"):
        yield os.path.join(folder, name)


def main(argv) -> None:
  root = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir)
  rows = []
  for path in library_files(root):
    with open(path, encoding="utf-8") as f:
      source = f.read()
    rows.append((source.count("\n"), public_names(ast.parse(source)),
                 os.path.relpath(path, root)))
  if "--files" in argv:
    for lines, names, path in sorted(rows, reverse=True):
      print(f"{lines:6d} {names:4d}  {path}")
  print(f"library lines {sum(r[0] for r in rows)}, public names {sum(r[1] for r in rows)}, "
        f"files {len(rows)} (credit_jax/ outside experiments/)")


if __name__ == "__main__":
  main(sys.argv[1:])
