#!/usr/bin/env bash
# Issue 25 on a GPU machine (modelled on shared/gpu/check.sh: torch, CUDA, cuDNN, cmake and nvcc there, no
# package index; MLflow/Hydra wheels in .whl/ from fetch-wheels.sh): builds cuda_conv (cuDNN graph API) and
# cuda_gemm (cuBLASLt), runs their verify modes in every precision (ctest), the GPU tests of the native
# kernels, the native-vs-torch comparison of every ResNet-50 convolution and BERT GEMM at batch 32 (forward
# and both backwards, fp32 IEEE / TF32 / fp16 / bf16), and the roofline with its TF32 and float16 ceilings.
# Needs the cudnn-frontend headers: a nvidia_cudnn_frontend-1.18.0 wheel (any Python tag; only its include/
# is used) in .whl/ (`pip download --no-deps nvidia-cudnn-frontend==1.18.0 -d .whl`), or CUDNN_FRONTEND_ROOT.
# Run from the project root (carry .whl); everything goes to $OUT (default /tmp/gpuout). About 8 minutes.
set -u
OUT=${OUT:-/tmp/gpuout}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_vendor.log") 2>&1
t0=$(date +%s); step() { echo; echo "=== [$(( $(date +%s) - t0 ))s] $*"; }
step env; nvidia-smi -L | head -2
python3 -c "import torch; print(torch.__version__, torch.cuda.is_available(), torch.backends.cudnn.version())"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD DLBENCH_WARM=0 MLFLOW_TRACKING_URI=sqlite:///$PWD/gpu.db
if [ -z "${CUDNN_FRONTEND_ROOT:-}" ]; then
  wheel=$(ls .whl/nvidia_cudnn_frontend-*.whl 2>/dev/null | head -1)
  if [ -n "$wheel" ]; then
    python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [z.extract(n, '/tmp/cudnn_frontend') for n in z.namelist() if n.startswith('include/')]" "$wheel"
    export CUDNN_FRONTEND_ROOT=/tmp/cudnn_frontend
  else
    echo "no cudnn-frontend wheel in .whl/ and no CUDNN_FRONTEND_ROOT: cuda_conv will be skipped"
  fi
fi
step native build
cmake -S native -B native/build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDLBENCH_ONEDNN=OFF \
  ${CUDNN_FRONTEND_ROOT:+-DCUDNN_FRONTEND_ROOT=$CUDNN_FRONTEND_ROOT} 2>&1 | grep -E "built|SKIPPED|Error" 
cmake --build native/build -j 16 2>&1 | grep -E "error|Built target" | head -20
step ctest; timeout 400 ctest --test-dir native/build --output-on-failure -j 4 2>&1 | tail -25
cp native/build/Testing/Temporary/LastTest.log "$OUT/ctest.log" 2>/dev/null
step pytest; timeout 300 python3 -m pytest -q -p no:cacheprovider --run-slow -m gpu tests/backends/test_native.py 2>&1 | tail -5
step "bench heuristics"
timeout 330 python3 bench/vendor_vs_torch.py --batch 32 --algos heuristic --output "$OUT/vendor_heuristic.csv" 2>&1 | tail -130
step "bench search (conv)"
timeout 200 python3 bench/vendor_vs_torch.py --batch 32 --ops conv --algos search --precisions fp32-tf32 fp16 \
  --output "$OUT/vendor_search.csv" 2>&1 | tail -8
step roofline
timeout 120 python3 -m dlbench +benchmark=roofline device=cuda roofline.min_time_s=0.3 2>&1 | tail -8
step "dlbench conv sweep, cuda_conv float16"
timeout 120 python3 -m dlbench +benchmark=conv device=cuda backend=cuda batch_size=32 dtype=float16 2>&1 | tail -4
cp gpu.db "$OUT/" 2>/dev/null
step done
