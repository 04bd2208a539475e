"""The embedded PyTorch kernels: they compute the right thing, per mode, and obey the protocol."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from dlbench.backends.torch import kernels as tk
from dlbench.core.descriptors import DESCRIPTORS
from dlbench.core.glue import NON_DIFFERENTIABLE
from dlbench.operators.protocol import parse_output, write_input

CPU, F32 = torch.device("cpu"), torch.float32


def conv_params(**overrides: float) -> dict[str, float]:
    base = dict(
        N=2,
        C=4,
        H=9,
        W=8,
        K=6,
        kernel_shape_0=3,
        kernel_shape_1=2,
        pads_0=1,
        pads_1=0,
        pads_2=2,
        pads_3=1,
        strides_0=2,
        strides_1=1,
        dilations_0=1,
        dilations_1=2,
        group=2,
        mode=0,
    )
    base.update(overrides)
    return base


def test_conv_forward_output_shape_follows_asymmetric_pads_strides_dilations_groups() -> None:
    out = tk.conv(conv_params(), CPU, F32)()
    # H: (9 + 1 + 2 - 3) // 2 + 1 = 5 ; W: (8 + 0 + 1 - (2*(2-1)+1)) // 1 + 1 = 7
    assert out.shape == (2, 6, 5, 7)


@pytest.mark.parametrize("mode", [1, 2])
def test_conv_backward_modes_compute_the_autograd_gradients(mode: int) -> None:
    torch.manual_seed(0)
    p = conv_params(pads_0=1, pads_1=1, pads_2=1, pads_3=1, mode=mode)
    x = torch.randn(2, 4, 9, 8, requires_grad=True)
    w = torch.randn(6, 2, 3, 2, requires_grad=True)
    y = F.conv2d(x, w, None, (2, 1), (1, 1), (1, 2), 2)
    g = torch.randn_like(y)
    y.backward(g)
    expected = x.grad if mode == 1 else w.grad
    grads = torch.ops.aten.convolution_backward(
        g, x.detach(), w.detach(), None, [2, 1], [1, 1], [1, 2], False, [0, 0], 2, [mode == 1, mode == 2, False]
    )
    got = grads[0] if mode == 1 else grads[1]
    torch.testing.assert_close(got, expected)
    # and the kernel's timed callable computes that gradient of its own tensors
    fn = tk.conv(p, CPU, F32)
    x_own, w_own = (t.clone().requires_grad_() for t in fn.inputs)
    F.conv2d(x_own, w_own, None, (2, 1), (1, 1), (1, 2), 2).backward(fn.grad_outputs[0])
    result = fn()
    torch.testing.assert_close(result[0] if mode == 1 else result[1], x_own.grad if mode == 1 else w_own.grad)


@pytest.mark.parametrize(("trans_a", "trans_b", "batch"), [(0, 0, 1), (1, 0, 1), (0, 1, 3), (1, 1, 2)])
def test_gemm_shapes_follow_transposes_and_batch(trans_a: int, trans_b: int, batch: int) -> None:
    out = tk.gemm(dict(M=5, K=7, N=3, transA=trans_a, transB=trans_b, batch=batch), CPU, F32)()
    assert out.shape == ((batch, 5, 3) if batch > 1 else (5, 3))


def test_every_operator_and_mode_runs_on_small_shapes() -> None:
    small = dict(
        N=2,
        C=4,
        H=8,
        W=8,
        K=4,
        kernel_shape_0=2,
        kernel_shape_1=2,
        pads_0=0,
        pads_1=0,
        pads_2=1,
        pads_3=1,
        strides_0=2,
        strides_1=2,
        dilations_0=1,
        dilations_1=1,
        group=1,
        M=4,
        transA=0,
        transB=0,
        batch=1,
        epsilon=1e-5,
        momentum=0.9,
        N_b=1,
        C_b=4,
        H_b=1,
        W_b=1,
        axis=3,
        ops=4,
        tensors=2,
        elements=64,
    )
    modes = {"Conv": (0, 1, 2), "BatchNormalization": (0, 1, 2), "Gemm": (0,), "MatMul": (0,), "Add": (0,)}
    modes["FrameworkOverhead"] = (0, 1, 2)
    modes.update({op_type: (0,) for op_type in NON_DIFFERENTIABLE})  # boolean results have no gradient
    for op_type, kernel in tk.KERNELS.items():
        for mode in modes.get(op_type, (0, 1)):
            result = kernel({**small, "mode": mode}, CPU, F32)()
            if op_type in IN_PLACE or (op_type == "FrameworkOverhead" and mode == 2):
                # an in-place update (its values: test_optimizer_and_loss_kernels); the autograd engine's backward
                # accumulates into the leaf's gradient (test_training_ops)
                assert result is None
                continue
            tensors = [t for t in (result if isinstance(result, tuple | list) else [result]) if t is not None]
            assert tensors, f"{op_type} mode {mode} returned no tensor"
            for tensor in tensors:
                assert isinstance(tensor, torch.Tensor) and tensor.numel() > 0, (op_type, mode)
                if tensor.is_floating_point():
                    assert bool(torch.isfinite(tensor).all()), f"{op_type} mode {mode}: non-finite values"


#: Kernels that update their tensors in place and return nothing: the optimizers' steps and zero_grad.
IN_PLACE = frozenset({"SGD", "Adam", "AdamW", "RMSprop", "ZeroGrad", "AmpUpdateScale"})


def test_relu_backward_is_threshold_backward_of_the_output() -> None:
    closure = tk.relu(dict(N=1, C=2, H=3, W=4, mode=1), CPU, F32)
    own = dict(zip(closure.__code__.co_freevars, (c.cell_contents for c in closure.__closure__), strict=True))
    grad_in = closure()
    # the incoming gradient where the forward output is positive, zero where relu cut the input off
    torch.testing.assert_close(grad_in, torch.where(own["y"] > 0, own["grad"], torch.zeros_like(own["grad"])))
    assert bool((own["y"] == 0).any()) and bool((own["y"] > 0).any())  # both cases are exercised


def run_kernel(op_type: str, rows: list[tuple[int, list[float]]], tmp_path: Path) -> tuple[int, Path, str]:
    path = write_input(tmp_path / f"{op_type}.csv", rows)
    env = {
        **os.environ,
        "DLBENCH_MIN_REPS": "2",
        "DLBENCH_MIN_TIME_S": "0",
        "DLBENCH_WARMUP": "1",
        "DLBENCH_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "dlbench.backends.torch", op_type, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, path.with_name(f"{op_type}_out.csv"), done.stderr


def test_protocol_run_reports_bad_rows_by_id_and_keeps_the_rest(tmp_path: Path) -> None:
    good = [2, 4, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
    bad_groups = [2, 4, 8, 8, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, 0, 0]  # K=3 not divisible by group=2
    too_big = [2, 4, 2, 2, 4, 5, 5, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0]  # 5x5 kernel on a 2x2 input
    negative = [-2, 4, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]
    assert len(good) == len(DESCRIPTORS["Conv"])
    code, out, stderr = run_kernel(
        "Conv", [(0, good), (1, bad_groups), (2, too_big), (3, negative), (4, good)], tmp_path
    )
    assert code == 0
    parsed = parse_output(out, range(5))
    assert sorted(parsed.rows) == [0, 4] and parsed.unit == "ms"
    assert parsed.rows[0].reps >= 2 and parsed.rows[0].min_ms <= parsed.rows[0].median_ms
    assert "id 1: Conv cannot run: C=4 and K=3 must be divisible by group=2" in stderr
    assert "id 2: Conv cannot run: kernel [5, 5]" in stderr
    assert "id 3: Conv cannot run: N=-2.0 must be >= 1" in stderr


def test_wrong_parameter_count_is_reported_per_row(tmp_path: Path) -> None:
    code, out, stderr = run_kernel("Relu", [(0, [1, 2, 3, 4, 0]), (1, [1, 2, 3])], tmp_path)
    assert sorted(parse_output(out, [0, 1]).rows) == [0]
    assert "id 1: Relu cannot run: 3 parameters, Relu takes 5: N, C, H, W, mode" in stderr


def test_usage_error_for_unknown_operator(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dlbench.backends.torch", "Dance", "x.csv"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "usage" in done.stderr
