"""The training-loop instrumentation profiles exactly the chosen batches of a real torch training loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dlbench.training import api, instrument
from dlbench.training.api import op_performance_analysis_cpu
from dlbench.training.instrument import ProfileSession, ProfileSettings
from dlbench.training.profile import BATCH_COLUMNS, PROFILE_COLUMNS, SUMMARY_FILE, operator_rows, read_profile


class SmallNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 8 * 8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def train_steps(batch_scope, steps: int, observe=None) -> list[float]:
    """A real training loop: every step goes through ``batch_scope(batch_idx)``."""
    torch.manual_seed(0)
    model = SmallNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    inputs, targets = torch.randn(6, 3, 8, 8), torch.randint(0, 5, (6,))
    losses = []
    for batch_idx in range(steps):
        with batch_scope(batch_idx) as batch:
            if observe is not None:
                observe(batch_idx)
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
            batch.log(loss=loss.item(), samples=len(inputs))
        losses.append(loss.item())
    return losses


@pytest.fixture(autouse=True)
def fresh_default_session(monkeypatch):
    for name in (instrument.ENV_WARMUP, instrument.ENV_BATCHES, instrument.ENV_DIR, instrument.ENV_SYNC):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    api.reset()
    yield
    api.reset()


def test_profiles_exactly_the_batches_after_the_warmup(tmp_path: Path):
    session = ProfileSession(ProfileSettings(warmup=2, batches=3, out_dir=tmp_path))
    train_steps(session.batch, steps=8)
    session.finish()

    assert sorted(p.name for p in tmp_path.glob("batch_*_ops.csv")) == [f"batch_{i}_ops.csv" for i in (2, 3, 4)]
    assert sorted(p.name for p in tmp_path.glob("batch_*_trace.json")) == [f"batch_{i}_trace.json" for i in (2, 3, 4)]
    assert session.profilers_created == 3
    assert [b.batch_idx for b in session.profiled] == [2, 3, 4]
    trace = json.loads((tmp_path / "batch_3_trace.json").read_text())
    assert any(event.get("name", "").startswith("aten::") for event in trace["traceEvents"])


def test_batch_table_has_the_operators_of_conv_and_linear_layers(tmp_path: Path):
    session = ProfileSession(ProfileSettings(warmup=1, batches=1, out_dir=tmp_path))
    train_steps(session.batch, steps=2)

    table = read_profile(tmp_path / "batch_1_ops.csv")
    assert tuple(table.columns) == PROFILE_COLUMNS
    names = set(table["name"])
    assert "aten::addmm" in names  # Linear forward
    assert "aten::mm" in names  # Linear backward
    assert "aten::convolution" in names
    assert "aten::convolution_backward" in names
    assert (table["batch"] == 1).all()
    assert (table["calls"] >= 1).all()
    assert (table["self_cpu_us"] >= 0).all()
    assert (table["cpu_total_us"] + 1e-6 >= table["self_cpu_us"]).all()
    addmm = table[table["name"] == "aten::addmm"].iloc[0]
    assert json.loads(addmm["input_shapes"]) == [[5], [6, 256], [256, 5], [], []]
    conv = table[table["name"] == "aten::convolution"].iloc[0]
    assert json.loads(conv["input_shapes"])[:2] == [[6, 3, 8, 8], [4, 3, 3, 3]]


def test_summary_gives_mean_median_and_spread_over_the_profiled_batches(tmp_path: Path):
    session = ProfileSession(ProfileSettings(warmup=1, batches=3, out_dir=tmp_path))
    train_steps(session.batch, steps=4)
    assert session.summary_path == tmp_path / SUMMARY_FILE

    summary = read_profile(tmp_path / SUMMARY_FILE)
    per_batch = [read_profile(tmp_path / f"batch_{i}_ops.csv") for i in (1, 2, 3)]
    row = summary[summary["name"] == "aten::addmm"].iloc[0]
    samples = [float(t[t["name"] == "aten::addmm"]["self_cpu_us"].iloc[0]) for t in per_batch]
    assert row["batches"] == 3
    assert row["self_cpu_us_mean"] == pytest.approx(sum(samples) / 3)
    assert row["self_cpu_us_median"] == pytest.approx(sorted(samples)[1])
    assert row["self_cpu_us_min"] == pytest.approx(min(samples))
    assert row["self_cpu_us_max"] == pytest.approx(max(samples))
    assert row["self_cpu_us_std"] > 0
    assert {"input_shapes", "device_total_us_mean", "cpu_total_us_std"} <= set(summary.columns)


def test_finish_writes_a_partial_summary_when_training_stops_early(tmp_path: Path):
    session = ProfileSession(ProfileSettings(warmup=1, batches=3, out_dir=tmp_path))
    train_steps(session.batch, steps=3)
    assert session.summary_path is None
    session.finish()
    summary = read_profile(tmp_path / SUMMARY_FILE)
    assert summary["batches"].max() == 2  # batches 1 and 2 of the three asked for
    assert session.summary_path == tmp_path / SUMMARY_FILE


def test_unprofiled_batches_create_no_profiler(tmp_path: Path):
    session = ProfileSession(ProfileSettings(warmup=3, batches=1, out_dir=tmp_path))
    active = {}

    def observe(batch_idx: int) -> None:
        active[batch_idx] = torch.autograd._profiler_enabled()

    train_steps(session.batch, steps=6, observe=observe)
    assert active == {0: False, 1: False, 2: False, 3: True, 4: False, 5: False}
    assert session.profilers_created == 1


def test_progress_file_counts_finished_steps_at_most_once_an_interval(tmp_path: Path, monkeypatch):
    progress = tmp_path / "progress"
    monkeypatch.setenv(instrument.ENV_PROGRESS, str(progress))
    monkeypatch.setattr(instrument, "PROGRESS_INTERVAL_S", 3600.0)  # no rewrite within the test unless asked
    session = ProfileSession(ProfileSettings(warmup=10, batches=0, out_dir=tmp_path))
    train_steps(session.batch, steps=1)
    assert progress.read_text() == "1"
    train_steps(session.batch, steps=3)  # fast steps within the interval: the file is not rewritten
    assert progress.read_text() == "1"
    session._next_progress = 0.0  # the interval has passed
    train_steps(session.batch, steps=1)
    assert progress.read_text() == "5"


def test_every_batch_wall_time_goes_to_batches_csv(tmp_path: Path):
    session = ProfileSession(ProfileSettings(warmup=2, batches=2, out_dir=tmp_path))
    losses = train_steps(session.batch, steps=6)
    session.finish()

    batches = read_profile(tmp_path / "batches.csv")
    assert tuple(batches.columns) == BATCH_COLUMNS
    assert list(batches["batch"]) == list(range(6))
    assert list(batches["profiled"]) == [0, 0, 1, 1, 0, 0]
    assert (batches["wall_s"] > 0).all()
    values = session.logged_values()
    assert [v for _, v in values["loss"]] == pytest.approx(losses)
    assert len(values["samples_per_s"]) == 6
    assert len(values["step_time_s"]) == 6


def test_environment_configures_an_unchanged_script_through_the_original_name(tmp_path: Path, monkeypatch):
    monkeypatch.setenv(instrument.ENV_WARMUP, "1")
    monkeypatch.setenv(instrument.ENV_BATCHES, "2")
    monkeypatch.setenv(instrument.ENV_DIR, str(tmp_path / "profile"))
    train_steps(op_performance_analysis_cpu, steps=5)
    api.finish()

    written = sorted(p.name for p in (tmp_path / "profile").iterdir())
    assert written == [
        "batch_1_folded.csv",
        "batch_1_ops.csv",
        "batch_1_trace.json",
        "batch_2_folded.csv",
        "batch_2_ops.csv",
        "batch_2_trace.json",
        "batches.csv",
        "run_facts.json",
        SUMMARY_FILE,
    ]
    assert api.default_session().profilers_created == 2


def test_arguments_override_the_environment(tmp_path: Path, monkeypatch):
    monkeypatch.setenv(instrument.ENV_WARMUP, "7")
    settings = ProfileSettings.resolve(warmup=0, out_dir=tmp_path)
    assert settings.warmup == 0
    assert settings.batches == instrument.DEFAULT_BATCHES
    assert settings.out_dir == tmp_path


def test_bad_environment_value_names_the_variable(monkeypatch):
    monkeypatch.setenv(instrument.ENV_BATCHES, "three")
    with pytest.raises(ValueError, match="DLBENCH_PROFILE_BATCHES='three' is not an integer"):
        ProfileSettings.resolve()
    monkeypatch.setenv(instrument.ENV_BATCHES, "-1")
    with pytest.raises(ValueError, match="DLBENCH_PROFILE_BATCHES"):
        ProfileSettings.resolve()


def test_a_failing_profiled_batch_stops_the_profiler_and_re_raises(tmp_path: Path):
    session = ProfileSession(ProfileSettings(warmup=0, batches=1, out_dir=tmp_path))
    with pytest.raises(RuntimeError, match="boom"):
        with session.batch(0):
            torch.ones(2) + 1
            raise RuntimeError("boom")
    assert not torch.autograd._profiler_enabled()
    assert session.profiled == []


def test_bad_profile_csv_error_names_file_and_line(tmp_path: Path):
    path = tmp_path / "batch_0_ops.csv"
    header = ",".join(PROFILE_COLUMNS)
    rows = (
        '0,aten::mm,"[[2,3],[3,4]]",1,5.0,5.0,0,0,5.0,0,"[]",,"[]",\n0,aten::add,"[[2]]",1,fast,1,0,0,1,0,"[]",,"[]",\n'
    )
    path.write_text(f"{header}\n{rows}")
    with pytest.raises(ValueError, match=rf"{path}:3: self_cpu_us='fast' is not a number"):
        read_profile(path)

    path.write_text(f'{header}\n0,aten::mm,"[[2,3],[3,4]]",1,5.0\n')
    with pytest.raises(ValueError, match=rf"{path}:2: 5 fields, the header has {len(PROFILE_COLUMNS)}"):
        read_profile(path)

    path.write_text(f"{header}\n0,aten::mm,not-shapes,1,5.0,5.0,0,0,5.0,0,[],,[],\n")
    with pytest.raises(ValueError, match=rf"{path}:2: input_shapes 'not-shapes' is not a JSON list"):
        read_profile(path)

    path.write_text("")
    with pytest.raises(ValueError, match=rf"{path}:1: empty profile file"):
        read_profile(path)


def test_operator_table_agrees_with_torch_key_averages():
    from torch.profiler import ProfilerActivity, profile

    model = SmallNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, targets = torch.randn(6, 3, 8, 8), torch.randint(0, 5, (6,))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()

    ours: dict[tuple[str, str], list[float]] = {}  # our key is finer (dtypes, formats, a copy's caller): summed
    for row in operator_rows(profiler, batch_idx=0):
        totals = ours.setdefault((row[1], row[2]), [0.0] * 7)
        for i, value in enumerate(row[3:10]):
            totals[i] += value
    reference = {
        (e.key, json.dumps(e.input_shapes, separators=(",", ":"))): e
        for e in profiler.key_averages(group_by_input_shape=True)
    }
    assert ours.keys() == reference.keys()
    for key, event in reference.items():
        calls, self_cpu, cpu_total, self_device, device_total, host, kernels = ours[key]
        assert calls == event.count, key
        assert self_cpu == pytest.approx(event.self_cpu_time_total, abs=0.01), key
        assert cpu_total == pytest.approx(event.cpu_time_total, abs=0.01), key
        assert self_device == device_total == kernels == 0, key
        assert host == pytest.approx(self_cpu, abs=0.01), key  # no runtime calls on a CPU
