"""The OpenVINO repository rewrite (asr_server/repo_builder/openvino.py): IR of the encoders on the openvino backend
serves the ONNX repository's transcripts on both pipelines."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

from asr_server.gpu.profiles import load_config
from tests.conftest import BUNDLED_REPO, ROOT
from tests.scripts.test_build_model_repo import reference, transcripts

pytest.importorskip("asr_server.backends.openvino", reason="needs the 'openvino' extra")
needs_graphs = pytest.mark.skipif(not (BUNDLED_REPO / "encoder" / "1" / "encoder.onnx").exists(),
                                  reason="model_repo has no exported graphs: run bash scripts/build_demo_repo.sh")


def pipeline_repo(tmp_path):
    repo = tmp_path / "onnx"
    shutil.copytree(BUNDLED_REPO, repo, ignore=shutil.ignore_patterns("add_sub", "identity_fp32", "__pycache__"))
    return repo


@needs_graphs
async def test_openvino_encoders_serve_the_onnx_transcripts(tmp_path, running):
    original = pipeline_repo(tmp_path)
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "openvino_repo.py"), "--repo", str(original),
                          "--out", str(tmp_path / "ov"), "--parameter", "INFERENCE_NUM_THREADS=2"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    for name in ("encoder", "streaming_encoder"):
        config = load_config(tmp_path / "ov" / name / "config.pbtxt")
        assert (config.backend, config.default_model_filename) == ("openvino", f"{name}.xml")
        assert config.parameters["INFERENCE_NUM_THREADS"].string_value == "2"
        assert "memory.enable_memory_arena_shrinkage" not in config.parameters
        assert {p.name for p in (tmp_path / "ov" / name / "1").iterdir()} == {f"{name}.xml", f"{name}.bin"}
    _, text = reference()
    assert await transcripts(running, original) == (text, text)
    assert await transcripts(running, tmp_path / "ov") == (text, text)


@needs_graphs
def test_ir_encoder_computes_what_onnxruntime_does(tmp_path):
    import onnxruntime as ort

    from asr_server.backends.openvino import ov
    from asr_server.repo_builder.openvino import convert_to_ir

    src = BUNDLED_REPO / "encoder" / "1" / "encoder.onnx"
    xml = convert_to_ir(src, tmp_path / "encoder.xml")
    rng = np.random.default_rng(0)
    feeds = {"speech": rng.standard_normal((2, 200, 80)).astype(np.float32),
             "speech_lengths": np.array([200, 150], np.int32)}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    compiled = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_NUM_THREADS": 2, "INFERENCE_PRECISION_HINT": "f32"})
    got = compiled.create_infer_request().infer(feeds).to_tuple()
    for port, array in zip(compiled.outputs, got):
        name = next(n for n in port.get_names() if n in expected)
        if array.dtype.kind == "f":
            np.testing.assert_allclose(array, expected[name], atol=2e-3, rtol=1e-3, err_msg=name)
        else:
            np.testing.assert_array_equal(array, expected[name], err_msg=name)


@needs_graphs
async def test_build_model_repo_encoder_backend_openvino(tmp_path, running):
    from tests.scripts.test_build_model_repo import MODEL_DIR

    out = tmp_path / "built"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_model_repo.py"), "--model-dir", str(MODEL_DIR),
                          "--out", str(out), "--encoder-backend", "openvino"], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    assert "encoders on openvino: encoder, streaming_encoder" in run.stdout
    for name in ("encoder", "streaming_encoder"):
        assert load_config(out / name / "config.pbtxt").backend == "openvino"
    assert load_config(out / "decoder" / "config.pbtxt").backend == "onnxruntime"
    _, text = reference()
    assert await transcripts(running, out) == (text, text)
