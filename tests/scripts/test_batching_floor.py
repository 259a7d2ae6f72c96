"""bench/_server.py's batching floor (bench/stream_overhead.py's third server) answers every streamed request
with the fixed transcript, its own id, and ends each stream once its requests are answered."""

from __future__ import annotations

import asyncio
import struct

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from bench._server import ECHO_TRANSCRIPT, serve_batching_floor, server_process
from bench.lean_streams import chunk_request

CHUNKS = 5


async def one_stream(stub, stream: int) -> list[pb.ModelStreamInferResponse]:
    async def requests():
        for index in range(CHUNKS):
            message = pb.ModelInferRequest()
            message.ParseFromString(chunk_request("streaming_wenet", np.zeros(160, np.float32), 160, index == 0,
                                                  index == CHUNKS - 1))
            message.id = f"{stream}-{index}"
            yield message
            await asyncio.sleep(0.005)

    return [answer async for answer in stub.ModelStreamInfer(requests())]


async def all_streams(port: int, streams: int) -> list[list[pb.ModelStreamInferResponse]]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        return await asyncio.wait_for(asyncio.gather(*(one_stream(stub, s) for s in range(streams))), 30)


def test_every_streamed_request_is_answered_with_the_transcript_and_its_id():
    with server_process(serve_batching_floor) as (_proc, port):
        answers = asyncio.run(all_streams(port, 4))
    transcript = struct.pack("<I", len(ECHO_TRANSCRIPT)) + ECHO_TRANSCRIPT
    for stream, stream_answers in enumerate(answers):
        assert sorted(a.infer_response.id for a in stream_answers) == [f"{stream}-{i}" for i in range(CHUNKS)]
        for answer in stream_answers:
            assert not answer.error_message
            assert list(answer.infer_response.raw_output_contents) == [transcript]
