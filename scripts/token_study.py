"""The token-agent study: warm start, then RL, on held-out prompts, against the turns.

  python3 scripts/token_study.py --config=configs/token_study.py:small --workdir=DIR

Writes results.jsonl, summary.json, summary.md and paired_gain.png into --workdir;
a rerun of the same command skips finished cells. All logic lives in
credit_jax/experiments/token_study/study.py.
"""
from credit_jax.experiments import cli, token_study

if __name__ == "__main__":
  cli.main(token_study)
