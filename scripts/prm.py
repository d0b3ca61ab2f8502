"""Process reward models: dense PRM shaping, gaming, and mitigations (exercise 4).

  python3 scripts/prm.py --config=configs/prm.py --workdir=/tmp/prm

Writes prm_training.png, prm_labels.png, prm_compounding.png, prm_rerank.png, prm_ppo.png,
summary.json and summary.md into --workdir. All logic lives in credit_jax/experiments/prm/study.py.
"""
from credit_jax.experiments import cli, prm

if __name__ == "__main__":
  cli.main(prm)
