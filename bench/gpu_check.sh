#!/usr/bin/env bash
# One check of dlbench on a GPU machine, in at most 8 minutes (docs/gpu-check.md): builds native/ (the CUDA
# family: no CUDA compiler needed), runs ctest and `pytest -m gpu`, evaluates resnet_cifar, transformer_lm and mlp
# at two batch sizes each (task=evaluate device=cuda, the default configuration) and resnet_cifar once with
# amp=bf16 (autocast), sweeps the ResNet-50
# convolutions and BERT GEMMs on torch and on the native kernels in fp32 (IEEE), TF32 and bf16, runs an NCCL
# all-reduce at world size 1, and writes one summary table (bench/gpu_summary.py) to $OUT/summary.md.
#
#   OUT=/tmp/gpuout bench/gpu_check.sh         # from the project root
#
# For a GPU machine with torch, CUDA, cuDNN and cmake but no package index: the wheels of
# ../shared/gpu/fetch-wheels.sh (MLflow, Hydra, ...) in .whl/ are installed to /tmp/site first; a
# nvidia_cudnn_frontend wheel (>= 1.13) there gives cuda_conv its headers. Each step gets at most its own budget
# and what is left of the whole (GPU_CHECK_BUDGET_S, default 480), in the order of what the targets need most
# (the evaluations and the native/torch ratios before the GPU tests); a step that finds none left is recorded
# as skipped in the summary.
set -u
OUT=${OUT:-/tmp/gpuout}; mkdir -p "$OUT"
BUDGET=${GPU_CHECK_BUDGET_S:-480}
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
t0=$(date +%s)
: > "$OUT/steps.tsv"
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
# step NAME SECONDS CMD...: CMD under a timeout of at most SECONDS and what is left; its status in steps.tsv
step() {
  local name=$1 want=$2; shift 2
  local have; have=$(left)
  echo; echo "=== [$(( $(date +%s) - t0 ))s] $name"
  if [ "$have" -le 10 ]; then printf '%s\tskipped\t0\n' "$name" >> "$OUT/steps.tsv"; echo "skipped: budget spent"; return; fi
  local start; start=$(date +%s)
  timeout $(( want < have ? want : have )) bash -c '"$@"' step "$@"  # bash: a step may be a function below
  printf '%s\t%s\t%s\n' "$name" "$?" "$(( $(date +%s) - start ))" >> "$OUT/steps.tsv"
}
echo "=== env"; nvidia-smi -L | head -4
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), 'cudnn', torch.backends.cudnn.version())"
export OUT PYTHONPATH=$PWD DLBENCH_WARM=0 MLFLOW_TRACKING_URI=sqlite:///$OUT/gpu_check.db
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
  export PYTHONPATH=/tmp/site:$PWD
fi
frontend=$(ls .whl/nvidia_cudnn_frontend-*.whl 2>/dev/null | head -1)
if [ -z "${CUDNN_FRONTEND_ROOT:-}" ] && [ -n "$frontend" ]; then  # headers only: any Python tag will do
  python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [z.extract(n, '/tmp/cudnn_frontend') for n in z.namelist() if n.startswith('include/')]" "$frontend"
  export CUDNN_FRONTEND_ROOT=/tmp/cudnn_frontend
fi

native() {
  cmake -S native -B native/build -DCMAKE_BUILD_TYPE=Release -DDLBENCH_ONEDNN=OFF \
    ${CUDNN_FRONTEND_ROOT:+-DCUDNN_FRONTEND_ROOT=$CUDNN_FRONTEND_ROOT} &&
    cmake --build native/build -j "$(nproc)" 2>&1 | grep -E "error|Built target"
}
export -f native
step native 150 native > "$OUT/native.log" 2>&1; grep -E "built|SKIPPED|error" "$OUT/native.log" | head -8
step ctest 45 ctest --test-dir native/build --output-on-failure -j 4 > "$OUT/ctest.log" 2>&1; tail -3 "$OUT/ctest.log"

evaluate() {  # model, batch size[, csv, overrides...]: bench/prediction_error.py writes its row to the csv
  local model=$1 batch=$2 csv=${3:-$OUT/evaluations_$1_$2.csv}; shift $(( $# < 3 ? $# : 3 ))
  python3 bench/prediction_error.py --models "$model" --batch-sizes "$batch" --threads 0 --steps 30 --rounds 2 \
    --store "$OUT/gpu_check.db" --experiment gpu_check --out "$csv" device=cuda "$@" 2>&1 | tail -4
}
export -f evaluate
for run in "mlp 64 35" "mlp 1024 35" "transformer_lm 64 45" "transformer_lm 256 45" "resnet_cifar 64 55" \
           "resnet_cifar 512 55"; do
  set -- $run
  step "evaluate $1 bs$2" "$3" evaluate "$1" "$2"
done
# autocast as GPU training runs it: bf16 convolutions and matmuls, the rest float32 (docs/mixed-precision.md);
# its own file, apart from the float32 evaluations' table
step "evaluate resnet_cifar bs64 amp=bf16" 55 evaluate resnet_cifar 64 "$OUT/amp_evaluations_resnet_cifar_64.csv" amp=bf16
python3 - "$OUT" <<'PY'
import sys
from pathlib import Path

import pandas as pd

parts = [pd.read_csv(p) for p in sorted(Path(sys.argv[1]).glob("evaluations_*.csv"))]
if parts:
    pd.concat(parts, ignore_index=True).to_csv(Path(sys.argv[1]) / "evaluations.csv", index=False)
PY
step "conv and gemm: native vs torch" 90 python3 bench/vendor_vs_torch.py --batch 32 --algos heuristic \
  --precisions fp32-ieee fp32-tf32 bf16 --min-time 0.02 --output "$OUT/vendor.csv" > "$OUT/vendor.log" 2>&1
grep -E "ratio median" "$OUT/vendor.log"

allreduce() {  # the collectives executable at world size 1 (NCCL), 4 KiB to 256 MiB
  python3 - "$OUT/allreduce.csv" <<'PY'
import sys
from pathlib import Path

from dlbench.operators.protocol import write_input

write_input(Path(sys.argv[1]), [(i, [4096 * 4**i, 1]) for i in range(9)])
PY
  DLBENCH_DEVICE=cuda DLBENCH_MIN_TIME_S=0.05 python3 -m dlbench.backends.collectives AllReduce "$OUT/allreduce.csv"
}
export -f allreduce
step "NCCL all-reduce, 1 rank" 20 allreduce; cat "$OUT/allreduce_out.csv" 2>/dev/null | tail -2
step "pytest -m gpu" 90 python3 -m pytest -q -p no:cacheprovider --run-slow -m gpu > "$OUT/pytest_gpu.log" 2>&1
tail -3 "$OUT/pytest_gpu.log"

echo; echo "=== [$(( $(date +%s) - t0 ))s] summary"
python3 bench/gpu_summary.py "$OUT"
