"""An instrumented loop records the mixed precision and memory format it ran with, whatever its script: the
autocast regions it entered, the GradScaler that scaled its loss, whether its inputs and weights were in
channels_last, as ``run_facts.json`` and the run's effective params."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dlbench.training.facts import effective_params
from dlbench.training.instrument import ProfileSession, ProfileSettings


def train(tmp_path: Path, amp: str, channels_last: bool, steps: int = 3) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 3))
    inputs, targets = torch.randn(2, 3, 6, 6), torch.tensor([0, 2])
    if channels_last:
        model, inputs = model.to(memory_format=torch.channels_last), inputs.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    lower = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    scaler = torch.amp.GradScaler("cpu") if amp == "fp16" else None
    session = ProfileSession(ProfileSettings(warmup=1, batches=1, out_dir=tmp_path))
    session.facts.observe(inputs, model, False)  # as op_performance_analysis(batch_idx, inputs, model) does
    for batch_idx in range(steps):
        with session.batch(batch_idx):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=lower or torch.float32, enabled=lower is not None):
                loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            if scaler is None:
                loss.backward()
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
    session.finish()
    return json.loads((tmp_path / "run_facts.json").read_text())


@pytest.mark.parametrize(("amp", "channels_last"), [("none", False), ("bf16", True), ("fp16", False)])
def test_the_amp_scaler_and_layout_a_loop_ran_are_recorded(tmp_path: Path, amp: str, channels_last: bool) -> None:
    facts = train(tmp_path, amp, channels_last)
    ran = effective_params(facts)
    assert (ran["amp"], ran["grad_scaler"], ran["channels_last"]) == (amp, amp == "fp16", channels_last)
    expected = {"bf16": "bfloat16", "fp16": "float16"}.get(amp)
    assert facts["autocast"] == ([{"device": "cpu", "dtype": expected, "entered": 3}] if expected else [])
    assert facts["grad_scaler"] == ([{"device": "cpu", "scaled": 3}] if amp == "fp16" else [])
