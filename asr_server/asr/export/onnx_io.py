"""torch.onnx.export with this project's settings, and checks and fixes of an exported graph's inputs/outputs."""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from ..nn.model import U2Model
from .options import ExportMismatch


def export_module(module: nn.Module, args: tuple, path: Path | io.BytesIO, input_names: Sequence[str],
                  output_names: Sequence[str], dynamic_axes: dict, opset: int) -> None:
    module.eval()
    with torch.no_grad(), warnings.catch_warnings():
        # the tracer warns about every Python-level shape use; parity on other shapes is the real check
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, path if isinstance(path, io.BytesIO) else str(path),
                          input_names=list(input_names), output_names=list(output_names),
                          dynamic_axes=dynamic_axes, opset_version=opset, do_constant_folding=True,
                          dynamo=False)


def check_io(path: Path | bytes, inputs: Sequence[str], outputs: Sequence[str]) -> None:
    """The graph has exactly these inputs and outputs, in this order."""
    import onnx

    m = onnx.load_from_string(path) if isinstance(path, bytes) else onnx.load(str(path))
    got_in = [v.name for v in m.graph.input]
    got_out = [v.name for v in m.graph.output]
    if got_in != list(inputs) or got_out != list(outputs):
        raise ExportMismatch(f"{path if not isinstance(path, bytes) else 'graph'}: I/O {got_in} -> {got_out}, "
                             f"expected {list(inputs)} -> {list(outputs)}")


def set_output_dims(path: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    """Declare outputs as (B, *shape) with fixed non-batch dims."""
    import onnx

    m = onnx.load(str(path))
    for out in m.graph.output:
        dims = out.type.tensor_type.shape.dim
        want = shapes[out.name]
        if len(dims) != len(want) + 1:
            raise ExportMismatch(f"{path.name}: {out.name} has rank {len(dims)}, expected {len(want) + 1}")
        for d, size in zip(list(dims)[1:], want):
            d.Clear()
            d.dim_value = int(size)
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


def dynamic_dims(path: Path) -> dict[str, list[int]]:
    """name -> the axes of that input/output that are not fixed sizes."""
    import onnx

    m = onnx.load(str(path))
    return {v.name: [i for i, d in enumerate(v.type.tensor_type.shape.dim) if not d.HasField("dim_value")]
            for v in list(m.graph.input) + list(m.graph.output)}


def half_model(model: U2Model) -> U2Model:
    import copy

    return copy.deepcopy(model).half().eval()


def float_dtype(half: bool) -> torch.dtype:
    return torch.float16 if half else torch.float32
