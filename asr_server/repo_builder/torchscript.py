"""TorchScript of the encoders and the decoder, for the pytorch backend on CUDA (Triton's pytorch_libtorch).

The modules traced are the ONNX exporter's own wrappers (asr.export.graphs.OfflineEncoderGraph, StreamingEncoderGraph,
decoder_graph), so the TorchScript and ONNX graphs compute the same function with the same tensor names and
order: a `model.pt` can replace a `*.onnx` in a repository with only `backend: "pytorch"` changed.
Traced on real features (engine_check.check_feeds); tests/gpu/test_torchscript.py runs them on other
batch sizes and lengths against the ONNX graphs on CPU.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np


def graph_module(model, name: str, beam: int):
    """The exporter's wrapper module for `name` (encoder, streaming_encoder, decoder)."""
    from asr_server.asr.export import graphs

    if name == "encoder":
        return graphs.OfflineEncoderGraph(model, beam)
    if name == "streaming_encoder":
        return graphs.StreamingEncoderGraph(model, beam)
    if name == "decoder":
        return graphs.decoder_graph(model, model.model_cfg.ctc_weight, model.model_cfg.reverse_weight)
    raise ValueError(f"no TorchScript graph for '{name}'")


def trace(model, name: str, feeds: dict[str, np.ndarray], input_names: list[str], beam: int = 10):
    """torch.jit.trace of the wrapper on `feeds` (inputs in `input_names` order); eval mode, no grad."""
    import torch

    module = graph_module(model.eval(), name, beam).eval()
    # Traced on the device it will run on: the tracer records devices of tensors made inside forward().
    device = next(model.parameters()).device
    example = tuple(torch.from_numpy(np.ascontiguousarray(feeds[n])).to(device) for n in input_names)
    # The tracer warns at every Python branch on a tensor (masks, cache sizes): expected here, since the
    # branches depend on shapes fixed per graph; the parity tests run other batch sizes and lengths instead.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        return torch.jit.trace(module, example, check_trace=False)


def save(module, path: Path) -> None:
    import torch

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(module, str(path))


def torchscript_repository(src: Path, dst: Path, model, kind: str = "KIND_GPU", beam: int = 10,
                           parameters: dict[str, str] | None = None) -> None:
    """Copy ONNX repository `src` to `dst` with encoder, streaming_encoder and decoder as TorchScript
    (`backend: "pytorch"`, `model.pt`, instance groups of `kind`), traced from `model` on real features on
    the model's device (put it on CUDA for KIND_GPU). `parameters`: the pytorch backend's config parameters
    for those three models (e.g. DISABLE_OPTIMIZED_EXECUTION)."""
    import shutil

    import onnxruntime as ort
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    from asr_server.asr.serving.inline_onnx import repository_without_inline_graphs
    from asr_server.gpu.engine_check import check_feeds
    from asr_server.gpu.profiles import load_config

    shutil.copytree(src, dst)
    for name in ("encoder", "streaming_encoder", "decoder"):
        config = load_config(dst / name / "config.pbtxt")
        graph = dst / name / "1" / config.default_model_filename
        inputs = [i.name for i in ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"]).get_inputs()]
        feeds = check_feeds(name, src / name / "config.pbtxt", src / "encoder" / "1")
        save(trace(model, name, feeds, inputs, beam), dst / name / "1" / "model.pt")
        graph.unlink()
        config.backend, config.platform, config.default_model_filename = "pytorch", "", "model.pt"
        for key in list(config.parameters):
            del config.parameters[key]  # onnxruntime's parameters mean nothing to torch
        for key, value in (parameters or {}).items():
            config.parameters[key].string_value = value
        for group in config.instance_group:
            group.kind = mc.ModelInstanceGroup.Kind.Value(kind)
        (dst / name / "config.pbtxt").write_text(text_format.MessageToString(config))
    repository_without_inline_graphs(dst)  # a scorer that ran the ONNX graphs itself calls the new models
