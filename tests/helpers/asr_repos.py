"""The offline ASR ensemble of model_repo for the bundled model, in a fresh folder, for runs beside real Triton.

`offline_repo(folder, onnx_as_python=True)` writes attention_rescoring = feature_extractor -> encoder -> scoring
(+ decoder through BLS) with scripts/build_model_repo.py and model_repo's model.py files unchanged; with
`onnx_as_python` the encoder and decoder run as python models (tests/helpers/onnx_python_shim.py), since the
Triton fetched here ships only the python backend. The streaming models are left out: their encoder keeps
its caches as implicit state, which Triton offers to the onnxruntime, tensorrt and pytorch backends only.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tests.helpers.onnx_python_shim import as_python_model

ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = ROOT / "models" / "demo_en"
ONNX_DIR = MODEL_DIR / "onnx"
PYTHON_MODELS = ("feature_extractor", "scoring")
STREAMING_MODELS = ("streaming_encoder", "streaming_feature_extractor", "wenet", "streaming_wenet")


def exported() -> bool:
    """True when the bundled model's graphs are exported (scripts/build_demo_repo.sh)."""
    return (ONNX_DIR / "encoder.onnx").exists()


def offline_repo(folder: Path, onnx_as_python: bool) -> Path:
    sys.path.insert(0, str(ROOT / "scripts"))
    import build_model_repo

    build_model_repo.build(MODEL_DIR, ONNX_DIR, folder, beam=10, chunk_size=16, right_context=6, subsampling=4,
                           max_batch=64)
    for name in STREAMING_MODELS:
        shutil.rmtree(folder / name)
    for name in PYTHON_MODELS:
        shutil.copyfile(ROOT / "model_repo" / name / "1" / "model.py", folder / name / "1" / "model.py")
    if onnx_as_python:
        for name in ("encoder", "decoder"):
            as_python_model(folder / name)
    return folder
