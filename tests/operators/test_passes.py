"""A registry entry may declare which passes one reported time covers; FLOPs and bytes follow, and a pass the
entry's operators do not have is refused naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlbench.core.descriptors import CONV, GEMM, operation_cost
from dlbench.core.values import Operation
from dlbench.operators.passes import cost_of_passes, known_passes, with_passes
from dlbench.operators.registry import RegistryError, load_registry

CONV_VALUES = [8, 64, 56, 56, 128, 3, 3, 1, 1, 1, 1, 2, 2, 1, 1, 1, 0, 0]


def conv_op() -> Operation:
    params = tuple(zip(CONV, CONV_VALUES, strict=True))
    flops, moved = operation_cost("Conv", dict(params))
    return Operation(id=0, op_type="Conv", params=params, flops=flops, bytes_moved=moved)


def test_a_whole_training_step_of_a_convolution_costs_its_three_problems() -> None:
    op = conv_op()
    forward_flops, forward_bytes = operation_cost("Conv", op.param_dict)
    backward_data = operation_cost("Conv", {**op.param_dict, "mode": 1})
    backward_weights = operation_cost("Conv", {**op.param_dict, "mode": 2})
    flops, moved = cost_of_passes(op, ["forward", "backward_data", "backward_weights"])
    assert flops == forward_flops + backward_data[0] + backward_weights[0] == pytest.approx(3 * forward_flops)
    assert moved == forward_bytes + backward_data[1] + backward_weights[1]
    assert cost_of_passes(op, ["forward"]) == (forward_flops, forward_bytes)


def test_gemm_backward_problems_follow_the_transposes() -> None:
    params = tuple(zip(GEMM, [128, 256, 64, 0, 1, 1], strict=True))
    op = Operation(id=0, op_type="Gemm", params=params)
    flops, moved = cost_of_passes(op, ["forward", "backward_a", "backward_b"], dtype="float16")
    assert flops == pytest.approx(3 * 2 * 128 * 256 * 64)
    # each pass reads two operands and writes one, in 2-byte elements: A, B, C sizes in some order
    assert moved == pytest.approx(3 * 2 * (128 * 256 + 256 * 64 + 128 * 64))


def test_operations_measured_by_a_multi_pass_entry_carry_the_passes_and_their_cost() -> None:
    (costed,) = with_passes([conv_op()], ["forward", "backward_data", "backward_weights"])
    assert costed.timed_passes == ("forward", "backward_data", "backward_weights")
    assert costed.flops == pytest.approx(3 * conv_op().flops)
    assert with_passes([conv_op()], []) == [conv_op()]


def test_known_passes_come_from_the_unfolding_table() -> None:
    assert known_passes("Conv") == ["forward", "backward_data", "backward_weights"]
    assert known_passes("Relu") == ["forward", "backward"]
    assert known_passes("NoSuchOp") == ["forward"]


def write_entry(directory: Path, text: str) -> Path:
    (directory / "registry").mkdir(parents=True, exist_ok=True)
    path = directory / "registry" / "step.yaml"
    path.write_text(text)
    return path


def test_a_registry_entry_declares_its_passes(tmp_path: Path) -> None:
    write_entry(tmp_path, "name: step\nsynonyms: [Conv]\nexe: x\nparam_descr: [N]\npasses: [forward, backward_data]\n")
    entry = load_registry((tmp_path,)).operator("step")
    assert entry.passes == ("forward", "backward_data")


@pytest.mark.parametrize(
    ("passes", "message"),
    [("[forward, backward]", "'backward' is not a pass of step, Conv; use forward, backward_data"),
     ("[forward, forward]", "names a pass twice")],
)  # fmt: skip
def test_an_unknown_pass_fails_naming_the_file_and_the_field(tmp_path: Path, passes: str, message: str) -> None:
    path = write_entry(tmp_path, f"name: step\nsynonyms: [Conv]\nexe: x\nparam_descr: [N]\npasses: {passes}\n")
    with pytest.raises(RegistryError, match=rf"{path}: field passes: .*{message}"):
        load_registry((tmp_path,))
