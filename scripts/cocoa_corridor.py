"""COCOA's corridor experiment, reproduced (docs/results/learned_credit.md).

  python3 scripts/cocoa_corridor.py --config=configs/cocoa_corridor.py[:small] --workdir=DIR

Writes summary.json, summary.md, treasure_vs_length.png and curves_L<L>.png into
--workdir; cells are saved under DIR/cells/ as they finish (a killed run resumes). All
logic lives in credit_jax/experiments/cocoa_corridor/.
"""
from credit_jax.experiments import cli, cocoa_corridor

if __name__ == "__main__":
  cli.main(cocoa_corridor)
