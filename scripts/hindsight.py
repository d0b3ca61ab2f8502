"""Hindsight relabeling on and off: what it buys in sample efficiency.

  python3 scripts/hindsight.py --config=configs/hindsight.py --workdir=/tmp/her
  python3 scripts/hindsight.py --config=configs/hindsight.py:small --workdir=/tmp/her_s
  python3 scripts/hindsight.py --config=configs/hindsight.py --workdir=/tmp/her \
      --config.parts=b

Writes bitflip.png, grpo_<env>.png, summary.json and summary.md into --workdir. All
logic lives in credit_jax/experiments/hindsight/study.py.
"""
from credit_jax.experiments import cli, hindsight

if __name__ == "__main__":
  cli.main(hindsight)
