"""Experiment 1: the policy-gradient estimator's variance against the horizon (KeyChain-v0).

  python3 scripts/variance_scaling.py --config=configs/variance_scaling.py:small \
      --workdir=/tmp/variance_scaling

Writes metrics.jsonl, variance_vs_horizon.png, snr_vs_horizon.png,
credit_accuracy_vs_horizon.png, summary.json and summary.md into --workdir. All logic
lives in credit_jax/experiments/variance_scaling/study.py.
"""
from credit_jax.experiments import cli, variance_scaling

if __name__ == "__main__":
  cli.main(variance_scaling)
