"""The TensorRT repository rewrite (asr_server/repo_builder/tensorrt.py) and the tensorrt backend's load errors.

The INT32 ONNX twin has the TensorRT repository's configs (every narrowed tensor) over ONNX graphs with Cast
nodes, so it runs here on CPU: it must give the original repository's transcripts on both pipelines.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from asr_server.backends.base import ModelContext, backend_class
from asr_server.errors import ServerError
from asr_server.gpu.profiles import load_config
from asr_server.repo_builder.tensorrt import int32_twin, rewrite_repository
from tests.conftest import BUNDLED_REPO
from tests.scripts.test_build_model_repo import reference, transcripts

needs_graphs = pytest.mark.skipif(not (BUNDLED_REPO / "encoder" / "1" / "encoder.onnx").exists(),
                                  reason="model_repo has no exported graphs: run bash scripts/build_demo_repo.sh")
NARROWED = {"encoder": {"outputs": ["beam_log_probs_idx"], "inputs": []},
            "decoder": {"outputs": ["best_index"], "inputs": []},
            "scoring": {"outputs": [], "inputs": ["batch_log_probs_idx"]},
            "streaming_encoder": {"outputs": ["log_probs_idx", "r_offset"], "inputs": ["offset"]}}


def pipeline_repo(tmp_path):
    """model_repo without its toy models, so the servers load only the ASR pipelines."""
    import shutil
    repo = tmp_path / "onnx"
    shutil.copytree(BUNDLED_REPO, repo, ignore=shutil.ignore_patterns("add_sub", "identity_fp32", "__pycache__"))
    return repo


@needs_graphs
async def test_int32_twin_serves_the_original_transcripts(tmp_path, running):
    original = pipeline_repo(tmp_path)
    changed = rewrite_repository(original, tmp_path / "twin", mode="onnx_int32")
    assert changed == NARROWED
    twin_state = load_config(tmp_path / "twin" / "streaming_encoder" / "config.pbtxt").sequence_batching.state[0]
    assert (twin_state.input_name, twin_state.data_type) == ("offset", 8)  # TYPE_INT32
    _, text = reference()
    assert await transcripts(running, original) == (text, text)
    assert await transcripts(running, tmp_path / "twin") == (text, text)


@needs_graphs
def test_int32_twin_graph_computes_what_the_original_does(tmp_path):
    src = BUNDLED_REPO / "encoder" / "1" / "encoder.onnx"
    twin = tmp_path / "encoder.onnx"
    int32_twin(src, twin, inputs=(), outputs=("beam_log_probs_idx",))
    assert {o.name: o.type.tensor_type.elem_type for o in onnx.load(str(twin)).graph.output}["beam_log_probs_idx"] \
        == onnx.TensorProto.INT32
    rng = np.random.default_rng(0)
    feeds = {"speech": rng.standard_normal((2, 200, 80)).astype(np.float32),
             "speech_lengths": np.array([200, 150], np.int32)}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    a = ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"]).run(None, feeds)
    b = ort.InferenceSession(str(twin), options, providers=["CPUExecutionProvider"]).run(None, feeds)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert b[-1].dtype == np.int32


@needs_graphs
def test_tensorrt_rewrite_configs(tmp_path):
    plans = {}
    for name in ("encoder", "streaming_encoder", "decoder"):
        plans[name] = tmp_path / f"{name}.plan"
        plans[name].write_bytes(b"not an engine")  # the rewrite copies plans; it never reads them
    rewrite_repository(pipeline_repo(tmp_path), tmp_path / "trt", plans=plans, gpus=(0,))
    for name in plans:
        config = load_config(tmp_path / "trt" / name / "config.pbtxt")
        assert (config.backend, config.default_model_filename) == ("tensorrt", f"{name}.plan")
        assert not (tmp_path / "trt" / name / "1" / f"{name}.onnx").exists()
        assert (tmp_path / "trt" / name / "1" / f"{name}.plan").read_bytes() == b"not an engine"
        assert [(g.kind, list(g.gpus)) for g in config.instance_group] == [(1, [0])]  # KIND_GPU
        assert "memory.enable_memory_arena_shrinkage" not in config.parameters
    # The python models and ensembles are untouched, except the input an ensemble feeds from a narrowed output,
    # and the streaming scorer, which now calls the engines through BLS instead of running the ONNX graphs.
    rewritten, bundled = (load_config(folder / "wenet" / "config.pbtxt") for folder in (tmp_path / "trt", BUNDLED_REPO))
    assert "encoder_onnx" in bundled.parameters and "decoder_onnx" in bundled.parameters
    for key in ("encoder_onnx", "decoder_onnx"):
        del bundled.parameters[key]
    assert rewritten == bundled


def test_tensorrt_backend_refuses_to_load_without_tensorrt_or_gpu(tmp_path):
    try:
        import tensorrt  # noqa: F401
        import torch
        if torch.cuda.is_available():
            pytest.skip("TensorRT and a GPU are present: the load-error path cannot be reached here")
    except ImportError:
        pass
    cls = backend_class("tensorrt")
    config = load_config(BUNDLED_REPO / "encoder" / "config.pbtxt")
    context = ModelContext(name="encoder", version=1, config=config, model_dir=tmp_path, version_dir=tmp_path,
                           instance_kind="KIND_GPU")
    with pytest.raises(ServerError, match=r"unable to load model 'encoder': the tensorrt backend needs"):
        cls(context).load()
