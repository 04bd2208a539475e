"""Shared pieces of the training benchmarks: command line, setup, instrumentation fallback, ONNX export.

The scripts run standalone (``python TrainingBenchmarks/resnet_cifar.py --steps 20``); dlbench is used
when importable, otherwise each batch runs under a no-op context.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

try:
    from dlbench.instrument import finish as finish_instrumentation
    from dlbench.instrument import op_performance_analysis, report_parameters
except ImportError:  # plain training, no dlbench around

    class _NoInstrumentation:
        def __init__(self, batch_idx: int, *args: Any) -> None:
            self.batch_idx = batch_idx

        def __enter__(self) -> _NoInstrumentation:
            return self

        def __exit__(self, *exc: object) -> bool:
            return False

        def log(self, **values: float) -> None:
            pass

    def op_performance_analysis(batch_idx: int, *args: Any) -> Any:  # type: ignore[misc]
        return _NoInstrumentation(batch_idx)

    def finish_instrumentation() -> None:  # type: ignore[misc]
        pass

    def report_parameters(**params: Any) -> None:  # type: ignore[misc]
        pass


def float_dtype(name: str) -> str:
    """``--dtype``: any floating dtype torch knows by that name (dlbench passes one of its own list)."""
    if not isinstance(getattr(torch, name, None), torch.dtype) or not getattr(torch, name).is_floating_point:
        raise argparse.ArgumentTypeError(f"{name!r} is not a torch floating dtype (float32, bfloat16, float16)")
    return name


#: ``--amp``: the dtype ``torch.autocast`` lowers its ops to (dlbench's ``amp=`` key, ``core/autocast.py``)
AMP_DTYPES = {"none": None, "bf16": "bfloat16", "fp16": "float16"}


def true_or_false(text: str) -> bool:
    """``--channels-last true|false`` (dlbench passes its ``channels_last`` key), or the bare flag."""
    lowered = text.strip().lower()
    if lowered not in ("true", "false", "1", "0", "yes", "no"):
        raise argparse.ArgumentTypeError(f"{text!r}: use true or false")
    return lowered in ("true", "1", "yes")


def base_parser(description: str, *, batch_size: int, lr: float, steps: int = 30) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--batch-size", type=int, default=batch_size, help="samples per step")
    parser.add_argument("--lr", type=float, default=lr, help="learning rate")
    parser.add_argument("--steps", type=int, default=steps, help="training steps (batches)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--dtype", default="float32", type=float_dtype, help="dtype of the weights and activations")
    parser.add_argument(
        "--amp",
        default="none",
        choices=tuple(AMP_DTYPES),
        help="mixed precision: torch.autocast around forward and loss (fp16 with a GradScaler)",
    )
    parser.add_argument(
        "--channels-last",
        type=true_or_false,
        nargs="?",
        const=True,
        default=False,
        help="the model and its image inputs in channels_last",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic data and the weights")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    parser.add_argument("--data-batches", type=int, default=4, help="distinct synthetic batches, cycled")
    parser.add_argument("--quiet", action="store_true", help="print only the final line")
    parser.add_argument("--export-onnx", metavar="PATH", help="export the model to ONNX and exit (no training)")
    return parser


def setup(args: argparse.Namespace) -> torch.device:
    """Apply threads and seed; return the device (``auto`` picks CUDA when present)."""
    for name in ("batch_size", "steps", "data_batches"):
        if getattr(args, name) < 1:
            sys.exit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.threads < 0:
        sys.exit(f"--threads must be >= 0, got {args.threads}")
    if args.amp != "none" and args.dtype != "float32":
        sys.exit(f"--amp {args.amp} lowers a float32 model's ops; with --dtype {args.dtype} use --amp none")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(f"--device {args.device}: CUDA is not available here")
    return torch.device(device)


def export_onnx(
    model: torch.nn.Module,
    example: torch.Tensor,
    path: str,
    *,
    input_name: str = "input",
    output_name: str = "output",
) -> Path:
    """Export ``model`` with a dynamic batch dimension; BatchNormalization stays a node (not folded)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.eval()
    torch.onnx.export(
        model,
        (example,),
        str(out),
        input_names=[input_name],
        output_names=[output_name],
        dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}},
        opset_version=17,
        dynamo=False,
        training=torch.onnx.TrainingMode.PRESERVE,
        do_constant_folding=False,
    )
    return out


def _placed(x: torch.Tensor, dtype: torch.dtype, layout: torch.memory_format) -> torch.Tensor:
    """A batch's input in the step's dtype (floating inputs only) and, for an image batch, memory format."""
    x = x.to(dtype) if x.is_floating_point() else x
    return x.contiguous(memory_format=layout) if x.dim() == 4 else x


def train(
    model: torch.nn.Module,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    args: argparse.Namespace,
    name: str,
    network: torch.nn.Module | None = None,
) -> list[float]:
    """The ordinary training loop, each step wrapped in ``op_performance_analysis`` (which is handed the network
    and the batch, so dlbench can export the network on request; ``network`` when ``model`` wraps it, as
    DistributedDataParallel does); returns the losses."""
    report_parameters(**{k: v for k, v in vars(args).items() if k not in ("quiet", "export_onnx")})
    dtype = getattr(torch, args.dtype)
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    model.to(dtype)  # the whole step in this dtype: weights, activations, gradients, optimizer state
    model.to(memory_format=layout)  # a no-op for weights of rank below 4
    batches = [(_placed(x, dtype, layout), y) for x, y in batches]
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    device_type = batches[0][0].device.type
    lower = AMP_DTYPES[args.amp]
    # float16's small range needs the loss scaled (and the gradients unscaled, inf/NaN steps skipped)
    scaler = torch.amp.GradScaler(device_type) if args.amp == "fp16" else None
    model.train()
    losses = []
    start = time.perf_counter()
    for batch_idx in range(args.steps):
        inputs, targets = batches[batch_idx % len(batches)]
        with op_performance_analysis(batch_idx, inputs, network or model) as batch:
            step_start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type, dtype=getattr(torch, lower or "float32"), enabled=lower is not None):
                loss = loss_fn(model(inputs), targets)
            if scaler is None:
                loss.backward()
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            loss_value = loss.item()  # synchronizes, so the step time includes the device work
            batch.log(loss=loss_value, samples=len(inputs))
        losses.append(loss_value)
        if not args.quiet:
            print(f"{name} step {batch_idx} loss {loss_value:.4f} time {time.perf_counter() - step_start:.4f} s")
    total = time.perf_counter() - start
    finish_instrumentation()
    print(
        f"{name}: {args.steps} steps in {total:.3f} s, {args.steps * args.batch_size / total:.1f} samples/s, "
        f"loss {losses[0]:.4f} -> {losses[-1]:.4f}"
    )
    return losses
