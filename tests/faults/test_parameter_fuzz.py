"""Every request parameter the ASR models and the server read, with values of every type and edge (NaN, inf,
huge, negative, empty, unicode, long): each request is answered OK or INVALID_ARGUMENT, and the server lives
and transcribes correctly afterwards (hotwords_score=nan used to kill it with SIGSEGV)."""

from __future__ import annotations

import itertools

import grpc
import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2_grpc
from tritonclient.grpc._utils import _get_inference_request

from asr_client.audio import load_audio
from asr_client.tensors import wav_inputs
from tests.conftest import BUNDLED_REPO, ROOT

pytestmark = pytest.mark.skipif(
    not (BUNDLED_REPO / "encoder" / "1" / "encoder.onnx").exists(),
    reason="the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh",
)

# the ASR models' request parameters, then the server's own (Triton's reserved names and the sequence ones)
PARAMETERS = ("hotwords", "hotwords_score", "details", "endpoint", "endpoint_rule1_silence",
              "endpoint_rule2_silence", "endpoint_rule2_quiet_db", "endpoint_rule3_length", "endpoint_rule4_silence",
              "priority", "timeout", "sequence_id", "sequence_start", "sequence_end", "binary_data_output",
              "headers")
# (protobuf field of InferParameter, value): every type the protocol can carry, at its edges
VALUES = (("bool_param", True), ("bool_param", False), ("int64_param", 0), ("int64_param", -1),
          ("int64_param", 2**62), ("int64_param", -(2**62)), ("uint64_param", 2**64 - 1), ("double_param", 1.5),
          ("double_param", -0.0), ("double_param", float("nan")), ("double_param", float("inf")),
          ("double_param", float("-inf")), ("double_param", 1e300), ("string_param", ""),
          ("string_param", "nan"), ("string_param", "-inf"), ("string_param", "1e300"),
          ("string_param", "chairs:nan"), ("string_param", "chairs:-inf"), ("string_param", "chairs|beach:1e300"),
          ("string_param", "ünïcödé ☃ 🎤"), ("string_param", "x" * 5000), ("string_param", "a\nb\x00c"),
          ("string_param", "chairs"))
OK_OR_INVALID = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT}
EXPECTED = "can you bring two chairs to the beach"


def samples() -> np.ndarray:
    return load_audio(ROOT / "tests" / "data" / "demo_utts" / "test_b_000000.flac").samples


def request(model: str, audio: np.ndarray, name: str, field: str, value, sequence_id: int = 0):
    message = _get_inference_request(model, wav_inputs(audio), "", "", None, sequence_id, bool(sequence_id),
                                     bool(sequence_id), 0, None, None)
    setattr(message.parameters[name], field, value)
    return message


async def status_of(stub, message) -> grpc.StatusCode:
    try:
        await stub.ModelInfer(message)
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def test_every_parameter_and_value_is_answered_and_the_server_lives(running):
    audio = samples()
    short = audio[:8000]
    async with running(BUNDLED_REPO, allow_http=False) as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            seen: dict[grpc.StatusCode, set[str]] = {}
            for i, (name, (field, value)) in enumerate(itertools.product(PARAMETERS, VALUES)):
                offline = await status_of(stub, request("attention_rescoring", short, name, field, value))
                # a whole stream in one request: its START reads the stream's parameters
                streamed = await status_of(stub, request("streaming_wenet", short, name, field, value, 10_000 + i))
                for model, status in (("offline", offline), ("streaming", streamed)):
                    assert status in OK_OR_INVALID, (model, name, field, value, status)
                    seen.setdefault(status, set()).add(name)
            assert grpc.StatusCode.INVALID_ARGUMENT in seen and grpc.StatusCode.OK in seen
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            assert await client.is_server_live()
            result = await client.infer("attention_rescoring", wav_inputs(audio))
            assert result.as_numpy("TRANSCRIPTS").reshape(-1)[0].decode() == EXPECTED
        finally:
            await client.close()
