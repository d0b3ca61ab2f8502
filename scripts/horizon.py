"""Runs the horizon answer, parts A and B (credit_jax/experiments/horizon_answer/); see
configs/horizon.py.

  python3 scripts/horizon.py --config=configs/horizon.py:small --workdir=runs/horizon_small
"""
from credit_jax.experiments import cli, horizon_answer

if __name__ == "__main__":
  cli.main(horizon_answer)
