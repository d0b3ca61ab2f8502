"""Old name of configs/relabel.py (issue 45: "hindsight" now names HCA's learned credit
only, credit_jax/addons/hindsight_credit.py). The same configs, after one line on stderr
naming the new file."""
import os
import runpy
import sys

_NEW = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "relabel.py"))
dqn_config, grpo_config = _NEW["dqn_config"], _NEW["grpo_config"]


def get_config(arg=None):
  print("note: configs/hindsight.py is now configs/relabel.py", file=sys.stderr)
  return _NEW["get_config"](arg)
