"""Experiment 2: the fraction of GRPO groups that carry no signal, against difficulty.

  python3 scripts/grpo_degradation.py --config=configs/grpo_degradation.py:small \
      --workdir=/tmp/grpo_degradation

Writes metrics.jsonl, degenerate_fraction.png, summary.json and summary.md into
--workdir. All logic lives in credit_jax/experiments/grpo_degradation/study.py.
"""
from credit_jax.experiments import cli, grpo_degradation

if __name__ == "__main__":
  cli.main(grpo_degradation)
