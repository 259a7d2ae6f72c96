"""Every model of the built repository bounds the variable dimensions of its inputs (config parameter
max_input_dim, what 60 s of audio implies): a request past it is refused before any work (6 MiB sent
straight to `encoder` cost +1.5 GB; a 128 MiB WAV with WAV_LENS of 1 s was accepted)."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException

from asr_server.core import validate_request
from asr_server.errors import ServerError
from asr_server.messages import InferRequest, Tensor
from asr_server.repository.validation import MAX_INPUT_DIM_PARAMETER
from tests.conftest import BUNDLED_REPO

pytestmark = pytest.mark.skipif(
    not (BUNDLED_REPO / "encoder" / "1" / "encoder.onnx").exists(),
    reason="the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh",
)
BOUNDED = ("feature_extractor", "encoder", "decoder", "scoring", "attention_rescoring", "wenet", "streaming_wenet",
           "streaming_feature_extractor", "streaming_wenet_ensemble")


def config(name: str) -> mc.ModelConfig:
    from asr_server.repository.config import read_config

    return read_config(BUNDLED_REPO / name)


def test_every_pipeline_model_carries_its_bound():
    for name in BOUNDED:
        assert int(config(name).parameters[MAX_INPUT_DIM_PARAMETER].string_value) > 0, name
    assert config("feature_extractor").parameters[MAX_INPUT_DIM_PARAMETER].string_value == str(2 * 60 * 16000)


def test_the_bound_is_checked_before_any_work():
    encoder = config("encoder")
    cap = int(encoder.parameters[MAX_INPUT_DIM_PARAMETER].string_value)
    ok = InferRequest("encoder", inputs=[Tensor("speech", "FP32", np.zeros((1, cap, 80), np.float32)),
                                         Tensor("speech_lengths", "INT32", np.array([[cap]], np.int32))])
    validate_request(encoder, ok)
    over = InferRequest("encoder", inputs=[Tensor("speech", "FP32", np.zeros((1, cap + 1, 80), np.float32)),
                                           Tensor("speech_lengths", "INT32", np.array([[cap]], np.int32))])
    with pytest.raises(ServerError, match="variable dimensions take at most"):
        validate_request(encoder, over)


async def test_oversized_inputs_are_refused_and_the_server_goes_on(running):
    async with running(BUNDLED_REPO, allow_http=False) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            speech = aioclient.InferInput("speech", [1, 20_000, 80], "FP32")  # 6.1 MiB of frames, 200 s
            speech.set_data_from_numpy(np.zeros((1, 20_000, 80), np.float32))
            lengths = aioclient.InferInput("speech_lengths", [1, 1], "INT32")
            lengths.set_data_from_numpy(np.array([[20_000]], np.int32))
            with pytest.raises(InferenceServerException, match="at most 6007") as info:
                await client.infer("encoder", [speech, lengths])
            assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
            wide = np.zeros((1, 4_000_000), np.float32)  # 16 MiB of WAV, WAV_LENS says 1 s
            wav = aioclient.InferInput("WAV", list(wide.shape), "FP32")
            wav.set_data_from_numpy(wide)
            lens = aioclient.InferInput("WAV_LENS", [1, 1], "INT32")
            lens.set_data_from_numpy(np.array([[16000]], np.int32))
            with pytest.raises(InferenceServerException, match="at most 1920000"):
                await client.infer("attention_rescoring", [wav, lens])
            assert await client.is_server_live()
        finally:
            await client.close()
