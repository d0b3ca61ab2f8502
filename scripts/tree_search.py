"""Exercise 5: tree search vs baselines on KeyChain-v0, and what search buys GRPO.

  python3 scripts/tree_search.py --config=configs/tree_search.py:small --workdir=/tmp/ts

Writes metrics.jsonl, search_vs_baselines.png, training_curves.png, summary.json and
summary.md into --workdir. All logic lives in credit_jax/experiments/tree_search/study.py.
"""
from credit_jax.experiments import cli, tree_search

if __name__ == "__main__":
  cli.main(tree_search)
