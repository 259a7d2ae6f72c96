"""Tiny ONNX models and model folders for tests, written with `onnx.helper` (no downloads).

Shapes are lists of ints and strings; a string is a named dynamic dim ("batch").
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Union

import onnx
from onnx import TensorProto, helper

OPSET = 17  # supported by every onnxruntime this project allows
IR_VERSION = 8
Shape = Sequence[Union[int, str]]


def write_model(
    path: Path,
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[tuple[str, int, Shape]],
    outputs: Sequence[tuple[str, int, Shape]],
    initializers: Sequence[onnx.TensorProto] = (),
) -> Path:
    """Check and save a one-graph model; inputs/outputs are (name, TensorProto type, shape)."""
    graph = helper.make_graph(
        list(nodes),
        "test_graph",
        [helper.make_tensor_value_info(name, elem, list(shape)) for name, elem, shape in inputs],
        [helper.make_tensor_value_info(name, elem, list(shape)) for name, elem, shape in outputs],
        initializer=list(initializers),
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="asr_server tests"
    )
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def identity_model(
    path: Path,
    elem_type: int = TensorProto.FLOAT,
    shape: Shape = ("batch", 3),
    input_name: str = "INPUT0",
    output_name: str = "OUTPUT0",
) -> Path:
    """OUTPUT0 = INPUT0."""
    node = helper.make_node("Identity", [input_name], [output_name])
    return write_model(path, [node], [(input_name, elem_type, shape)], [(output_name, elem_type, shape)])


def add_sub_model(path: Path, elem_type: int = TensorProto.FLOAT, shape: Shape = ("batch", 4)) -> Path:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (Triton's classic example model)."""
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
    ]
    ios = [("INPUT0", elem_type, shape), ("INPUT1", elem_type, shape)]
    return write_model(path, nodes, ios, [("OUTPUT0", elem_type, shape), ("OUTPUT1", elem_type, shape)])


def reshape_to_matrix_model(path: Path) -> Path:
    """Y = X + 1 for X of shape [batch, 2, 3] (a model to pair with a config `reshape`)."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    node = helper.make_node("Add", ["X", "one"], ["Y"])
    shape = ["batch", 2, 3]
    return write_model(path, [node], [("X", TensorProto.FLOAT, shape)], [("Y", TensorProto.FLOAT, shape)], [one])


def model_folder(
    repo: Path, name: str, config_text: Optional[str], write_onnx=identity_model, version: int = 1, **kwargs
) -> Path:
    """<repo>/<name>/config.pbtxt (skipped when config_text is None) and <version>/model.onnx."""
    model_dir = Path(repo) / name
    model_dir.mkdir(parents=True, exist_ok=True)
    if config_text is not None:
        (model_dir / "config.pbtxt").write_text(config_text)
    write_onnx(model_dir / str(version) / "model.onnx", **kwargs)
    return model_dir
