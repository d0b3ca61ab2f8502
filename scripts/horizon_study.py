"""The horizon study: every method on KeyChain from T = 10 upward, and where each stops.

  python3 scripts/horizon_study.py --config=configs/horizon_study.py:small --workdir=DIR

Writes results.csv, results.md, summary.json, summary.md, success_vs_steps.png and
steps_to_level.png into --workdir; a rerun of the same command skips finished cells. All
logic lives in credit_jax/experiments/horizon/.
"""
from credit_jax.experiments import cli, horizon

if __name__ == "__main__":
  cli.main(horizon)
