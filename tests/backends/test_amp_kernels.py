"""GradScaler's operators and autocast's casts as benchmarks: the unscale and the scale update time the aten
operators ``torch.amp.GradScaler`` runs and compute what it computes; a Cast row casts from its own dtype."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.profiler import profile

from dlbench.backends.torch.kernels import KERNELS
from dlbench.core.dtypes import ELEMENT_TYPES
from dlbench.core.values import Operation
from dlbench.operators.registry import load_registry
from dlbench.operators.runner import RunSettings, measure_operations

CPU = torch.device("cpu")


def aten_calls(run) -> set[str]:
    with profile() as prof:
        run()
    return {e.name for e in prof.events() if e.name.startswith("aten::")}


def test_grad_scaler_runs_the_unscale_and_update_operators_the_kernels_time() -> None:
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(model(torch.randn(2, 4)).sum()).backward()
    with profile() as prof:
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
    ran = {e.name for e in prof.events()}
    unscale = KERNELS["AmpUnscale"]({"tensors": 2, "elements": 15}, CPU, torch.float32)
    update = KERNELS["AmpUpdateScale"]({"N": 1}, CPU, torch.float32)
    assert "aten::_amp_foreach_non_finite_check_and_unscale_" in ran & aten_calls(unscale)
    assert "aten::_amp_update_scale_" in ran & aten_calls(update)


def test_the_unscale_divides_by_the_scale_and_finds_an_inf() -> None:
    timed = KERNELS["AmpUnscale"]({"tensors": 3, "elements": 10}, CPU, torch.bfloat16)
    assert [t.numel() for t in timed.inputs] == [4, 3, 3] and timed.inputs[0].dtype == torch.bfloat16
    before = [t.clone() for t in timed.inputs]
    found_inf = timed()
    assert float(found_inf) == 0.0
    for got, was in zip(timed.inputs, before, strict=True):
        torch.testing.assert_close(got, was / 65536.0)
    timed()  # the next call scales back: repetitions keep the magnitude
    timed.inputs[1][0] = float("inf")
    assert float(timed()) == 1.0


def test_the_scale_doubles_after_growth_interval_steps_without_inf() -> None:
    timed = KERNELS["AmpUpdateScale"]({"N": 1}, CPU, torch.float32)
    scale, tracker = timed.inputs[:2]
    for _ in range(1999):
        timed()
    assert float(scale) == 2.0**16 and int(tracker) == 1999
    timed()  # GradScaler's growth_interval: 2000 steps
    assert float(scale) == 2.0**17 and int(tracker) == 0


def test_a_cast_row_casts_from_its_own_dtype_to_its_target() -> None:
    params = {"N": 2, "C": 3, "H": 4, "W": 5, "to": ELEMENT_TYPES["float32"], "mode": 0}
    timed = KERNELS["Cast"](params, CPU, torch.bfloat16)
    assert timed.inputs[0].dtype == torch.bfloat16
    got = timed()
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, timed.inputs[0].float())


def test_the_amp_operators_are_measured_through_the_protocol_in_their_rows_dtypes(tmp_path: Path) -> None:
    registry = load_registry()
    settings = RunSettings(warmup=0, min_reps=2, min_time_s=0.0, max_time_s=0.05, threads=1, rounds=1)
    unscale = [
        Operation(0, "AmpUnscale", (("tensors", 4), ("elements", 4096))),
        Operation(1, "AmpUnscale", (("tensors", 4), ("elements", 4096)), dtype="float16"),
    ]
    result, _ = measure_operations(registry.operator("torch_ampunscale"), unscale, settings, tmp_path / "u")
    assert all(m.stats is not None for m in result.measurements.values()), result.measurements
    update = [Operation(0, "AmpUpdateScale", (("N", 1),))]
    result, _ = measure_operations(registry.operator("torch_ampupdatescale"), update, settings, tmp_path / "s")
    assert result.measurements[0].stats is not None, result.measurements
