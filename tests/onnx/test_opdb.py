"""The operation database: deduplication, the DataFrame form, and the exact CSV round trip."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from onnx_models import exported

from dlbench.core.values import Operation
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.opdb import (
    OperationDatabaseError,
    deduplicate,
    frame_operations,
    frame_sources,
    operations_frame,
    read_csv,
    read_operations,
    summary_table,
    write_csv,
)
from dlbench.onnx.unfold import load_table, unfold_operations


def relu(op_id: int, node: str, width: int = 8) -> Operation:
    return Operation(
        id=op_id, op_type="Relu", params=(("N", 1), ("C", 1), ("H", 4), ("W", width), ("mode", 0)), nodes=(node,)
    )


def test_identical_operations_merge_counts_and_nodes_in_order():
    merged = deduplicate([relu(7, "a"), relu(8, "b", width=16), relu(9, "c")])
    assert [(op.id, op.count, op.nodes) for op in merged] == [(0, 2, ("a", "c")), (1, 1, ("b",))]


@pytest.mark.parametrize("name", ["resnet", "mlp", "encoder"])
def test_database_of_a_real_model_round_trips_through_csv(name: str, tmp_path: Path):
    operations = deduplicate(extract_operations(exported(name), 16).operations())
    frame = operations_frame(operations)
    path = write_csv(frame, tmp_path / "ops.csv")
    assert all(op.node is not None for op in operations)
    assert read_operations(path) == [replace(op, node=None) for op in operations]  # the CSV holds no ONNX node
    back = read_csv(path)
    assert list(back["count"]) == [op.count for op in operations]
    assert back["count"].sum() == sum(op.count for op in operations)


def test_unfolded_database_keeps_pass_and_source_through_csv(tmp_path: Path):
    forward = deduplicate(extract_operations(exported("mlp"), 8).operations())
    unfolded = unfold_operations(forward, load_table())
    path = write_csv(operations_frame(list(unfolded.operations), unfolded.sources), tmp_path / "ops.csv")
    frame = read_csv(path)
    assert frame_sources(frame) == dict(unfolded.sources)
    assert frame_operations(frame) == [replace(op, node=None) for op in unfolded.operations]
    assert set(frame["pass"]) == {"forward", "backward", "backward_a", "backward_b"}


def test_descriptor_columns_hold_the_named_parameters():
    frame = operations_frame(deduplicate(extract_operations(exported("resnet"), 4).operations()))
    conv = frame[frame["op_type"] == "Conv"].iloc[0]
    assert (conv["N"], conv["C"], conv["K"], conv["kernel_shape_0"]) == (4, 3, 16, 7)
    assert frame.columns[:5].tolist() == ["id", "op_type", "name", "params", "count"]


def test_awkward_names_and_floats_survive_the_round_trip(tmp_path: Path):
    ops = [
        Operation(
            id=0,
            op_type="LayerNormalization",
            params=(("N", 1), ("C", 2), ("H", 3), ("W", 4), ("axis", 3), ("epsilon", 1e-12), ("mode", 0)),
            nodes=("NA", "a,b;c", 'quote"d'),
            name="custom name",
            flops=1.0 / 3.0,
        ),
        Operation(id=1, op_type="Weird", params=(("?", 5), ("?", 6), ("alpha", 0.1)), nodes=("",)),
    ]
    path = write_csv(operations_frame(ops), tmp_path / "ops.csv")
    assert read_operations(path) == ops


def test_table_lists_op_type_count_and_parameters():
    ops = deduplicate([relu(0, "a"), relu(1, "b")])
    table = summary_table(operations_frame(ops))
    assert table.splitlines()[0].split() == ["id", "op_type", "count", "pass", "parameters"]
    assert table.splitlines()[1].split() == ["0", "Relu", "2", "forward", "N=1;C=1;H=4;W=8;mode=0"]


def test_missing_column_is_named_with_the_file(tmp_path: Path):
    path = tmp_path / "bad.csv"
    path.write_text("id,op_type,params\n0,Relu,[]\n")
    with pytest.raises(OperationDatabaseError, match=r"bad\.csv: missing column\(s\) count, nodes"):
        read_operations(path)


def test_bad_json_is_named_with_row_and_column(tmp_path: Path):
    path = write_csv(operations_frame([relu(0, "a"), relu(1, "b", 16)]), tmp_path / "ops.csv")
    text = path.read_text().splitlines()
    text[2] = text[2].replace('""N"", 1', '""N"", oops')
    assert "oops" in text[2]
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(OperationDatabaseError, match=r"ops\.csv: row 2, column params: not JSON"):
        read_operations(path)


def test_non_numeric_count_is_named(tmp_path: Path):
    path = write_csv(operations_frame([relu(0, "a")]), tmp_path / "ops.csv")
    frame = read_csv(path)
    frame["count"] = frame["count"].astype(str)
    frame.loc[0, "count"] = "many"
    frame.to_csv(path, index=False)
    with pytest.raises(OperationDatabaseError, match=r"ops\.csv: row 1, column count: not a number: 'many'"):
        read_csv(path)


def test_missing_database_file_is_named(tmp_path: Path):
    with pytest.raises(OperationDatabaseError, match=r"nothing\.csv: no such operation database"):
        read_csv(tmp_path / "nothing.csv")
