"""The eval-mode kernels an inference prediction times, and the torch module onnx2torch builds of a whole
model, checked numerically against PyTorch's own eval modules; training sweeps keep their kernels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from dlbench.backends.onnxruntime.canonical import canonical_node
from dlbench.backends.torch import kernels as tk
from dlbench.backends.torch.graph import UnsupportedModel, torch_module
from dlbench.backends.whole_model.run import agreement, model_feeds, onnxruntime_engine, torch_engine
from dlbench.core.glue import InvalidParameters
from dlbench.onnx.extract import extract_operations
from dlbench.onnx.rebatch import rebatched_model

CPU, F64 = torch.device("cpu"), torch.float64
ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
POOL = dict(N=2, C=3, H=9, W=8, kernel_shape_0=3, kernel_shape_1=2, pads_0=1, pads_1=1, pads_2=1, pads_3=1,
            strides_0=2, strides_1=2)  # fmt: skip


def captured(fn) -> dict[str, object]:
    return dict(zip(fn.__code__.co_freevars, (cell.cell_contents for cell in fn.__closure__ or ()), strict=True))


def test_inference_maxpool_returns_no_indices_and_matches_the_eval_module() -> None:
    torch.manual_seed(0)
    fn = tk.KERNELS["MaxPool"]({**POOL, "mode": 2}, CPU, F64)
    x = captured(fn)["x"]
    result = fn()
    assert isinstance(result, torch.Tensor)  # no max positions kept for a backward pass
    module = nn.MaxPool2d((3, 2), stride=2, padding=1).eval()
    torch.testing.assert_close(result, module(x), rtol=0, atol=0)


def test_training_maxpool_keeps_its_indices() -> None:
    result = tk.KERNELS["MaxPool"]({**POOL, "mode": 0}, CPU, F64)()
    assert isinstance(result, tuple) and result[1].dtype == torch.int64


def test_inference_average_pool_matches_the_eval_module() -> None:
    fn = tk.KERNELS["AveragePool"]({**POOL, "mode": 2}, CPU, F64)
    module = nn.AvgPool2d((3, 2), stride=2, padding=1, count_include_pad=False).eval()
    torch.testing.assert_close(fn(), module(captured(fn)["x"]), rtol=1e-12, atol=1e-12)


def test_inference_batchnorm_uses_the_running_statistics_of_the_eval_module() -> None:
    fn = tk.KERNELS["BatchNormalization"](dict(N=2, C=3, H=4, W=5, epsilon=1e-3, momentum=0.9, mode=2), CPU, F64)
    names = captured(fn)
    module = nn.BatchNorm2d(3, eps=1e-3).double().eval()
    module.running_mean.copy_(names["mean"])
    module.running_var.copy_(names["var"])
    before = names["mean"].clone()
    torch.testing.assert_close(fn(), module(names["x"]), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(names["mean"], before)  # eval: the running statistics are not updated


def test_onnxruntime_serves_the_inference_pooling_but_no_backward() -> None:
    assert canonical_node("MaxPool", {**POOL, "mode": 2}).op_type == "MaxPool"
    with pytest.raises(InvalidParameters, match="forward pass"):
        canonical_node("MaxPool", {**POOL, "mode": 1})


def test_inference_extraction_asks_for_the_eval_kernels_and_training_for_todays() -> None:
    path = ZOO / "light_resnet50.onnx"

    def modes(training: bool) -> dict[str, set[int]]:
        found: dict[str, set[int]] = {}
        for op in extract_operations(path, 1, training=training).operations():
            if op.op_type in ("BatchNormalization", "MaxPool", "AveragePool"):
                found.setdefault(op.op_type, set()).add(int(dict(op.params)["mode"]))
        return found

    assert modes(False) == {"BatchNormalization": {2}, "MaxPool": {2}, "AveragePool": {2}}
    assert modes(True) == {"BatchNormalization": {0}, "MaxPool": {0}, "AveragePool": {0}}


class SmallCnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
            nn.Dropout(0.5), nn.Conv2d(8, 8, 3, stride=2, groups=2), nn.BatchNorm2d(8), nn.ReLU(),
            nn.AvgPool2d(2), nn.Flatten(), nn.Linear(8 * 2 * 2, 5), nn.Softmax(-1),
        )  # fmt: skip
        for module in self.features:
            if isinstance(module, nn.BatchNorm2d):  # running statistics other than the initial 0 and 1
                module.running_mean.uniform_(-1, 1)
                module.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


def test_the_torch_module_of_an_exported_eval_module_computes_what_the_module_does(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = SmallCnn().eval()
    x = torch.randn(2, 3, 21, 21)
    path = tmp_path / "cnn.onnx"
    torch.onnx.export(module, (x,), str(path), input_names=["x"], dynamo=False, opset_version=17,
                      do_constant_folding=False)  # fmt: skip
    converted, ran = torch_module(onnx.load(str(path)))
    with torch.inference_mode():
        out, expected = converted(x), module(x)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    assert ran["BatchNormalization"] == 2 and ran["MaxPool"] == 1  # the eval kernels run, not folded away
    assert "Dropout" not in ran  # inference Dropout is the identity
    # a stand-in for a missing torchvision lives only while onnx2torch is imported: a library looking torchvision
    # up afterwards in the same process (transformers does, with find_spec) finds what is really installed
    import importlib.util
    import sys

    stand_in = sys.modules.get("torchvision")
    assert stand_in is None or getattr(stand_in, "__spec__", None) is not None
    importlib.util.find_spec("torchvision")  # raised "torchvision.__spec__ is None" with the stand-in left behind


def test_an_exported_transformer_encoder_runs_as_a_module_and_agrees_with_onnxruntime(tmp_path: Path) -> None:
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2).eval()
    x = torch.randn(2, 8, 32)
    path = tmp_path / "encoder.onnx"
    torch.onnx.export(encoder, (x,), str(path), input_names=["x"], dynamo=False, opset_version=17)
    model = onnx.load(str(path))
    assert "Mod" in {node.op_type for node in model.graph.node}  # what the hand-written interpreter failed on
    feeds = {"x": x.numpy()}
    _, ort_facts = onnxruntime_engine(model, feeds, 1)
    _, torch_facts = torch_engine(model, feeds, 1)
    with torch.inference_mode():
        expected = encoder(x).numpy()
    assert agreement([expected], torch_facts["outputs"]) < 1e-5
    assert agreement(ort_facts["outputs"], torch_facts["outputs"]) < 1e-5
    assert torch_facts["torch_module"] == "onnx2torch" and "Mod" not in torch_facts["torch_nodes_per_call"]


def test_a_model_the_converter_cannot_build_is_refused_naming_the_reason() -> None:
    from onnx import TensorProto, helper

    pool = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], pads=[0, 0, 1, 1], ceil_mode=1)
    graph = helper.make_graph([pool], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])  # fmt: skip
    with pytest.raises(UnsupportedModel, match="asymmetric pads is converted for 2-D and 3-D, floor mode"):
        torch_module(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    hardmax = helper.make_graph([helper.make_node("Hardmax", ["x"], ["y"])], "g", list(graph.input),
                                list(graph.output))  # fmt: skip
    with pytest.raises(UnsupportedModel, match="no converter for Hardmax"):
        torch_module(helper.make_model(hardmax, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("name", ["squeezenet", "inception_v2"])
def test_the_torch_module_and_an_onnxruntime_session_agree_on_zoo_models(name: str) -> None:
    model = rebatched_model(ZOO / f"light_{name}.onnx", 2)
    feeds = model_feeds(model)
    _, ort_facts = onnxruntime_engine(model, feeds, 1)
    _, torch_facts = torch_engine(model, feeds, 1)
    shapes = [o.shape for o in ort_facts["outputs"]]
    assert [o.shape for o in torch_facts["outputs"]] == shapes and shapes[0][:2] == (2, 1000)
    assert agreement(ort_facts["outputs"], torch_facts["outputs"]) < 1e-4


def test_feeds_refuse_an_open_dimension() -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])  # fmt: skip
    with pytest.raises(ValueError, match="open dimension"):
        model_feeds(helper.make_model(graph))


def test_a_flatten_on_another_axis_and_a_folded_gather_compute_what_onnxruntime_does() -> None:
    from onnx import TensorProto, helper, numpy_helper

    # Flatten(axis=2) of a [2, 3, 4] input is [6, 4] (onnx2torch's own Flatten flattens from axis 1 whatever
    # the attribute); the GatherElements depends on weights only and is folded before the conversion
    data = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "data")
    index = numpy_helper.from_array(np.array([[2, 0, 1, 1]], dtype=np.int64), "index")
    nodes = [helper.make_node("Flatten", ["x"], ["f"], axis=2),
             helper.make_node("GatherElements", ["data", "index"], ["g"], axis=0),
             helper.make_node("Add", ["f", "g"], ["y"])]  # fmt: skip
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 4])],
                              [data, index])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)}
    _, ort_facts = onnxruntime_engine(model, feeds, 1)
    _, torch_facts = torch_engine(model, feeds, 1)
    assert torch_facts["outputs"][0].shape == (6, 4)
    assert agreement(ort_facts["outputs"], torch_facts["outputs"]) < 1e-6
    assert "GatherElements" not in torch_facts["torch_nodes_per_call"]  # folded: it depends on weights only


def aten_calls(fn) -> list[str]:
    from torch.profiler import profile

    with torch.inference_mode(), profile() as prof:
        fn()
    return sorted(e.name for e in prof.events() if e.name.startswith("aten::"))


@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool"])
def test_inference_pooling_with_asymmetric_pads_is_timed_as_the_torch_engine_runs_it(op_type: str) -> None:
    from onnx import TensorProto, helper

    # alexnet's and inception's pools pad one row and column at the end: the engine pads in every call
    params = {**POOL, "pads_0": 0, "pads_1": 0, "pads_2": 1, "pads_3": 1, "mode": 2}
    fn = tk.KERNELS[op_type](params, CPU, torch.float32)
    x = captured(fn)["x"]
    assert tuple(x.shape) == (2, 3, 9, 8)  # unpadded: the padding is part of the timed call
    node = helper.make_node(op_type, ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 2], pads=[0, 0, 1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])  # fmt: skip
    module, _ = torch_module(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with torch.inference_mode():
        expected = module(x)
    torch.testing.assert_close(fn(), expected, rtol=1e-6, atol=1e-6)
    assert aten_calls(fn) == aten_calls(lambda: module(x))  # the same aten operators, the pad among them
