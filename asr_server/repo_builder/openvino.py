"""Rewrite an ONNX model repository (scripts/build_model_repo.py's) so that its graph models run on OpenVINO.

The chosen graph models (by default the two encoders, the bulk of the compute) get OpenVINO IR beside their
ONNX file (`<model>.xml` + `<model>.bin`, FP32 weights so that outputs stay those of the ONNX graph) and
`backend: "openvino"` with `default_model_filename: "<model>.xml"`. Tensor names, types, dims, batching and
implicit state are unchanged: OpenVINO reads the same graph, and the sequence batcher feeds the same states.
onnxruntime-only parameters are dropped; Triton's openvino parameters can be added (`parameters`).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterable, Mapping, Optional

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.asr.serving.inline_onnx import repository_without_inline_graphs
from asr_server.gpu.profiles import load_config

ENCODER_MODELS = ("encoder", "streaming_encoder")
# onnxruntime-only parameters that mean nothing to OpenVINO.
ORT_PARAMETERS = ("memory.enable_memory_arena_shrinkage", "intra_op_thread_count", "inter_op_thread_count",
                  "execution_mode")


def convert_to_ir(onnx_path: Path, xml_path: Path) -> Path:
    """ONNX -> OpenVINO IR (FP32 weights). Imported lazily: openvino is an optional extra."""
    from asr_server.backends.openvino import read_model, save_ir

    return save_ir(read_model(Path(onnx_path), Path(onnx_path).stem), xml_path, batch_layout=False)


def openvino_config(config: mc.ModelConfig, parameters: Optional[Mapping[str, str]] = None) -> mc.ModelConfig:
    """The same model on the openvino backend: IR file, no onnxruntime parameters, optional OpenVINO ones."""
    rewritten = mc.ModelConfig()
    rewritten.CopyFrom(config)
    rewritten.backend = "openvino"
    rewritten.platform = ""
    stem = Path(config.default_model_filename or "model.onnx").stem
    rewritten.default_model_filename = f"{stem}.xml"
    for key in ORT_PARAMETERS:
        if key in rewritten.parameters:
            del rewritten.parameters[key]
    for key, value in (parameters or {}).items():
        rewritten.parameters[key].string_value = value
    return rewritten


def rewrite_repository(
    source: Path,
    target: Path,
    models: Iterable[str] = ENCODER_MODELS,
    parameters: Optional[Mapping[str, str]] = None,
) -> list[str]:
    """Copy `source` to `target` with `models` converted to OpenVINO IR on the openvino backend.

    Returns the models rewritten (those of `models` the repository has)."""
    source, target = Path(source), Path(target)
    if target.exists():
        raise FileExistsError(f"{target} exists; choose a new folder")
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    return switch_to_openvino(target, models, parameters)


def switch_to_openvino(
    repo: Path, models: Iterable[str] = ENCODER_MODELS, parameters: Optional[Mapping[str, str]] = None
) -> list[str]:
    """In place: `models` of `repo` get OpenVINO IR instead of their ONNX files (removed: the IR is the
    model) and the openvino backend. Returns the models switched."""
    rewritten = []
    for name in models:
        config_path = Path(repo) / name / "config.pbtxt"
        if not config_path.exists():
            continue
        config = load_config(config_path)
        if config.backend == "openvino":
            continue
        onnx_name = config.default_model_filename or "model.onnx"
        new_config = openvino_config(config, parameters)
        for version_dir in sorted(p for p in (Path(repo) / name).iterdir() if p.is_dir() and p.name.isdigit()):
            onnx_path = version_dir / onnx_name
            if onnx_path.exists():
                convert_to_ir(onnx_path, version_dir / new_config.default_model_filename)
                onnx_path.unlink()
        config_path.write_text(text_format.MessageToString(new_config))
        rewritten.append(name)
    if rewritten:  # a scorer that ran the ONNX graphs itself now calls the OpenVINO models
        repository_without_inline_graphs(repo)
    return rewritten
