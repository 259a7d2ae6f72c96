"""bench/_server.py's batching floor (bench/stream_overhead.py's third server) answers every streamed request
with the fixed transcript, its own id, and ends each stream once its requests are answered."""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
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


def answers_of(port: int, streams: int) -> list[list[tuple[str, str, list[bytes]]]]:
    """(id, error, raw outputs) of every answer on each stream, from a client in a process of its own: a gRPC
    client in the test process would leave gRPC threads behind, and later tests fork (gen_corpus's pool)."""
    answers = asyncio.run(all_streams(port, streams))
    return [[(a.infer_response.id, a.error_message, list(a.infer_response.raw_output_contents)) for a in stream]
            for stream in answers]


def test_every_streamed_request_is_answered_with_the_transcript_and_its_id():
    with server_process(serve_batching_floor) as (_proc, port):
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            answers = pool.submit(answers_of, port, 4).result(timeout=60)
    transcript = struct.pack("<I", len(ECHO_TRANSCRIPT)) + ECHO_TRANSCRIPT
    for stream, stream_answers in enumerate(answers):
        assert sorted(answer_id for answer_id, _, _ in stream_answers) == [f"{stream}-{i}" for i in range(CHUNKS)]
        for _, error, outputs in stream_answers:
            assert not error and outputs == [transcript]
