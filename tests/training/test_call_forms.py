"""The original tool's call forms of the context manager: handed the network and a batch, it records what the
script runs with and exports the network to ONNX when dlbench asks, without disturbing the training."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import torch

from dlbench import instrument
from dlbench.training.export import ENV_EXPORT
from dlbench.training.facts import FACTS_FILE, effective_params, read_facts
from dlbench.training.instrument import ENV_BATCHES, ENV_DIR, ENV_SYNC, ENV_WARMUP
from dlbench.training.profile import read_profile


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 8 * 8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


@pytest.fixture(autouse=True)
def fresh_session(monkeypatch, tmp_path: Path):
    for name in (ENV_WARMUP, ENV_BATCHES, ENV_SYNC, ENV_EXPORT, "MLFLOW_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(ENV_DIR, str(tmp_path / "profile"))
    monkeypatch.setenv(ENV_WARMUP, "1")
    monkeypatch.setenv(ENV_BATCHES, "1")
    instrument.reset()
    yield
    instrument.reset()


def train(form, steps: int = 4, batch_size: int = 6, net: torch.nn.Module | None = None) -> torch.nn.Module:
    """An ordinary loop written for the original tool: ``form(batch_idx, input, net, ...)`` per batch."""
    torch.manual_seed(0)
    net = net or ConvNet()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    inputs, targets = torch.randn(batch_size, 3, 8, 8), torch.randint(0, 5, (batch_size,))
    for batch_idx in range(steps):
        with form(batch_idx, inputs, net):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(net(inputs), targets).backward()
            optimizer.step()
    instrument.finish()
    return net


def test_the_generic_form_exports_the_network_once_when_dlbench_asks(tmp_path: Path, monkeypatch):
    target = tmp_path / "net.onnx"
    monkeypatch.setenv(ENV_EXPORT, str(target))
    train(lambda i, x, net: instrument.op_performance_analysis_generic(i, x, net, False), steps=3)
    model = onnx.load(str(target))
    onnx.checker.check_model(model)
    assert {n.op_type for n in model.graph.node} >= {"Conv", "BatchNormalization", "Relu", "Gemm"}
    batch_dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch_dim.dim_param == "batch", "the exported batch dimension is dynamic"
    assert instrument.default_session().exported


def test_exporting_leaves_the_trained_network_as_it_would_be_without(tmp_path: Path, monkeypatch):
    reference = train(lambda i, x, net: instrument.op_performance_analysis(i, x, net))
    instrument.reset()
    monkeypatch.setenv(ENV_EXPORT, str(tmp_path / "net.onnx"))
    exported = train(lambda i, x, net: instrument.op_performance_analysis(i, x, net))
    assert (tmp_path / "net.onnx").exists()
    for (name, a), (_, b) in zip(reference.state_dict().items(), exported.state_dict().items(), strict=True):
        assert torch.equal(a, b), f"{name} changed because of the export"


def test_nothing_is_exported_unless_dlbench_asks(tmp_path: Path):
    train(lambda i, x, net: instrument.op_performance_analysis_cpu(i, x, net))
    assert not list(tmp_path.rglob("*.onnx"))
    assert not instrument.default_session().exported


def test_a_network_that_cannot_be_exported_leaves_the_reason_and_the_training_goes_on(tmp_path, monkeypatch):
    class NotExportable(ConvNet):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # ONNX has no singular value decomposition: the exporter refuses the graph
            return super().forward(x) + torch.linalg.svdvals(x[:, 0]).sum()

    target = tmp_path / "net.onnx"
    monkeypatch.setenv(ENV_EXPORT, str(target))
    train(lambda i, x, net: instrument.op_performance_analysis(i, x, net), steps=3, net=NotExportable())
    assert not target.exists()
    assert (tmp_path / "net.onnx.error").read_text().strip()
    assert len(read_profile(tmp_path / "profile" / "batches.csv")) == 3, "all three batches ran"


def test_what_ran_is_recorded_from_the_batch_the_network_and_the_script(tmp_path: Path):
    instrument.report_parameters(lr=0.1, steps=99, optimizer="sgd")
    train(lambda i, x, net: instrument.op_performance_analysis_gpu(i, x, net), steps=5, batch_size=6)
    facts = read_facts(tmp_path / "profile")
    assert facts["observed"]["batch_size"] == 6 and facts["observed"]["steps"] == 5
    assert facts["observed"]["dtype"] == "float32" and facts["observed"]["device"] == "cpu"
    assert facts["observed"]["parameter_count"] == sum(p.numel() for p in ConvNet().parameters())
    assert facts["reported"] == {"lr": 0.1, "steps": 99, "optimizer": "sgd"}
    assert "script_arguments" in facts["observed"]
    params = effective_params(facts)
    assert params["lr"] == 0.1 and params["steps"] == 5, "what was observed to run wins over what was reported"
    assert (tmp_path / "profile" / FACTS_FILE).exists()


def test_the_gpu_form_synchronizes_every_batch_and_the_cpu_form_does_not():
    instrument.op_performance_analysis_gpu(0)
    assert instrument.default_session().settings.sync_every_batch
    instrument.reset()
    instrument.op_performance_analysis_cpu(0)
    assert not instrument.default_session().settings.sync_every_batch
