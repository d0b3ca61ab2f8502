#!/usr/bin/env bash
# One prepared check for a lent GPU machine (the workplace's `device` tool): the figures
# BENCHMARKS.md needs from a GPU, in one command that fits one call.
#
# Here, once (a machine where pip can download; the wheels stay out of git, .gitignore
# has /.whl/):
#   bash scripts/gpu_check.sh --download
# Then, through the device tool, from the repository root:
#   run(command="bash scripts/gpu_check.sh", carry=[".whl"], timeout_s=560)
# Outputs land in $OUT (the tool's folder that comes back), else /tmp/gpu_check.
#
# The GPU image has jax, flax, optax, chex, orbax, absl, matplotlib, seaborn, PyYAML and
# protobuf, but not the packages below (see the device README); they are installed from
# the carried wheels without their dependencies.
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=(gymnax==1.0.1 gymnasium==1.3.0 farama-notifications==0.0.6 ml-collections==1.1.0
        tensorboardX==2.6.5 mctx==0.0.71
        # rlax, only for bench_gae's reference, and what it imports (distrax, TFP)
        rlax==0.1.9 distrax==0.1.9 dm-env==1.6 dm-tree==0.1.10
        tfp-nightly==0.26.0.dev20261027 decorator==5.2.1 gast==0.7.0)

if [ "${1:-}" = "--download" ]; then
  exec python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "${WHEELS[@]}"
fi

OUT="${OUT:-/tmp/gpu_check}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ! ls .whl/*.whl >/dev/null 2>&1; then
  echo "no wheels in .whl/: run 'bash scripts/gpu_check.sh --download' here and carry .whl"
  exit 2
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 2
export PYTHONPATH="/tmp/site:$PWD"

step() {  # step NAME SECONDS COMMAND...: runs it with a time limit, output to $OUT/NAME.txt
  local name=$1 limit=$2
  shift 2
  echo "=== $name ($(date -u +%H:%M:%S), limit ${limit}s): $*"
  timeout "$limit" "$@" 2>&1 | grep -v "^WARNING: All log messages" | tee "$OUT/$name.txt"
  echo "=== $name exit ${PIPESTATUS[0]}"
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import jax; print('jax', jax.__version__, jax.devices())"; } \
  2>&1 | tee "$OUT/device.txt"
# The GPU target: PPO CartPole, 1024 vmapped seeds, >= 1.5x PureJaxRL's H200 3.15e7.
step ppo 240 python3 benchmarks/bench_ppo.py --seeds=1,1024 --repeats=3 --out="$OUT/ppo.json"
# The train script end to end on the GPU (runner, checkpoints, metrics), 8 seeds.
step train 90 python3 scripts/train.py --config=configs/ppo_cartpole.py:small \
  --config.seeds=8 --workdir=/tmp/gpu_check_train
step gae 90 python3 benchmarks/bench_gae.py
step env 60 python3 benchmarks/bench_env.py
step search 90 python3 benchmarks/bench_search.py --batch=1024
# GRU/transformer PPO steps/s vs the MLP at T = 1000; transformer acting cost
# at step 1000 vs 10 with and without the KV cache; the GRU with bptt_chunk = 100 and a
# 32-unit GRU; where one update's time goes (rollout, minibatch gradient, scan).
step sequence 240 python3 benchmarks/bench_sequence.py --num_envs=64 --repeats=5 --bptt_chunks=100 --gru_sizes=32
echo "done $(date -u +%H:%M:%S)"
