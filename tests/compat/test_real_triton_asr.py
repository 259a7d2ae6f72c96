"""model_repo's ASR python models (feature_extractor, scoring, with the decoder called through BLS) in a real
NVIDIA Triton 2.51, side by side with our server on the same folders.

The offline `attention_rescoring` ensemble is written by scripts/build_model_repo.py for the bundled model and
served unchanged, except that `encoder` and `decoder` run as python models (tests/helpers/onnx_python_shim.py):
the Triton fetched here ships only the python backend. The python models import asr_server, kaldi-native-fbank,
sentencepiece and numba as they would in a Triton image with asr-server installed (scripts/get_triton.sh).
Both servers must give the same transcripts, and our own onnxruntime backend the same again. The streaming
ensemble is not checked here: its encoder keeps its caches as implicit state, which Triton offers to the
onnxruntime, tensorrt and pytorch backends only.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from client.audio import load_audio
from tests.conftest import ROOT
from tests.helpers import real_triton as rt
from tests.helpers.asr_repos import exported, offline_repo

DATA = ROOT / "tests" / "data" / "demo_utts"
START_S = 60  # five python stubs importing numba take a few seconds each

pytestmark = [
    pytest.mark.skipif(not rt.available(), reason=rt.SKIP_REASON),
    pytest.mark.skipif(not exported(),
                       reason="the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh"),
    pytest.mark.timeout(240),
]


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> dict[str, Path]:
    return {"shim": offline_repo(tmp_path_factory.mktemp("shim"), onnx_as_python=True),
            "onnxruntime": offline_repo(tmp_path_factory.mktemp("onnxruntime"), onnx_as_python=False)}


def utterances() -> list[tuple[str, np.ndarray]]:
    rows = [line.split() for line in (DATA / "wav.scp").read_text().splitlines()]
    return [(utt, load_audio(DATA / path).samples) for utt, path in rows[:6]]


def transcribe(url: str, samples: np.ndarray) -> str:
    with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
        wav = grpcclient.InferInput("WAV", [1, samples.size], "FP32")
        wav.set_data_from_numpy(samples.reshape(1, -1).astype(np.float32))
        lens = grpcclient.InferInput("WAV_LENS", [1, 1], "INT32")
        lens.set_data_from_numpy(np.array([[samples.size]], dtype=np.int32))
        result = client.infer("attention_rescoring", [wav, lens], client_timeout=30)
        return result.as_numpy("TRANSCRIPTS").reshape(-1)[0].decode()


def test_offline_ensemble_gives_the_same_transcripts_in_real_triton(repos):
    items = utterances()
    with rt.real_triton(repos["shim"], ready_timeout_s=START_S) as triton:
        theirs = [transcribe(triton.grpc_url, samples) for _, samples in items]
    with rt.asr_server_process(repos["shim"], ready_timeout_s=START_S) as ours:
        ours_shim = [transcribe(ours.grpc_url, samples) for _, samples in items]
    with rt.asr_server_process(repos["onnxruntime"], ready_timeout_s=START_S) as ours:
        ours_ort = [transcribe(ours.grpc_url, samples) for _, samples in items]
    assert all(theirs), theirs  # a real transcript for every utterance, not an empty string
    assert theirs == ours_shim == ours_ort
