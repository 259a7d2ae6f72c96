"""The ASR pipelines of the bundled model in a fresh folder, for runs beside real Triton.

`pipeline_repo(folder, pipeline, onnx_as_python)` writes the repository with scripts/build_model_repo.py (which
copies model_repo's model.py files unchanged) and keeps one pipeline:
  "offline"   attention_rescoring = feature_extractor -> encoder -> scoring (+ decoder through BLS)
  "streaming" streaming_wenet (one model) and streaming_wenet_ensemble = streaming_feature_extractor -> wenet;
              their scorers run the streaming_encoder and decoder graphs themselves, or with
              `inline_graphs=False` call those models through BLS
With `onnx_as_python` the ONNX models run as python models (tests/helpers/onnx_python_shim.py), since the
Triton fetched here ships only the python backend; the streaming encoder's shim then keeps its caches itself,
per sequence, because Triton's python backend does not carry implicit state.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from asr_server.repo_builder.pipelines import BuildOptions, build
from tests.helpers.onnx_python_shim import as_python_model

ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = ROOT / "models" / "demo_en"
ONNX_DIR = MODEL_DIR / "onnx"
PIPELINES = {
    "offline": ("attention_rescoring", "feature_extractor", "encoder", "scoring", "decoder"),
    "streaming": ("streaming_wenet", "streaming_wenet_ensemble", "streaming_feature_extractor", "wenet",
                  "streaming_encoder", "decoder"),
}
ONNX_MODELS = ("encoder", "decoder", "streaming_encoder")


def exported() -> bool:
    """True when the bundled model's graphs are exported (scripts/build_demo_repo.sh)."""
    return (ONNX_DIR / "encoder.onnx").exists()


def pipeline_repo(folder: Path, pipeline: str, onnx_as_python: bool, inline_graphs: bool = True) -> Path:
    build(MODEL_DIR, ONNX_DIR, folder, BuildOptions(inline_graphs=inline_graphs))
    keep = PIPELINES[pipeline]
    for model in folder.iterdir():
        if model.name not in keep:
            shutil.rmtree(model)
        elif onnx_as_python and model.name in ONNX_MODELS:
            as_python_model(model)
    return folder


def offline_repo(folder: Path, onnx_as_python: bool) -> Path:
    return pipeline_repo(folder, "offline", onnx_as_python)
