#!/bin/bash
# bsuite's protocol (configs/bsuite.py:bsuite: bsuite's sweeps and episode counts, 5 seeds)
# for umbrella_length and memory_len, run in pieces on one workdir, shortest buckets first,
# each piece niced and stopped at a deadline; finished cells are saved as they finish
# (credit_jax/experiments/bsuite/study.py) and skipped on a rerun, so a killed piece
# resumes at its first unfinished cell. docs/results/bsuite.md reports what this ran.
#
#   scripts/repro/bsuite_protocol.sh WORKDIR [DEADLINE_UTC, e.g. 03:09]
set -u
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD JAX_PLATFORMS=cpu
W=${1:?workdir}
DEADLINE=${2:-}
SHORT="(1,2,3,4,5,6,7,8,9,10,12,14,17,20,25,30)"   # bsuite's lengths up to 30: buckets 1-10, 12-30
piece() {  # name, overrides...
  local name=$1; shift
  local limit=()
  if [ -n "$DEADLINE" ]; then
    local left=$(( $(date -u -d "$DEADLINE" +%s) - $(date -u +%s) ))
    [ "$left" -lt 60 ] && { echo "=== $name skipped: past $DEADLINE"; return; }
    limit=(timeout --signal=TERM "$left")
  fi
  echo "=== $name start $(date -u +%T)"
  /usr/bin/time -f "=== $name end: %e s wall, %U s user, %S s sys" "${limit[@]}" \
    nice -n 10 python3 scripts/bsuite.py --config=configs/bsuite.py:bsuite --workdir="$W" \
    "--config.memory_methods=()" "$@"
}
piece umbrella_short "--config.methods=('ppo_mlp_g0.99_l0.95','grpo_k5','dqn')" \
  "--config.experiments=('umbrella_length',)" "--config.umbrella_lengths=$SHORT"
piece memory_short "--config.methods=('ppo_mlp_g0.99_l0.95','grpo_k5','dqn')" \
  "--config.experiments=('memory_len',)" "--config.memory_lengths=$SHORT"
piece umbrella_long "--config.methods=('grpo_k5','dqn','ppo_mlp_g0.99_l0.95')" \
  "--config.experiments=('umbrella_length',)"
piece gru_short "--config.methods=('ppo_gru_g0.99_l0.95',)" \
  "--config.experiments=('memory_len',)" "--config.memory_lengths=$SHORT"
piece memory_long "--config.methods=('grpo_k5','dqn','ppo_mlp_g0.99_l0.95')" \
  "--config.experiments=('memory_len',)"
piece gru_long "--config.methods=('ppo_gru_g0.99_l0.95',)" "--config.experiments=('memory_len',)"
# The summary of every saved cell (trains nothing): summary.md, summary.json, figures.
nice -n 10 python3 scripts/bsuite.py --config=configs/bsuite.py:bsuite --workdir="$W" \
  --config.new_cells=False "--config.methods=('ppo_mlp_g0.99_l0.95','grpo_k5','dqn')" \
  "--config.memory_methods=('ppo_gru_g0.99_l0.95',)" \
  "--config.experiments=('umbrella_length','memory_len')"
