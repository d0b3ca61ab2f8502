"""Self-critique and persistent memory on KeyChain-v0.

  python3 scripts/critique.py --config=configs/critique.py:small --workdir=/tmp/critique

Writes success_by_attempt.png, noise_break_even.png, memory.png, summary.json and
summary.md into --workdir. All logic lives in credit_jax/experiments/critique/study.py.
"""
from credit_jax.experiments import cli, critique

if __name__ == "__main__":
  cli.main(critique)
