#!/bin/bash
# Tunes the tabular corridor study's rates (configs/cocoa_corridor.py:tabular_tune):
# L = 23, 4 seeds from base seed 1000 (the reported runs use seeds from base 0), 3,000
# updates; every method at each policy rate in RATES, one workdir per rate. The rate
# with the highest mean run-averaged treasure per method is the reported runs' rate
# (docs/results/learned_credit.md). Cells resume. Usage:
#   scripts/repro/cocoa_tabular_tune.sh WORKDIR
set -eu
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD JAX_PLATFORMS=cpu
W=${1:?workdir}
for lr in 0.01 0.03 0.1; do
  echo "=== policy lr $lr start $(date -u +%T)"
  nice -n 10 python3 scripts/cocoa_corridor.py --config=configs/cocoa_corridor.py:tabular_tune \
    --workdir="$W/lr$lr" "--config.methods=('reinforce','advantage','cocoa','hca_return')" \
    --config.lrs.reinforce=$lr --config.lrs.advantage=$lr --config.lrs.cocoa=$lr \
    --config.lrs.hca_return=$lr
done
echo "=== done $(date -u +%T)"
