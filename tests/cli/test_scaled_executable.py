"""bench/compare_conf/scaled.py, the executable of compare_power's slowdown scenario: with ``SCALED_TIME`` the
even ids' times are reported that many times longer (every sample and time statistic) and nothing else moves,
so B is a known slowdown of the same work; the protocol then reads the slowed medians."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from helpers import REPO

from dlbench.operators.protocol import parse_output


def _scaled():
    spec = importlib.util.spec_from_file_location("scaled", REPO / "bench" / "compare_conf" / "scaled.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_time_scaling_slows_the_even_ids_times_and_leaves_counts_efficiency_and_odd_ids(tmp_path: Path):
    out = tmp_path / "conv_out.csv"
    out.write_text("id,ms,min,reps,ci_low,ci_high,converged,cpu_efficiency\n"
                   "0,2.0,1.5,40,1.9,2.1,1,0.98\n1,3.0,2.5,30,2.9,3.1,1,0.97\n2,4.0,3.0,20,3.8,4.2,0,\n")  # fmt: skip
    samples = tmp_path / "conv_samples.csv"
    samples.write_text("id,ms\n0,2.0\n0,2.2\n1,3.0\n2,4.0\n")
    scaled = _scaled()
    for path in (out, samples):
        scaled.scale_times(path, 1.1)
    assert out.read_text().splitlines()[1:] == [
        "0,2.2,1.6500000000000001,40,2.09,2.3100000000000005,1,0.98",
        "1,3.0,2.5,30,2.9,3.1,1,0.97",
        "2,4.4,3.3000000000000003,20,4.18,4.620000000000001,0,",
    ]
    assert samples.read_text().splitlines() == ["id,ms", "0,2.2", "0,2.4200000000000004", "1,3.0", "2,4.4"]
    parsed = parse_output(out, [0, 1, 2])  # recomputed from the samples, as a sweep reads them
    assert parsed.problems == [] and parsed.rows[0].median_ms == (2.2 + 2.4200000000000004) / 2
    assert parsed.rows[1].median_ms == 3.0
