"""Fuzzed parsers: the protocol CSV reader and writer, parameter alignment and permutation strategies
round-trip what they should and fail on anything else only with their documented error types."""

from __future__ import annotations

import math
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlbench.core.values import TIME_UNITS_TO_MS, Operation, TimeStats
from dlbench.operators.align import AlignmentError, Permutation, PermutationError, align_operation
from dlbench.operators.protocol import ProtocolError, parse_output, read_input, write_input, write_output

#: Example counts, chosen so the whole file runs in well under 20 s on a busy 2-core machine.
ROUND_TRIPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GARBAGE = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


values = st.one_of(
    st.integers(min_value=-(2**62), max_value=2**62),
    st.floats(allow_nan=False, allow_infinity=True, width=64),
)
input_rows = st.lists(
    st.tuples(st.integers(min_value=-(2**62), max_value=2**62), st.lists(values, max_size=20)), max_size=20
)


@ROUND_TRIPS
@given(rows=input_rows)
def test_input_rows_round_trip(scratch: Path, rows: list[tuple[int, list[float]]]) -> None:
    path = write_input(scratch / "in.csv", rows)
    assert read_input(path) == [(op_id, [float(v) for v in vals]) for op_id, vals in rows]


@GARBAGE
@given(data=st.binary(max_size=2000) | st.text(max_size=2000).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_reading_any_input_bytes_gives_rows_or_a_protocol_error(scratch: Path, data: bytes) -> None:
    path = scratch / "garbage_in.csv"
    path.write_bytes(data)
    try:
        rows = read_input(path)
    except ProtocolError as err:
        assert str(path) in str(err)
        return
    assert all(isinstance(op_id, int) and all(isinstance(v, float) for v in vals) for op_id, vals in rows)


positive_ms = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False)
stats = st.builds(
    TimeStats,
    median_ms=positive_ms,
    min_ms=positive_ms,
    max_ms=positive_ms,
    mean_ms=positive_ms,
    std_ms=st.floats(min_value=0, max_value=1e9),
    iqr_ms=st.floats(min_value=0, max_value=1e9),
    reps=st.integers(min_value=1, max_value=10**9),
)


@ROUND_TRIPS
@given(
    rows=st.dictionaries(st.integers(min_value=-(2**40), max_value=2**40), stats, max_size=30),
    unit=st.sampled_from(sorted(TIME_UNITS_TO_MS)),
)
def test_output_rows_round_trip_in_every_unit(scratch: Path, rows: dict[int, TimeStats], unit: str) -> None:
    path = scratch / "rt_out.csv"
    write_output(path, rows.items(), unit=unit)
    if not rows:
        with pytest.raises(ProtocolError, match="header but no rows"):
            parse_output(path, rows)
        return
    parsed = parse_output(path, rows)
    assert parsed.problems == [] and parsed.unit == unit and set(parsed.rows) == set(rows)
    for op_id, expected in rows.items():
        got = parsed.rows[op_id]
        assert got.reps == expected.reps
        for name in ("median_ms", "min_ms", "max_ms", "mean_ms", "std_ms", "iqr_ms"):
            assert math.isclose(getattr(got, name), getattr(expected, name), rel_tol=1e-12, abs_tol=1e-300), name


# Text that looks almost like an output file: headers, numbers, junk, separators, stray bytes.
cells = st.one_of(
    st.sampled_from(["id", "ms", "us", "s", "ns", "time", "min", "reps", "nan", "inf", "-1", "0", "1e999", ""]),
    st.integers(min_value=-5, max_value=5).map(str),
    st.floats(allow_nan=True).map(repr),
    st.text(alphabet=string.printable, max_size=8),
    st.just("9" * 5000),
)
lines = st.lists(cells, min_size=1, max_size=9).map(",".join)
almost_csv = st.lists(lines, max_size=12).map(lambda ls: "\n".join(ls).encode())


@GARBAGE
@given(
    data=st.one_of(almost_csv, st.binary(max_size=600)),
    expected=st.none() | st.lists(st.integers(min_value=-3, max_value=6), max_size=6),
)
def test_parsing_any_output_bytes_gives_rows_and_problems_or_a_protocol_error(
    scratch: Path, data: bytes, expected: list[int] | None
) -> None:
    path = scratch / "garbage_out.csv"
    path.write_bytes(data)
    try:
        parsed = parse_output(path, expected)
    except ProtocolError as err:
        assert str(path) in str(err)
        return
    for op_id, row in parsed.rows.items():
        assert expected is None or op_id in expected
        assert math.isfinite(row.median_ms) and row.median_ms > 0 and (row.reps is None or row.reps >= 1)
        # a statistic is either missing or a real non-negative number: never invented, never NaN
        for value in (row.min_ms, row.max_ms, row.mean_ms, row.std_ms, row.iqr_ms, row.p10_ms, row.ci_low_ms):
            assert value is None or (math.isfinite(value) and value >= 0)
    for problem in parsed.problems:
        assert problem.startswith(f"{path}:"), "every problem names the file and the line"
    attributed = [p for found in parsed.problems_by_id.values() for p in found]
    assert all(p in parsed.problems for p in attributed)
    assert expected is None or set(parsed.problems_by_id) <= set(expected)


