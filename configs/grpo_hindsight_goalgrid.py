"""Old name of configs/grpo_relabel_goalgrid.py (issue 45: the recipe is `grpo_relabel`).
The same config, after one line on stderr naming the new file."""
import os
import runpy
import sys


def get_config(arg=None):
  print("note: configs/grpo_hindsight_goalgrid.py is now configs/grpo_relabel_goalgrid.py",
        file=sys.stderr)
  new = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grpo_relabel_goalgrid.py")
  return runpy.run_path(new)["get_config"](arg)
