#!/usr/bin/env bash
# The GPU path of the collective benchmarks and of the data-parallel evaluation (NCCL, device=cuda), for a
# machine with at least one NVIDIA GPU: one rank per GPU (world size 1 checks the path on a single GPU).
#   bench/gpu_collectives.sh            # world size = the GPUs torch sees
#   WORLD_SIZE=1 bench/gpu_collectives.sh
# Runs go to .dlbench/bench/gpu_collectives.db. Exits non-zero at the first command that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks="${WORLD_SIZE:-$(python -c 'import torch; print(max(torch.cuda.device_count(), 1))')}"
store="sqlite:///$PWD/.dlbench/bench/gpu_collectives.db"
mkdir -p .dlbench/bench
common=(device=cuda "world_size=$ranks" "mlflow.tracking_uri=$store" mlflow.experiment=gpu_collectives quiet=true)
echo "NCCL all-reduce and all-gather, $ranks rank(s)"
python -m dlbench +benchmark=allreduce "${common[@]}" measure.max_time_s=0.5
python -m dlbench +benchmark=allgather "${common[@]}" measure.max_time_s=0.5
echo "data-parallel MLP evaluated on the GPU, $ranks rank(s)"
python -m dlbench task=evaluate +benchmark=mlp_ddp batch_size=128 steps=32 "${common[@]}"
