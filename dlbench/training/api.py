"""The call forms of the original tool, all returning the same context manager around one training batch::

    with op_performance_analysis(batch_idx):                              # time; profile chosen batches
    with op_performance_analysis_generic(batch_idx, input, net, cuda):    # ... and hand over the network
    with op_performance_analysis_cpu(batch_idx, input, net, cuda):        # the CPU form: no device sync
    with op_performance_analysis_gpu(batch_idx, input, net, cuda):        # the GPU form: device work included

Given the network and a batch, the context manager records what the script runs with (batch size, dtype,
device) and exports the network to ONNX when dlbench asks for it (``DLBENCH_EXPORT_ONNX``), so a script
written for the original tool needs no code of its own for either. ``report_parameters`` lets a script say
which arguments it used, so the run's params are the script's and not dlbench's defaults.
"""

from __future__ import annotations

import atexit
import os
import sys
import warnings
from typing import Any

from dlbench.training import serve
from dlbench.training.export import export_network, requested_path
from dlbench.training.instrument import BatchScope, ProfileSession, ProfileSettings

_DEFAULT_SESSION: ProfileSession | None = None


def default_session() -> ProfileSession | None:
    """The session behind :func:`op_performance_analysis` (None before its first call)."""
    return _DEFAULT_SESSION


def _session(
    warmup: int | None = None,
    batches: int | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    sync_every_batch: bool | None = None,
) -> ProfileSession:
    """The default session; the first call fixes the settings (arguments, else ``DLBENCH_PROFILE_*``), a
    later call with different explicit settings finishes that session and starts a new one."""
    global _DEFAULT_SESSION
    session = _DEFAULT_SESSION
    if session is None or not (warmup is None and batches is None and out_dir is None and sync_every_batch is None):
        settings = ProfileSettings.resolve(warmup, batches, out_dir, sync_every_batch)
        if session is None or session.settings != settings:
            fresh = ProfileSession(settings)
            if session is not None:
                fresh.facts = session.facts  # the same script: what it reported and ran with carries over
                session.finish()
            else:
                atexit.register(finish)
            session = _DEFAULT_SESSION = fresh
    return session


def op_performance_analysis(
    batch_idx: int,
    input: Any = None,  # noqa: A002 - the original tool's parameter name
    net: Any = None,
    cuda: bool | None = None,
    *,
    warmup: int | None = None,
    batches: int | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    sync_every_batch: bool | None = None,
) -> BatchScope:
    """Time this batch, and profile it per operator if it is one of the chosen ones.

    ``input`` and ``net`` (optional) are the batch's input and the network: dlbench records the batch size
    and dtypes from them and exports the network when asked. ``cuda=True`` synchronizes the device around
    every batch, so each batch's wall time includes its GPU work."""
    session = _session(warmup, batches, out_dir, True if cuda and sync_every_batch is None else sync_every_batch)
    if input is not None or net is not None:
        _observe(session, input, net, cuda)
    return BatchScope(session, batch_idx)


def _observe(session: ProfileSession, batch: Any, net: Any, cuda: bool | None) -> None:
    """Record the run's facts and export the network once, before the batch's timer starts."""
    first = not session.facts.observed
    session.facts.observe(batch, net, cuda)
    path = requested_path()
    if first and path is not None and net is not None and batch is not None and not session.exported:
        session.exported = export_network(net, batch, path)
    served = serve.requested_path()
    if first and served is not None and net is not None and batch is not None:
        serve.serve_network(net, batch, served)


def op_performance_analysis_generic(batch_idx: int, input: Any, net: Any, cuda: bool = False) -> BatchScope:  # noqa: A002
    """The original tool's generic form: the batch index, the batch's input, the network, whether on CUDA."""
    return op_performance_analysis(batch_idx, input, net, cuda)


def op_performance_analysis_cpu(
    batch_idx: int,
    input: Any = None,  # noqa: A002
    net: Any = None,
    cuda: bool | None = None,
    **settings: Any,
) -> BatchScope:
    """The original tool's CPU form, with the generic form's four arguments.

    As in the original tool, the form decides, not ``cuda``: batches are timed on the host without
    synchronizing a device. ``cuda=True`` (a script that moved to a GPU but kept this form) is therefore
    ignored, and said so once: its device work would be missing from each batch's wall time."""
    _warn_form_overrides("op_performance_analysis_cpu", cuda, True, "op_performance_analysis_gpu")
    return op_performance_analysis(batch_idx, input, net, False, **settings)


def op_performance_analysis_gpu(
    batch_idx: int,
    input: Any = None,  # noqa: A002
    net: Any = None,
    cuda: bool | None = None,
    **settings: Any,
) -> BatchScope:
    """The original tool's GPU form, with the generic form's four arguments (its ImageNet script calls
    ``op_performance_analysis_gpu(batch_idx, input, net, cuda)``).

    The form decides, not ``cuda``: the device is synchronized around every batch, so its wall time includes
    the GPU work. ``cuda=False`` is ignored, and said so once where a CUDA device is present (without one the
    synchronization is a no-op, so nothing differs)."""
    _warn_form_overrides("op_performance_analysis_gpu", cuda, False, "op_performance_analysis_cpu")
    return op_performance_analysis(batch_idx, input, net, True, **settings)


_WARNED_FORMS: set[str] = set()


def _warn_form_overrides(form: str, cuda: bool | None, contradicting: bool, other: str) -> None:
    """One warning per form and process when ``cuda`` says the opposite of what the form does."""
    if cuda is None or bool(cuda) != contradicting or form in _WARNED_FORMS:
        return
    torch = sys.modules.get("torch")
    if not contradicting and not (torch is not None and torch.cuda.is_available()):
        return  # the GPU form without a device: its synchronization changes nothing, so nothing to say
    _WARNED_FORMS.add(form)
    warnings.warn(
        f"dlbench: {form}(..., cuda={bool(cuda)}): the form decides, as in the original tool, so cuda is ignored "
        f"and {'no device is' if form.endswith('_cpu') else 'the device is'} synchronized around each batch; "
        f"use {other} or op_performance_analysis_generic(batch_idx, input, net, cuda) to follow cuda",
        UserWarning,
        stacklevel=3,
    )


def report_parameters(**params: Any) -> None:
    """Record the arguments the script actually uses (e.g. ``report_parameters(**vars(args))``); dlbench logs
    them as the run's params."""
    _session().facts.report(params)


def finish() -> None:
    """Finish the default session now (it also runs at interpreter exit)."""
    if _DEFAULT_SESSION is not None:
        _DEFAULT_SESSION.finish()


def reset() -> None:
    """Finish and forget the default session, so the next call starts afresh (for tests and loops)."""
    global _DEFAULT_SESSION
    finish()
    _DEFAULT_SESSION = None
