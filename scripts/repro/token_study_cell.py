"""One cell of the token study from Python, as docs/results/token_agent.md ran it.

  python3 scripts/repro/token_study_cell.py WORKDIR key=value ...

Builds `token_study.default_config()` (configs/token_study.py's default), sets each
dotted `key` to the Python literal `value`, and calls `token_study.run(config, WORKDIR)`
with progress on stdout. Unlike scripts/token_study.py it leaves `credit_jax.fast_paths`
off (the library's default), which is what the page's 2026-12-06 cells ran with; the
script turns them on on a CPU, so fixed-seed numbers need not match between the two.
A finished cell in WORKDIR is reused, as with the script.
"""
import ast
import sys

import credit_jax as cj
from credit_jax.experiments import token_study


def main(argv):
  if len(argv) < 2 or any("=" not in kv for kv in argv[2:]):
    sys.exit(f"usage: {argv[0]} WORKDIR key=value ...")
  cj.configure_process()
  config = token_study.default_config()
  for kv in argv[2:]:
    key, value = kv.split("=", 1)
    *path, last = key.split(".")
    node = config
    for part in path:
      node = node[part]
    if last not in node:
      sys.exit(f"error: config has no field {key!r}")
    node[last] = ast.literal_eval(value)
  print(config.turns, config.arms, config.compare, config.recipe.num_updates, config.seeds,
        flush=True)
  token_study.run(config, argv[1], log=lambda s: print(s, flush=True))


if __name__ == "__main__":
  main(sys.argv)
