"""What an instrumented script actually ran with: the parameters it reports itself and what the context manager
sees of its batches and network (batch size, dtypes, device, threads, steps). dlbench logs these as the
run's params instead of its own defaults, which the script may not have taken."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FACTS_FILE = "run_facts.json"


def _first_tensor(batch: Any) -> Any:
    if hasattr(batch, "shape") and hasattr(batch, "dtype"):
        return batch
    if isinstance(batch, list | tuple):
        for item in batch:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _memory_format(tensor: Any) -> str:
    """``channels_last`` for an image tensor laid out so (and not also contiguous), else ``contiguous``."""
    import torch

    layout = torch.channels_last if tensor.dim() == 4 else torch.channels_last_3d
    return (
        "channels_last" if tensor.is_contiguous(memory_format=layout) and not tensor.is_contiguous() else "contiguous"
    )


@dataclass
class RunFacts:
    """Collected while the script runs; :meth:`as_dict` is what ``run_facts.json`` holds."""

    reported: dict[str, Any] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)

    def report(self, params: dict[str, Any]) -> None:
        self.reported.update({str(k): _plain(v) for k, v in params.items()})

    def observe(self, batch: Any, net: Any, cuda: bool | None) -> None:
        """Record the batch size, input dtype, the network's parameter dtype, size and device, and whether the
        image input or the network's convolution weights are in channels_last (once)."""
        if self.observed:
            return
        import torch

        tensor = _first_tensor(batch)
        if tensor is not None and len(tensor.shape):
            self.observed["batch_size"] = int(tensor.shape[0])
            self.observed["input_dtype"] = _dtype_name(tensor.dtype)
            self.observed["device"] = tensor.device.type
            if tensor.dim() in (4, 5):
                self.observed["input_memory_format"] = _memory_format(tensor)
        if net is not None and hasattr(net, "parameters"):
            params = list(net.parameters())
            if params:
                self.observed["dtype"] = _dtype_name(params[0].dtype)
                self.observed["device"] = params[0].device.type
                self.observed["parameter_count"] = int(sum(p.numel() for p in params))
                images = [p for p in params if p.dim() in (4, 5)]
                if images:
                    self.observed["weights_memory_format"] = _memory_format(images[0])
        formats = (self.observed.get("input_memory_format"), self.observed.get("weights_memory_format"))
        self.observed["channels_last"] = "channels_last" in formats
        if cuda is not None:
            self.observed["cuda"] = bool(cuda)
        self.observed["threads"] = torch.get_num_threads()
        self.observed["script_arguments"] = shlex.join(sys.argv[1:])

    def as_dict(self, steps: int) -> dict[str, Any]:
        """The facts at the end of the run; the thread count is taken again here, so a script that changed it
        after its first batch (or never handed one over) is seen (``threads_at_end``)."""
        observed = {**self.observed, "steps": steps}
        torch = sys.modules.get("torch")  # the script imported it; a script that did not ran no torch threads
        if torch is not None and hasattr(torch, "get_num_threads"):
            now = torch.get_num_threads()
            observed.setdefault("threads", now)
            if observed["threads"] != now:
                observed["threads_at_end"] = now
        return {"reported": dict(self.reported), "observed": observed}


def _plain(value: Any) -> Any:
    """JSON-safe: numbers, strings, booleans and None as they are, anything else as its text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def write_facts(out_dir: Path, facts: dict[str, Any]) -> Path:
    path = out_dir / FACTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(facts, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def read_facts(out_dir: Path) -> dict[str, Any]:
    """The facts a finished script left in its profile folder ({} when it wrote none)."""
    path = out_dir / FACTS_FILE
    try:
        facts = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return facts if isinstance(facts, dict) else {}


def effective_params(facts: dict[str, Any]) -> dict[str, Any]:
    """One flat view for the run's params: the script's reported arguments, overridden by what was observed
    to run (batch size, steps, dtype, device, threads), which is the truth where the two differ."""
    observed = dict(facts.get("observed", {}))
    reported = {str(k).replace("-", "_"): v for k, v in facts.get("reported", {}).items()}
    return {**reported, **observed}


def script_params(facts: dict, already: dict[str, object]) -> dict[str, object]:
    """What the script ran with (reported, else observed), minus names dlbench already logged itself."""
    return {k: v for k, v in effective_params(facts).items() if k not in already}
