"""All four call forms of the original tool take its four positional arguments (batch_idx, input, net, cuda):
the CPU and GPU forms inherit the generic form's constructor there, and its ImageNet script calls
``op_performance_analysis_gpu(batch_idx, input, net, cuda)``. The form decides what ``cuda`` would; a
contradicting ``cuda`` is said once, never silently."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from helpers import REPO, clean_env

from dlbench import instrument
from dlbench.training.facts import read_facts
from dlbench.training.instrument import ENV_BATCHES, ENV_DIR, ENV_SYNC, ENV_WARMUP
from dlbench.training.profile import read_profile

#: Written like the original tool's ImageNet example: argparse, a ``cuda`` flag, the GPU form called with the
#: four arguments of the generic one; the CPU form with them too. Only the import line names dlbench.
IMAGENET_STYLE_SCRIPT = """\
import argparse

import torch
from torch import nn

from dlbench.instrument import op_performance_analysis_cpu, op_performance_analysis_gpu

parser = argparse.ArgumentParser()
parser.add_argument("--form", choices=["cpu", "gpu"], default="gpu")
parser.add_argument("--batches", type=int, default=6)
args = parser.parse_args()
cuda = torch.cuda.is_available()
device = torch.device("cuda" if cuda else "cpu")
torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10)).to(device)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()
input, target = torch.randn(4, 3, 8, 8, device=device), torch.randint(0, 10, (4,), device=device)
form = op_performance_analysis_gpu if args.form == "gpu" else op_performance_analysis_cpu
for batch_idx in range(args.batches):
    with form(batch_idx, input, net, cuda if args.form == "gpu" else True):
        optimizer.zero_grad()
        criterion(net(input), target).backward()
        optimizer.step()
print("trained", args.batches)
"""


def run_script(tmp_path: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """``python imagenet_style.py ARGS`` as its user runs it, with dlbench's profile window in the environment."""
    script = tmp_path / "imagenet_style.py"
    script.write_text(IMAGENET_STYLE_SCRIPT)
    env = clean_env(PYTHONPATH=str(REPO), **{ENV_DIR: str(tmp_path / "profile"), ENV_WARMUP: "2", ENV_BATCHES: "1"})
    return subprocess.run(
        [sys.executable, str(script), *arguments], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("form", ["gpu", "cpu"])
def test_a_script_calling_the_form_with_four_arguments_trains_and_is_profiled(tmp_path: Path, form: str):
    result = run_script(tmp_path, "--form", form, "--batches", "6")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "trained 6" in result.stdout
    assert len(read_profile(tmp_path / "profile" / "batches.csv")) == 6
    assert list((tmp_path / "profile").glob("batch_*_ops.csv")), "the chosen batch was profiled per operator"
    facts = read_facts(tmp_path / "profile")
    assert facts["observed"]["batch_size"] == 4
    warnings_said = result.stderr.count("the form decides")
    if form == "cpu":  # cuda=True handed to the CPU form in each of the 6 batches: said once
        assert warnings_said == 1, result.stderr[-3000:]
        assert "op_performance_analysis_cpu(..., cuda=True)" in result.stderr
    else:  # cuda=torch.cuda.is_available(): never contradicts the GPU form where it matters
        assert warnings_said == 0, result.stderr[-3000:]


@pytest.fixture
def fresh_session(monkeypatch, tmp_path: Path):
    for name in (ENV_SYNC, "MLFLOW_RUN_ID", "DLBENCH_EXPORT_ONNX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(ENV_DIR, str(tmp_path / "profile"))
    monkeypatch.setenv(ENV_WARMUP, "0")
    monkeypatch.setenv(ENV_BATCHES, "1")
    monkeypatch.setattr("dlbench.training.api._WARNED_FORMS", set())
    instrument.reset()
    yield
    instrument.reset()


FORMS = {
    "op_performance_analysis": None,
    "op_performance_analysis_generic": None,
    "op_performance_analysis_cpu": False,
    "op_performance_analysis_gpu": True,
}


@pytest.mark.parametrize("name", FORMS)
@pytest.mark.parametrize("cuda", [False, True])
def test_every_form_takes_the_four_arguments_and_the_form_decides_the_synchronization(fresh_session, name, cuda):
    net, batch = torch.nn.Linear(3, 2), torch.randn(5, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch_idx in range(3):
            with getattr(instrument, name)(batch_idx, batch, net, cuda):
                net(batch).sum().backward()
    settings = instrument.default_session().settings
    decided = FORMS[name]
    assert settings.sync_every_batch == (cuda if decided is None else decided)
    said = [w for w in caught if "the form decides" in str(w.message)]
    # the GPU form told cuda=False says so only where a device makes the synchronization matter
    matters = name != "op_performance_analysis_gpu" or torch.cuda.is_available()
    assert len(said) == (1 if decided is not None and decided != cuda and matters else 0)
    if said:
        assert said[0].filename == __file__, "the warning points at the script's line, not dlbench's"
    instrument.finish()
    assert read_facts(Path(settings.out_dir))["observed"]["batch_size"] == 5


def test_the_cpu_and_gpu_forms_keep_their_keyword_settings(fresh_session, tmp_path: Path):
    with instrument.op_performance_analysis_cpu(0, None, None, None, warmup=1, batches=2, out_dir=tmp_path / "x"):
        pass
    settings = instrument.default_session().settings
    assert (settings.warmup, settings.batches, Path(settings.out_dir)) == (1, 2, tmp_path / "x")
