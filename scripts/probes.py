"""Runs the probes measurement (credit_jax/experiments/probes.py); see configs/probes.py.

  python3 scripts/probes.py --config=configs/probes.py --workdir=runs/probes
"""
from credit_jax.experiments import cli, probes

if __name__ == "__main__":
  cli.main(probes)
