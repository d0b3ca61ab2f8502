"""The remedies on the horizon axis: relabeling, search-then-train and the horizon
curriculum against GRPO at equal env steps and equal updates, as T grows.

  python3 scripts/horizon_remedies.py --config=configs/horizon_remedies.py:small --workdir=DIR

Writes summary.json, summary.md, relabel.png, search.png and curriculum.png into
--workdir; a rerun of the same command skips finished (part, T) cells. All logic lives
in credit_jax/experiments/horizon/remedies.py.
"""
from credit_jax.experiments import cli
from credit_jax.experiments.horizon import remedies as horizon_remedies

if __name__ == "__main__":
  cli.main(horizon_remedies)
