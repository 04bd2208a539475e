"""What mixed precision a script ran, seen from inside its process: every ``torch.autocast`` it entered
enabled (device and dtype) and every ``GradScaler`` that scaled a loss, recorded by wrapping the two classes'
methods once per process, for any script (the user's own too). The evaluation logs what they say as the
run's ``amp`` and ``grad_scaler`` params; the dtypes each operator ran in come from the profile itself
(:mod:`dlbench.training.trace`)."""

from __future__ import annotations

import functools
from typing import Any

from dlbench.core.autocast import AMP_DTYPES

#: autocast's lower-precision dtype -> the ``amp=`` value that names it
AMP_OF_DTYPE = {dtype: amp for amp, dtype in AMP_DTYPES.items() if dtype}

#: The recorders of this process's open sessions (the latest records); the wrappers go in once.
_ACTIVE: list[PrecisionRecorder] = []
_INSTALLED: list[bool] = []


def _install_once() -> None:
    """``autocast.__enter__`` and ``GradScaler.scale`` wrapped (the classes every spelling derives from:
    ``torch.autocast``, ``torch.cpu.amp.autocast``, ``torch.amp.GradScaler("cpu")``, ``torch.cuda.amp``)."""
    if _INSTALLED:
        return
    _INSTALLED.append(True)
    from torch.amp.autocast_mode import autocast
    from torch.amp.grad_scaler import GradScaler
    from torch.compiler import is_compiling

    enter, scale = autocast.__enter__, GradScaler.scale

    @functools.wraps(enter)
    def __enter__(self: Any) -> Any:
        if _ACTIVE and not is_compiling():  # never in what torch.compile traces (its dtypes: the profile)
            _ACTIVE[-1].on_autocast(self)
        return enter(self)

    @functools.wraps(scale)
    def scale_(self: Any, outputs: Any) -> Any:
        if _ACTIVE and not is_compiling():
            _ACTIVE[-1].on_scale(self)
        return scale(self, outputs)

    autocast.__enter__ = __enter__  # type: ignore[method-assign]
    GradScaler.scale = scale_  # type: ignore[method-assign]


class PrecisionRecorder:
    """Installed in a script's process by the instrumentation: the autocast regions it entered enabled, per
    device and dtype, and the GradScalers that scaled a loss, per device."""

    def __init__(self) -> None:
        self.autocast: dict[tuple[str, str], int] = {}
        self.scalers: dict[str, int] = {}

    def install(self) -> None:
        _install_once()
        if self not in _ACTIVE:
            _ACTIVE.append(self)

    def uninstall(self) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)

    def on_autocast(self, region: Any) -> None:
        try:
            if getattr(region, "_enabled", False):
                key = (str(region.device), str(region.fast_dtype).removeprefix("torch."))
                self.autocast[key] = self.autocast.get(key, 0) + 1
        except Exception:  # noqa: BLE001, S110 - recording must never break the script's training
            pass

    def on_scale(self, scaler: Any) -> None:
        try:
            if scaler.is_enabled():
                device = str(getattr(scaler, "_device", "cuda"))
                self.scalers[device] = self.scalers.get(device, 0) + 1
        except Exception:  # noqa: BLE001, S110 - recording must never break the script's training
            pass

    def facts(self) -> dict[str, Any]:
        """For ``run_facts.json``: ``autocast`` (the regions entered, a list), ``grad_scaler`` (the scalers'
        devices and calls), and in ``observed`` what the run's params say: ``amp`` (none, bf16, fp16: the
        dtype of the region entered most) and ``grad_scaler``."""
        regions = [{"device": d, "dtype": t, "entered": n} for (d, t), n in self.autocast.items()]
        regions.sort(key=lambda r: -r["entered"])
        amp = AMP_OF_DTYPE.get(regions[0]["dtype"], regions[0]["dtype"]) if regions else "none"
        return {
            "autocast": regions,
            "grad_scaler": [{"device": d, "scaled": n} for d, n in self.scalers.items()],
            "observed": {"amp": amp, "grad_scaler": bool(self.scalers)},
        }
