#!/usr/bin/env bash
# Set up dlbench in .venv in the project folder: what the README's first command and .ci/run both install, so
# the two cannot drift. Needs only python3 and python3-venv (Debian/Ubuntu: apt-get install python3 python3-venv).
#
#   bash scripts/setup.sh                          # the project with its `dev` extra (the tests' tools)
#   bash scripts/setup.sh dev,browser,server,docs  # what .ci/run installs
#
# torch goes in first, so pip does not pull a multi-GB CUDA build where a CPU one is wanted: pip's own
# PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu picks PyTorch's CPU wheels where no local index
# provides them. DLBENCH_TORCH names another torch (default torch==2.13.0).
set -euo pipefail
cd "$(dirname "$0")/.."

extras="${1:-dev}"
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "${DLBENCH_TORCH:-torch==2.13.0}"
python -m pip install -q -e ".[${extras}]"
# The torch engine of task=evaluate model=X.onnx (pyproject.toml's `inference` extra) without its torchvision:
# PyPI's torchvision is built for CUDA torch, and onnx2torch needs it only for NonMaxSuppression and RoiAlign
# (dlbench stands in for it and refuses those two ops). tests/docs/test_readme.py checks that the rest of
# onnx2torch's requirements come with the project.
python -m pip install -q --no-deps 'onnx2torch==1.5.15'
