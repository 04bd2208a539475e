"""What ran, recorded: each profiled call's input dtypes and memory format, from the live profiler and from the
Chrome trace it exported alike, key the operator table."""

from __future__ import annotations

import json

import pytest
import torch

from dlbench.training.profile import PROFILE_COLUMNS, operator_table
from dlbench.training.trace import input_formats, kineto_events, memory_format, read_trace

COLUMN = {name: i for i, name in enumerate(PROFILE_COLUMNS)}


def _profiled_autocast_step(tmp_path):
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4))
    model = model.to(memory_format=torch.channels_last)
    inputs = torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(inputs), torch.tensor([0, 1]))
        loss.backward()
    trace = tmp_path / "trace.json"
    profiler.export_chrome_trace(str(trace))
    return kineto_events(profiler), read_trace(trace)


def _rows(events, name):
    return [r for r in operator_table(events, 0) if r[COLUMN["name"]] == name]


def test_autocast_calls_are_recorded_in_the_dtype_and_layout_they_ran(tmp_path):
    live, _ = _profiled_autocast_step(tmp_path)
    conv_types = {r[COLUMN["input_types"]] for r in _rows(live, "aten::convolution")}
    assert conv_types == {json.dumps(["bfloat16", "bfloat16", "bfloat16", *[""] * 6], separators=(",", ":"))}
    assert {r[COLUMN["memory_format"]] for r in _rows(live, "aten::convolution")} == {"channels_last"}
    # autocast runs the loss in float32, and casts the weights to bfloat16 (float32 in, bfloat16 out)
    assert {json.loads(r[COLUMN["input_types"]])[0] for r in _rows(live, "aten::log_softmax")} == {"float32"}
    copies = {tuple(json.loads(r[COLUMN["input_types"]])[:2]) for r in _rows(live, "aten::copy_")}
    assert ("bfloat16", "float32") in copies
    # the linear layer's 2-D inputs have no memory format of their own
    assert {r[COLUMN["memory_format"]] for r in _rows(live, "aten::linear")} == {"contiguous"}


def test_the_exported_trace_records_what_the_live_profiler_does(tmp_path):
    live, traced = _profiled_autocast_step(tmp_path)

    def kinds(events):
        return sorted({(r[1], r[2], r[COLUMN["input_types"]], r[COLUMN["memory_format"]])
                       for r in operator_table(events, 0)})  # fmt: skip

    assert kinds(live) == kinds(traced)


@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (1, 8, 1, 1), (4, 1, 3, 3), (2, 3, 2, 2, 2)])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed"])
def test_memory_format_agrees_with_torch(shape, layout):
    tensor = torch.empty(shape)
    if layout == "channels_last":
        tensor = tensor.contiguous(memory_format=torch.channels_last_3d if len(shape) == 5 else torch.channels_last)
    elif layout == "transposed":
        tensor = tensor.transpose(2, 3)
    cl = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
    expected = (
        "channels_last" if tensor.is_contiguous(memory_format=cl) and not tensor.is_contiguous() else "contiguous"
    )
    assert memory_format([list(tensor.shape)], [list(tensor.stride())]) == expected


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed"])
def test_each_inputs_format_agrees_with_torch(layout):
    image = torch.empty(2, 3, 5, 4)
    if layout == "channels_last":
        image = image.contiguous(memory_format=torch.channels_last)
    elif layout == "transposed":
        image = image.transpose(2, 3)
    matrix, inputs = torch.empty(3, 4), None
    inputs = (image, matrix, torch.empty(2, 3, 5, 4))
    expected = [
        "channels_last" if image.is_contiguous(memory_format=torch.channels_last) and not image.is_contiguous()
        else "contiguous" if image.is_contiguous() else "",
        "",
        "contiguous",
    ]  # fmt: skip
    got = input_formats([list(t.shape) for t in inputs] + [[]], [list(t.stride()) for t in inputs] + [[]])
    assert got == [*expected, ""]


def test_a_copy_between_layouts_records_each_inputs_format():
    from torch.profiler import ProfilerActivity, profile

    nchw = torch.randn(2, 3, 5, 4)
    nhwc = torch.empty_like(nchw, memory_format=torch.channels_last)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        nhwc.copy_(nchw)
    (row,) = [r for r in operator_table(kineto_events(profiler), 0) if r[COLUMN["name"]] == "aten::copy_"]
    assert json.loads(row[COLUMN["input_formats"]])[:2] == ["channels_last", "contiguous"]
