"""TorchScript of the encoders and decoder (asr_server/repo_builder/torchscript.py) against the ONNX graphs on CPU:
traced at one batch size and length, run at others; and a repository whose graph models are TorchScript on the
pytorch backend serves the ONNX repository's transcripts. The CUDA run is in scripts/gpu_check.sh."""

from __future__ import annotations

import numpy as np
import pytest

from asr_server.gpu.engine_check import check_feeds
from tests.conftest import BUNDLED_REPO, ROOT

torch = pytest.importorskip("torch", reason="TorchScript needs torch (the 'torch' extra)")
ort = pytest.importorskip("onnxruntime")

MODEL_DIR = ROOT / "models" / "demo_en"
pytestmark = pytest.mark.skipif(not (BUNDLED_REPO / "encoder" / "1" / "encoder.onnx").exists(),
                                reason="model_repo has no exported graphs: run bash scripts/build_demo_repo.sh")
ATOL = 1e-4  # the ONNX exporter's own torch-vs-ORT tolerance (scripts/export_onnx.py --atol)


@pytest.fixture(scope="module")
def model():
    from asr_server.asr.nn.checkpoint import load_model_dir

    return load_model_dir(MODEL_DIR).model.eval()


def run_both(model, name: str, feeds: dict, traced_on: dict):
    from asr_server.repo_builder.torchscript import trace

    session = ort.InferenceSession(str(BUNDLED_REPO / name / "1" / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    module = trace(model, name, traced_on, names)
    with torch.no_grad():
        got = module(*[torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in names])
    got = [t.numpy() for t in (got if isinstance(got, (tuple, list)) else [got])]
    return session.run(None, {n: feeds[n] for n in names}), got, [o.name for o in session.get_outputs()]


def assert_same(want, got, names):
    assert len(want) == len(got)
    for name, a, b in zip(names, want, got):
        assert a.shape == b.shape and a.dtype == b.dtype, name
        if a.dtype.kind == "f":
            np.testing.assert_allclose(b, a, atol=ATOL, rtol=0, err_msg=name)
        else:
            np.testing.assert_array_equal(b, a, err_msg=name)


def test_offline_encoder_traced_on_two_short_utterances_matches_onnx_on_four_long_ones(model):
    feeds = check_feeds("encoder", BUNDLED_REPO / "encoder" / "config.pbtxt", BUNDLED_REPO / "encoder" / "1")
    short = {"speech": feeds["speech"][:2, :300].copy(),
             "speech_lengths": np.minimum(feeds["speech_lengths"][:2], 300).astype(np.int32)}
    assert feeds["speech"].shape[0] == 4 and feeds["speech"].shape[1] > 300
    assert_same(*run_both(model, "encoder", feeds, short))


def test_streaming_encoder_matches_onnx_over_two_chunks_with_real_caches(model):
    feeds = check_feeds("streaming_encoder", BUNDLED_REPO / "streaming_encoder" / "config.pbtxt",
                        BUNDLED_REPO / "encoder" / "1")
    small = {k: v[:2] for k, v in feeds.items()}
    want, got, names = run_both(model, "streaming_encoder", feeds, small)
    assert_same(want, got, names)
    # second chunk: the caches the first one returned (non-zero attention cache and mask)
    second = dict(feeds)
    for state in ("offset", "att_cache", "cnn_cache", "cache_mask"):
        second[state] = want[names.index(f"r_{state}")]
    assert second["cache_mask"].any()
    assert_same(*run_both(model, "streaming_encoder", second, small))


def test_decoder_matches_onnx(model):
    feeds = check_feeds("decoder", BUNDLED_REPO / "decoder" / "config.pbtxt", BUNDLED_REPO / "encoder" / "1")
    want, got, names = run_both(model, "decoder", feeds, {k: v[:2] for k, v in feeds.items()})
    assert_same(want, got, names)


async def test_torchscript_repository_serves_the_onnx_transcripts(model, tmp_path, running):
    from asr_server.repo_builder.torchscript import torchscript_repository
    from tests.gpu.test_trt_repository import pipeline_repo
    from tests.scripts.test_build_model_repo import reference, transcripts

    torchscript_repository(pipeline_repo(tmp_path), tmp_path / "ts", model, kind="KIND_CPU")
    assert not list((tmp_path / "ts").glob("*/1/*.onnx"))
    _, text = reference()
    assert await transcripts(running, tmp_path / "ts") == (text, text)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible to torch")
CUDA_ATOL = 1e-3  # cuDNN/cuBLAS kernels (TF32 off) against ORT's CPU kernels


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("name", ["encoder", "streaming_encoder", "decoder"])
def test_torchscript_on_cuda_matches_onnx_on_cpu(name):
    from asr_server.asr.nn.checkpoint import load_model_dir
    from asr_server.repo_builder.torchscript import trace

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    gpu_model = load_model_dir(MODEL_DIR).model.eval().to("cuda")
    feeds = check_feeds(name, BUNDLED_REPO / name / "config.pbtxt", BUNDLED_REPO / "encoder" / "1")
    session = ort.InferenceSession(str(BUNDLED_REPO / name / "1" / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    module = trace(gpu_model, name, {k: v[:2] for k, v in feeds.items()}, names)
    with torch.no_grad():
        got = module(*[torch.from_numpy(np.ascontiguousarray(feeds[n])).cuda() for n in names])
    got = [t.cpu().numpy() for t in (got if isinstance(got, (tuple, list)) else [got])]
    for output, want, value in zip([o.name for o in session.get_outputs()], session.run(None, feeds), got):
        if want.dtype.kind == "f":
            np.testing.assert_allclose(value, want, atol=CUDA_ATOL, rtol=0, err_msg=output)
        elif output in ("beam_log_probs_idx", "log_probs_idx"):  # near-ties may swap lower ranks: check the best
            assert np.mean(value[..., 0] == want[..., 0]) > 0.999, output
        else:
            np.testing.assert_array_equal(value, want, err_msg=output)


@pytest.mark.gpu
@cuda
async def test_torchscript_repository_on_kind_gpu_serves_the_onnx_transcripts(tmp_path, running):
    from asr_server.asr.nn.checkpoint import load_model_dir
    from asr_server.repo_builder.torchscript import torchscript_repository
    from tests.gpu.test_trt_repository import pipeline_repo
    from tests.scripts.test_build_model_repo import reference, transcripts

    gpu_model = load_model_dir(MODEL_DIR).model.eval().to("cuda")
    torchscript_repository(pipeline_repo(tmp_path), tmp_path / "ts", gpu_model, kind="KIND_GPU")
    _, text = reference()
    async with running(tmp_path / "ts", allow_http=False) as server:
        kinds = {g.kind for g in server.core.manager.models["encoder"].versions[1].config.instance_group}
    assert kinds == {1}  # KIND_GPU
    assert await transcripts(running, tmp_path / "ts") == (text, text)
