"""bench/lean_streams.py: pre-serialised chunk requests say what the bundled client's requests say, and a paced
sequence gets one answer per chunk from our server, or a StreamError naming the server's error."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from asr_client.streaming import StreamOptions
from bench.lean_streams import StreamError, paced_sequence, sequence_id_suffix, utterance_requests
from bench.stream_overhead import no_op_repository

PLAN = StreamOptions(chunk_ms=640.0).plan


def test_requests_carry_the_chunks_flags_and_the_streams_sequence_id():
    samples = np.random.default_rng(0).uniform(-0.5, 0.5, 16000 * 2).astype(np.float32)
    utterance = utterance_requests(samples, PLAN, "streaming_wenet")
    assert len(utterance.requests) >= 3 and utterance.seconds == pytest.approx(2.0)
    done = 0
    for index, raw in enumerate(utterance.requests):
        request = pb.ModelInferRequest.FromString(raw + sequence_id_suffix(2**62 + 5))
        assert request.model_name == "streaming_wenet"
        assert [(i.name, i.datatype) for i in request.inputs] == [("WAV", "FP32"), ("WAV_LENS", "INT32")]
        wav = np.frombuffer(request.raw_input_contents[0], "<f4")
        length = int(np.frombuffer(request.raw_input_contents[1], "<i4")[0])
        assert list(request.inputs[0].shape) == [1, wav.size]
        assert wav.size == (PLAN.size(index) if PLAN.pad else length)
        np.testing.assert_array_equal(wav[:length], samples[done:done + length])
        done += length
        assert utterance.audio_end_s[index] == pytest.approx(done / 16000)
        assert request.parameters["sequence_id"].int64_param == 2**62 + 5
        assert request.parameters["sequence_start"].bool_param == (index == 0)
        assert request.parameters["sequence_end"].bool_param == (index == len(utterance.requests) - 1)
        assert [o.name for o in request.outputs] == ["TRANSCRIPTS"]
    assert done == samples.size


async def test_paced_sequences_are_answered_chunk_by_chunk_and_errors_raise(running, tmp_path):
    samples = np.zeros(16000, np.float32)  # 1 s: two 640 ms chunks, paced at real time
    repo = no_op_repository(tmp_path)
    async with running(repo) as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            good = utterance_requests(samples, PLAN, "streaming_wenet")
            latencies = await asyncio.gather(*(paced_sequence(channel, good, 100 + i) for i in range(3)))
            assert [len(x) for x in latencies] == [len(good.requests)] * 3
            assert all(0 < x < 5 for stream in latencies for x in stream)
            with pytest.raises(StreamError, match="no_such_model"):
                await paced_sequence(channel, utterance_requests(samples, PLAN, "no_such_model"), 200)
