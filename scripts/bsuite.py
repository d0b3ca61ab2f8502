"""bsuite's umbrella_length, memory_len and discounting_chain, scored as bsuite scores them.

  python3 scripts/bsuite.py --config=configs/bsuite.py:small --workdir=/tmp/bsuite

Writes summary.json, summary.md, results.csv, results.md, scores.png,
curves_<experiment>.png and bsuite_format/<method>.csv into --workdir. All logic lives in
credit_jax/experiments/bsuite/.
"""
from credit_jax.experiments import cli, bsuite  # cli first: see credit_jax/experiments/cli.py

if __name__ == "__main__":
  cli.main(bsuite)
