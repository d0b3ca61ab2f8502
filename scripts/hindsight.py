"""Old name of scripts/relabel.py (issue 45): runs it, after one line on stderr naming
the new script."""
import os
import runpy
import sys

if __name__ == "__main__":
  print("note: scripts/hindsight.py is now scripts/relabel.py", file=sys.stderr)
  runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "relabel.py"),
                 run_name="__main__")