descriptors = st.sampled_from(["N", "C", "H", "W", "K", "M", "mode", "axis", "?", "x_0"])
numbers = st.one_of(st.integers(min_value=-(10**6), max_value=10**6), st.floats(allow_nan=False))
patterns = st.text(alphabet="abcde", max_size=4)
strategy_texts = st.builds(
    lambda ins, out: f"{','.join(ins)} -> {out}",
    st.lists(patterns, min_size=1, max_size=3),
    st.text(alphabet="abcde0123", min_size=1, max_size=6),
)


def operation(params: list[tuple[str, float]], shapes: list[list[int]]) -> Operation:
    return Operation(7, "Fuzz", tuple(params), tuple(tuple(s) for s in shapes))


@GARBAGE
@given(
    params=st.lists(st.tuples(descriptors, numbers), max_size=8),
    param_descr=st.lists(descriptors.filter(lambda d: d != "?"), min_size=1, max_size=6),
    strategies=st.lists(strategy_texts, max_size=3),
    shapes=st.lists(st.lists(st.integers(min_value=1, max_value=9), max_size=4), max_size=3),
)
def test_alignment_gives_one_value_per_descriptor_or_an_alignment_error(
    params: list[tuple[str, float]], param_descr: list[str], strategies: list[str], shapes: list[list[int]]
) -> None:
    permutations = []
    for text in strategies:
        try:
            permutations.append(Permutation.parse(text))
        except PermutationError:
            continue
    op = operation(params, shapes)
    try:
        aligned = align_operation(op, param_descr, permutations, "fuzz_entry")
    except AlignmentError as err:
        assert "fuzz_entry" in str(err)
        return
    assert len(aligned) == len(param_descr)
    named = op.param_dict
    if all(d in named for d in param_descr):
        assert aligned == [named[d] for d in param_descr]


@ROUND_TRIPS
@given(
    names=st.lists(st.text(alphabet=string.ascii_letters + "_", min_size=1, max_size=6), min_size=1, max_size=8),
    data=st.data(),
)
def test_alignment_by_name_is_a_reordering(names: list[str], data: st.DataObject) -> None:
    names = list(dict.fromkeys(names))
    vals = data.draw(st.lists(numbers, min_size=len(names), max_size=len(names)))
    order = data.draw(st.permutations(names))
    extra = data.draw(st.lists(st.tuples(st.just("?"), numbers), max_size=3))
    op = operation([*zip(names, vals, strict=True), *extra], [])
    assert align_operation(op, order) == [dict(zip(names, vals, strict=True))[n] for n in order]


@GARBAGE
@given(text=st.one_of(st.text(max_size=40), strategy_texts, st.integers(), st.none(), st.lists(st.text())))
def test_permutation_parser_takes_any_value_or_raises_permutation_error(text: object) -> None:
    try:
        strategy = Permutation.parse(text)  # type: ignore[arg-type]
    except PermutationError as err:
        assert repr(text)[:20] in str(err) or "permutation" in str(err)
        return
    known = set("".join(strategy.inputs))
    assert all(c.isdigit() or c in known for c in strategy.output)


@ROUND_TRIPS
@given(
    inputs=st.lists(st.text(alphabet="abcdef", min_size=0, max_size=4), min_size=1, max_size=3),
    constants=st.text(alphabet="0123456789", max_size=3),
    data=st.data(),
)
def test_permutation_round_trip_recovers_each_dimension(inputs: list[str], constants: str, data: st.DataObject) -> None:
    letters = sorted(set("".join(inputs)))
    output = "".join(letters) + constants
    if not output:
        return
    sizes = {c: data.draw(st.integers(min_value=1, max_value=4096)) for c in letters}
    text = f"{', '.join(inputs)} -> {output}"
    strategy = Permutation.parse(text)
    shapes = [[sizes[c] for c in pattern] for pattern in inputs]
    assert strategy.apply(shapes) == [sizes[c] for c in letters] + [int(c) for c in constants]
    # shapes of another rank, or a letter whose sizes disagree, do not fit
    assert strategy.apply([*shapes, [1]]) is None
    flat = "".join(inputs)
    repeated = next((c for c in letters if flat.count(c) > 1), None)
    if repeated is not None:
        # one occurrence of a repeated letter gets another size: the shapes contradict the pattern
        first = flat.index(repeated)
        sizes_flat = [sizes[c] + (1 if i == first else 0) for i, c in enumerate(flat)]
        bad, start = [], 0
        for pattern in inputs:
            bad.append(sizes_flat[start : start + len(pattern)])
            start += len(pattern)
        assert strategy.apply(bad) is None


@GARBAGE
@given(
    text=strategy_texts,
    shapes=st.lists(st.lists(st.integers(min_value=0, max_value=2**40), max_size=5), max_size=4),
)
def test_permutation_apply_on_any_shapes_gives_values_or_none(text: str, shapes: list[list[int]]) -> None:
    try:
        strategy = Permutation.parse(text)
    except PermutationError:
        return
    values = strategy.apply(shapes)
    assert values is None or len(values) == len(strategy.output)
