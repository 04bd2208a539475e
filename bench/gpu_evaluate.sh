#!/usr/bin/env bash
# The GPU timeline's prediction checked on a GPU (issue 24; written for an H200 machine of the kind
# ../shared/gpu/check.sh describes: torch, CUDA, cuDNN, no package index, the wheels of fetch-wheels.sh in
# .whl/). Runs `task=evaluate device=cuda` for resnet_cifar and mlp at batch sizes 64 and 512 and
# transformer_lm at 64 and 256 (bench/prediction_error.py, one MLflow store in $OUT), then prints per
# evaluation and overall the |prediction error| and the unmatched and outside-operator shares of the
# profiled step. Targets: mean |error| <= 10%, max <= 15%, unmatched and outside below 5% each. Also
# replays the recorded H200 evaluations (bench/gpu_replay.py, offline). Run from the project root; logs go
# to $OUT (default /tmp/gpuout). About 6-10 minutes on an H200.
set -u
OUT=${OUT:-/tmp/gpuout}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_evaluate.log") 2>&1
t0=$(date +%s); step() { echo; echo "=== [$(( $(date +%s) - t0 ))s] $*"; }
step env; nvidia-smi -L | head -2; python3 -c "import torch; print(torch.__version__, torch.cuda.is_available())"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export DLBENCH_WARM=0
step "gpu timing tests"; python3 -m pytest -q -p no:cacheprovider --run-slow -m gpu tests/backends/test_timing.py 2>&1 | tail -3
step replay; [ -d ../shared/data/h200/evaluations ] && python3 bench/gpu_replay.py ../shared/data/h200/evaluations | tail -1
evaluate() {  # model, batch sizes...
  local model=$1; shift
  step "evaluate $model bs $*"
  timeout 420 python3 bench/prediction_error.py --models "$model" --batch-sizes "$@" --threads 0 --steps 30 \
    --store "$OUT/gpu_evaluate.db" --experiment gpu_evaluate --out "$OUT/$model.csv" device=cuda 2>&1 | tail -12
}
evaluate mlp 64 512
evaluate transformer_lm 64 256
evaluate resnet_cifar 64 512
step summary
python3 - "$OUT" <<'PY'
import sys
from pathlib import Path

import pandas as pd

frames = [pd.read_csv(p) for p in sorted(Path(sys.argv[1]).glob("*.csv"))]
table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
if table.empty or "prediction_error_pct" not in table:
    sys.exit("no evaluation finished: see the log above")
cols = ["model", "batch_size", "step_time_predicted_ms", "step_time_measured_ms", "prediction_error_pct",
        "unmatched_operator_time_pct", "outside_operators_pct", "machine_drift_pct"]
print(table[[c for c in cols if c in table]].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
errors = table["prediction_error_pct"].dropna().abs()
print(f"gpu evaluate: mean |error| {errors.mean():.1f}%, max {errors.max():.1f}% over {len(errors)} evaluations; "
      f"unmatched max {table['unmatched_operator_time_pct'].max():.1f}%, outside operators max "
      f"{table['outside_operators_pct'].max():.1f}% (targets: mean <= 10, max <= 15, shares < 5)")
PY
