"""The tensors a training step actually had: per aten operator call in one batch (the last warm-up batch, which
no measured figure counts), its arguments with each tensor's dtype, shape, strides, memory format and value
statistics (fractions subnormal, NaN/Inf and zero), written to ``tensor_stats.jsonl`` for the evaluation's
outlier causes (:mod:`dlbench.analysis.causes`)."""

from __future__ import annotations

ENV_STATS = "DLBENCH_TENSOR_STATS"
STATS_FILE = "tensor_stats.jsonl"
