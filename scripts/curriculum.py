"""Horizon curricula vs direct training, and the long-range failure case.

  python3 scripts/curriculum.py --config=configs/curriculum.py:small --workdir=/tmp/cur

Writes curves_a.png, curves_b1.png, curves_b2.png, metrics.jsonl, summary.json and
summary.md into --workdir. All logic lives in credit_jax/experiments/curriculum/study.py.
"""
from credit_jax.experiments import cli, curriculum

if __name__ == "__main__":
  cli.main(curriculum)
