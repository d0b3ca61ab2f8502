"""The token-agent study: RL arms against an equal-token SFT arm, from one warm start.

  python3 scripts/token_study.py --config=configs/token_study.py:small --workdir=DIR

Writes results.jsonl, summary.json, summary.md and paired_gain.png into --workdir;
a rerun of the same command skips finished arms. All logic lives in
credit_jax/experiments/token_study/ (study.py, summary.py).
"""
from credit_jax.experiments import cli, token_study

if __name__ == "__main__":
  cli.main(token_study)
