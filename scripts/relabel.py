"""Hindsight relabeling on and off: what it buys in sample efficiency.

  python3 scripts/relabel.py --config=configs/relabel.py --workdir=/tmp/her
  python3 scripts/relabel.py --config=configs/relabel.py:small --workdir=/tmp/her_s
  python3 scripts/relabel.py --config=configs/relabel.py --workdir=/tmp/her \
      --config.parts=b

Writes bitflip.png, grpo_<env>.png, summary.json and summary.md into --workdir. All
logic lives in credit_jax/experiments/relabel/study.py.
"""
from credit_jax.experiments import cli, relabel

if __name__ == "__main__":
  cli.main(relabel)
