"""The torch kernels run each row in its dtype and memory format: a channels_last row's tensors and results
have NHWC strides (and the values of the NCHW computation), a bfloat16 row computes in bfloat16, and a row
carries both as numbers after its parameters."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dlbench.backends.torch.kernels import KERNELS
from dlbench.backends.torch.layouts import cannot_run, row_parameters
from dlbench.backends.torch.params import UnsupportedRow, laid_out_as
from dlbench.backends.torch.run import _rotation
from dlbench.core.descriptors import DESCRIPTORS
from dlbench.core.settings import row_code

CPU, NHWC = torch.device("cpu"), torch.channels_last
CONV = {"N": 2, "C": 8, "H": 6, "W": 6, "K": 4, "kernel_shape_0": 3, "kernel_shape_1": 3, "pads_0": 1,
        "pads_1": 1, "pads_2": 1, "pads_3": 1, "strides_0": 1, "strides_1": 1, "dilations_0": 1,
        "dilations_1": 1, "group": 1}  # fmt: skip
IMAGE = {"N": 2, "C": 8, "H": 6, "W": 6}
POOL = {**IMAGE, "kernel_shape_0": 2, "kernel_shape_1": 2, "strides_0": 2, "strides_1": 2}


def first(result: object) -> torch.Tensor:
    return result if isinstance(result, torch.Tensor) else next(t for t in result if t is not None)  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_a_channels_last_conv_row_runs_on_nhwc_tensors_and_computes_what_nchw_does(mode: int) -> None:
    with laid_out_as("channels_last"):
        timed = KERNELS["Conv"]({**CONV, "mode": mode}, CPU, torch.float32)
    x, weight = timed.inputs
    assert x.is_contiguous(memory_format=NHWC) and not x.is_contiguous()
    assert weight.is_contiguous(memory_format=NHWC)
    got = first(timed())
    assert got.is_contiguous(memory_format=NHWC)
    dense = [t.contiguous() for t in (x, weight)]
    if mode == 0:
        expected = F.conv2d(*dense, None, 1, 1)
    else:
        leaves = [t.clone().requires_grad_() for t in dense]
        F.conv2d(*leaves, None, 1, 1).backward(timed.grad_outputs[0].contiguous())
        expected = leaves[mode - 1].grad
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize(
    ("op_type", "params"),
    [
        ("BatchNormalization", {**IMAGE, "mode": 0}),
        ("BatchNormalization", {**IMAGE, "mode": 1}),
        ("MaxPool", {**POOL, "mode": 0}),
        ("MaxPool", {**POOL, "mode": 1}),
        ("AveragePool", {**POOL, "mode": 1}),
        ("Relu", {**IMAGE, "mode": 1}),
        ("Mul", {**IMAGE, "N_b": 2, "C_b": 8, "H_b": 6, "W_b": 6, "mode": 1}),
        ("Sigmoid", {**IMAGE, "mode": 1}),
    ],
)
def test_normalisation_pooling_and_elementwise_rows_keep_nhwc_forward_and_backward(op_type: str, params: dict) -> None:
    with laid_out_as("channels_last"):
        timed = KERNELS[op_type](params, CPU, torch.float32)
    assert first(timed()).is_contiguous(memory_format=NHWC), op_type


def test_a_contiguous_row_stays_nchw() -> None:
    timed = KERNELS["Conv"]({**CONV, "mode": 0}, CPU, torch.float32)
    assert timed.inputs[0].is_contiguous() and first(timed()).is_contiguous()


@pytest.mark.parametrize(
    ("op_type", "params"),
    [
        ("Conv", {**CONV, "mode": 1}),
        ("Gemm", {"M": 8, "K": 16, "N": 4}),
        ("MatMul", {"M": 8, "K": 16, "N": 4, "batch": 3}),
        ("BatchNormalization", {**IMAGE, "mode": 1}),
        ("Softmax", {**IMAGE, "axis": -1, "mode": 1}),
        ("LayerNormalization", {**IMAGE, "axis": -1, "mode": 1}),
        ("Add", {**IMAGE, "N_b": 1, "C_b": 8, "H_b": 1, "W_b": 1}),
    ],
)
def test_a_bfloat16_row_computes_in_bfloat16(op_type: str, params: dict) -> None:
    assert first(KERNELS[op_type](params, CPU, torch.bfloat16)()).dtype == torch.bfloat16


def row(values: list[float]) -> tuple:
    return row_parameters("Conv", DESCRIPTORS["Conv"], values, torch.float32, "contiguous")


def test_a_row_carries_its_dtype_and_memory_format_after_its_parameters() -> None:
    values = [float(CONV.get(d, 0)) for d in DESCRIPTORS["Conv"]]
    codes = [row_code("dtype", "bfloat16"), row_code("memory_format", "channels_last")]
    params, dtype, layout = row([*values, *codes])
    assert (dtype, layout) == (torch.bfloat16, "channels_last") and params["K"] == 4
    assert row(values)[1:] == (torch.float32, "contiguous")  # the invocation's
    with pytest.raises(UnsupportedRow, match=r"dtype 7 \(int64\) is none of float32"):
        row([*values, 7, 0])
    with pytest.raises(UnsupportedRow, match="then optionally dtype, memory_format"):
        row([*values, 1])


def test_an_operator_torch_lacks_for_a_dtype_is_named_unable_in_that_dtype() -> None:
    with pytest.raises(RuntimeError) as caught:
        torch.linalg.cholesky(torch.eye(2, dtype=torch.bfloat16))
    assert cannot_run("Conv", caught.value, torch.bfloat16, "contiguous").startswith("unable: bfloat16 (Conv: ")
    other = cannot_run("Conv", RuntimeError("out of memory"), torch.bfloat16, "channels_last")
    assert other == "Conv cannot run: out of memory (in channels_last)"


def test_the_memory_guard_sizes_a_row_at_its_own_dtype() -> None:
    relu = {"N": 1, "C": 1, "H": 512, "W": 1024, "mode": 0}  # 512 Ki elements: an input and an output
    needs = {
        dtype: _rotation("Relu", relu, CPU, dtype, ("hot", 0, None), 1e-12).split(",")[0]  # type: ignore[union-attr]
        for dtype in (torch.bfloat16, torch.float32, torch.float64)
    }
    assert needs == {torch.bfloat16: "needs 2.0 MiB", torch.float32: "needs 4.0 MiB", torch.float64: "needs 8.0 MiB"}


@pytest.mark.parametrize("into", ["channels_last", "contiguous"])
def test_a_cast_within_its_dtype_copies_from_the_other_layout_into_the_rows(into: str) -> None:
    # a layout conversion (a step's aten::copy_ between NCHW and NHWC): the source in the format the row's is not
    other = torch.contiguous_format if into == "channels_last" else NHWC
    target = NHWC if into == "channels_last" else torch.contiguous_format
    with laid_out_as(into):
        timed = KERNELS["Cast"]({**IMAGE, "to": 1, "mode": 0}, CPU, torch.float32)
    (source,) = timed.inputs
    assert source.is_contiguous(memory_format=other) and not source.is_contiguous(memory_format=target)
    got = timed()
    assert got.dtype == torch.float32 and got.is_contiguous(memory_format=target)
    assert got.data_ptr() != source.data_ptr()
    torch.testing.assert_close(got, source)
