"""``amp=`` and ``channels_last=`` on an operator sweep, as a user types them: checked when the config is
composed, logged as params, and each operation measured in the dtype and memory format they give it."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from helpers import FAST, Store, artifact_text, mlflow_runs, run_dlbench

from dlbench.core.cpu_dtypes import instructions_note

TINY_CONV = """\
# @package benchmark
name: tiny_conv
op_type: Conv
common: {N: 1, C: 8, H: 8, W: 8, K: 8, kernel_shape_0: 3, kernel_shape_1: 3, pads_0: 1, pads_1: 1, pads_2: 1,
         pads_3: 1, strides_0: 1, strides_1: 1, dilations_0: 1, dilations_1: 1, group: 1}
operations:
  - {name: forward, mode: 0}
  - {name: forward_nchw_fp32, mode: 0, dtype: float32, memory_format: contiguous}
"""


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("amp=fp8",), "amp='fp8': use one of none, bf16, fp16"),
        (("amp=bf16", "dtype=bfloat16"), "amp=bf16 with dtype=bfloat16: amp lowers autocast's ops"),
        (("channels_last=nhwc",), "channels_last"),
    ],
)
def test_a_bad_precision_or_layout_key_is_refused_when_the_config_is_composed(
    overrides: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    result = run_dlbench("+benchmark=relu", *overrides, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow  # a sweep through the command line: about 25 s on the 2-core CI machine
def test_a_conv_sweep_in_bf16_and_channels_last_logs_the_keys_and_runs_each_row_so(tmp_path: Path, store: Store):
    conf = tmp_path / "conf"
    (conf / "benchmark").mkdir(parents=True)
    (conf / "benchmark" / "tiny_conv.yaml").write_text(TINY_CONV)
    result = run_dlbench(
        "+benchmark=tiny_conv", "amp=bf16", "channels_last=true", "threads=1", *FAST, "--config-dir", str(conf),
        cwd=tmp_path, store=store,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run,) = mlflow_runs(store)
    assert run.data.params["amp"] == "bf16" and run.data.params["channels_last"] == "True"
    assert "-tiny_conv-torch_conv-ampbf16-nhwc-bs8-" in f"-{run.data.tags['mlflow.runName']}"
    rows = {r["name"]: r for r in csv.DictReader(io.StringIO(artifact_text(store, run.info.run_id, "results.csv")))}
    assert (rows["forward"]["dtype"], rows["forward"]["memory_format"]) == ("bfloat16", "channels_last")
    assert (rows["forward_nchw_fp32"]["dtype"], rows["forward_nchw_fp32"]["memory_format"]) == ("float32", "contiguous")
    assert {r["status"] for r in rows.values()} <= {"ok", "unstable"}
    note = instructions_note(["bfloat16"], "cpu")  # one line where this CPU computes bf16 without instructions
    assert (note in result.stdout) if note else "this CPU has none of" not in result.stdout
