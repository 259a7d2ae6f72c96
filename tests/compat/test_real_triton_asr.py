"""model_repo's ASR python models in a real NVIDIA Triton 2.51, side by side with our server on the same folders.

Both pipelines are written by scripts/build_model_repo.py for the bundled model and served unchanged, except
that the ONNX models run as python models (tests/helpers/onnx_python_shim.py): the Triton fetched here ships
only the python backend. The python models import asr_server, kaldi-native-fbank, sentencepiece and numba as
they would in a Triton image with asr-server installed (scripts/get_triton.sh links them where the stub looks).

- offline `attention_rescoring` (feature_extractor -> encoder -> scoring, decoder through BLS): the same
  transcripts in Triton, in ours on the same folders, and in ours on the onnxruntime backend.
- streaming, both layouts: `streaming_wenet` (one python model: fbank + scorer, the encoder and decoder
  graphs run inside it with onnxruntime, as built by default) and `streaming_wenet_ensemble`
  (streaming_feature_extractor -> wenet). The "shim" repository is built with --streaming-bls, so there the
  scorers call streaming_encoder and decoder through BLS with correlation ids and START/END flags: Triton's
  python backend cannot hold the encoder's caches as implicit state (Triton feeds a python model the initial
  state every time and drops the state it returns; implicit state is an onnxruntime/tensorrt/pytorch backend
  feature, and the fetched Triton has none of them), so the encoder's shim keeps the caches per sequence
  itself. Partial and final transcripts must be the same in Triton and in ours, on both repositories and both
  layouts: ours with the real onnxruntime encoder holding its caches as implicit state included.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from asr_client.audio import load_audio
from tests.conftest import ROOT
from tests.helpers import real_triton as rt
from asr_client.streaming import StreamingClient, StreamOptions
from tests.helpers.asr_repos import exported, offline_repo, pipeline_repo

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


@pytest.fixture(scope="module")
def streaming_repos(tmp_path_factory) -> dict[str, Path]:
    return {"shim": pipeline_repo(tmp_path_factory.mktemp("stream_shim"), "streaming", onnx_as_python=True,
                                  inline_graphs=False),
            "inline": pipeline_repo(tmp_path_factory.mktemp("stream_inline"), "streaming", onnx_as_python=True),
            "onnxruntime": pipeline_repo(tmp_path_factory.mktemp("stream_ort"), "streaming", onnx_as_python=False,
                                         inline_graphs=False)}


def stream_all(url: str, items, chunk_ms: float, model: str = "streaming_wenet") -> list[tuple[str, list[str]]]:
    """(final transcript, partial transcripts) per utterance, two streams at a time on one connection."""
    async def run():
        async with StreamingClient(url, StreamOptions(chunk_ms=chunk_ms, model=model)) as client:
            results = []
            for pair in range(0, len(items), 2):
                results += await asyncio.gather(*(client.transcribe(s) for _, s in items[pair:pair + 2]))
            return [(r.text, [p.text for p in r.partials]) for r in results]

    return asyncio.run(run())


def test_streaming_gives_the_same_partials_and_transcripts_in_real_triton(streaming_repos):
    """Both layouts (one streaming_wenet model; the ensemble of its steps) through every server, each server
    started once for both (a start costs about 5 s)."""
    items = utterances()[:4]
    layouts = ("streaming_wenet", "streaming_wenet_ensemble")
    got = {}
    for repo in ("shim", "inline"):
        with rt.real_triton(streaming_repos[repo], ready_timeout_s=START_S) as triton:
            for layout in layouts:
                got["triton", repo, layout] = stream_all(triton.grpc_url, items, 640, layout)
    for repo in ("shim", "inline", "onnxruntime"):
        with rt.asr_server_process(streaming_repos[repo], ready_timeout_s=START_S) as ours:
            for layout in layouts:
                got["ours", repo, layout] = stream_all(ours.grpc_url, items, 640, layout)
    for layout in layouts:
        theirs = got["triton", "shim", layout]
        assert all(text and len(partials) >= 2 for text, partials in theirs), (layout, theirs)
        same_layout = {key: result for key, result in got.items() if key[2] == layout}
        assert all(result == theirs for result in same_layout.values()), same_layout


ACCUMULATOR_CONFIG = """name: "accumulator"
backend: "python"
max_batch_size: 1
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zeros" } } ]
}
"""
ACCUMULATOR_PY = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            total = (pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
                     + pb_utils.get_input_tensor_by_name(request, "INPUT_STATE").as_numpy())
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("OUTPUT_STATE", total)]))
        return responses
"""


def test_real_triton_python_backend_does_not_carry_implicit_state(tmp_path):
    """Why the streaming encoder's shim keeps its own caches: a python model with implicit state gets the
    initial state on every request of a sequence in Triton 2.51 (the state it returns is dropped). Should a
    later Triton carry it (1, 2, 3), the shim's own state could go."""
    (tmp_path / "accumulator" / "1").mkdir(parents=True)
    (tmp_path / "accumulator" / "config.pbtxt").write_text(ACCUMULATOR_CONFIG)
    (tmp_path / "accumulator" / "1" / "model.py").write_text(ACCUMULATOR_PY)
    with rt.real_triton(tmp_path, ready_timeout_s=START_S) as triton:
        with contextlib.closing(grpcclient.InferenceServerClient(triton.grpc_url)) as client:
            totals = []
            for step in range(3):
                value = grpcclient.InferInput("INPUT", [1, 1], "INT32")
                value.set_data_from_numpy(np.ones((1, 1), dtype=np.int32))
                result = client.infer("accumulator", [value], sequence_id=7, sequence_start=step == 0,
                                      sequence_end=step == 2)
                totals.append(int(result.as_numpy("OUTPUT").reshape(-1)[0]))
    assert totals == [1, 1, 1]


def details(url: str, samples: np.ndarray, parameters) -> dict:
    import json

    with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
        wav = grpcclient.InferInput("WAV", [1, samples.size], "FP32")
        wav.set_data_from_numpy(samples.reshape(1, -1).astype(np.float32))
        lens = grpcclient.InferInput("WAV_LENS", [1, 1], "INT32")
        lens.set_data_from_numpy(np.array([[samples.size]], dtype=np.int32))
        outputs = [grpcclient.InferRequestedOutput(n) for n in ("TRANSCRIPTS", "DETAILS")]
        result = client.infer("attention_rescoring", [wav, lens], outputs=outputs, parameters=parameters,
                              client_timeout=30)
        return json.loads(result.as_numpy("DETAILS").reshape(-1)[0])


def test_details_output_and_request_parameters_through_the_ensemble_in_real_triton(repos):
    """DETAILS is an ensemble output in Triton too, and Triton hands the ensemble request's
    parameters (details, hotwords) to its steps, so words and times come back the same as from ours."""
    _, samples = utterances()[0]
    with rt.real_triton(repos["shim"], ready_timeout_s=START_S) as triton:
        theirs = details(triton.grpc_url, samples, {"details": True})
        theirs_plain = details(triton.grpc_url, samples, None)
    with rt.asr_server_process(repos["shim"], ready_timeout_s=START_S) as ours:
        ours_full = details(ours.grpc_url, samples, {"details": True})
    assert theirs == ours_full and theirs["words"]
    assert set(theirs_plain) == {"text", "segment", "final"}
