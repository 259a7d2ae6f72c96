"""Paced streams from pre-serialised requests: a load generator that leaves the cores to the server under test.

The bundled client (`asr_client.streaming`) builds every chunk's request from numpy through tritonclient's
objects and parses every response into an InferResult: about a millisecond of Python per chunk, which on a
2-core machine takes a core from the server at a few hundred streams. Here each utterance's chunks are
serialised once (`utterance_requests`), a stream adds its sequence id as a second serialised message (protobuf
merges concatenated messages: the map entry joins the chunk's sequence_start/sequence_end), and gRPC sends the
bytes as they are. What the server receives is what the bundled client sends for the same chunk plan, less the
request id, which answers are not matched by here: a ModelStreamInfer call answers one sequence's chunks in order.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb

from asr_client import chunking
from asr_client.audio import SAMPLE_RATE
from asr_client.tensors import TRANSCRIPTS, WAV, WAV_LENS

STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"


@dataclass(frozen=True)
class Utterance:
    """One utterance's chunk requests, serialised, and when each chunk's audio has been spoken (s from start)."""
    requests: tuple[bytes, ...]
    audio_end_s: tuple[float, ...]

    @property
    def seconds(self) -> float:
        return self.audio_end_s[-1] if self.audio_end_s else 0.0


def chunk_request(model: str, chunk: np.ndarray, length: int, first: bool, last: bool) -> bytes:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name=WAV, datatype="FP32", shape=[1, chunk.size])
    request.inputs.add(name=WAV_LENS, datatype="INT32", shape=[1, 1])
    request.raw_input_contents.append(np.ascontiguousarray(chunk, dtype="<f4").tobytes())
    request.raw_input_contents.append(np.array([length], dtype="<i4").tobytes())
    request.outputs.add(name=TRANSCRIPTS)
    request.parameters["sequence_start"].bool_param = first
    request.parameters["sequence_end"].bool_param = last
    return request.SerializeToString()


def utterance_requests(samples: np.ndarray, plan: chunking.ChunkPlan, model: str) -> Utterance:
    """`samples`: (n,) float32 at 16 kHz, cut as the bundled client cuts it (`plan`)."""
    chunks = list(chunking.split(samples, plan))
    requests, ends, done = [], [], 0
    for index, chunk in enumerate(chunks):
        done += chunk.size
        requests.append(chunk_request(model, plan.padded(chunk, index), chunk.size, index == 0,
                                      index == len(chunks) - 1))
        ends.append(done / SAMPLE_RATE)
    return Utterance(tuple(requests), tuple(ends))


def sequence_id_suffix(sequence_id: int) -> bytes:
    request = pb.ModelInferRequest()
    request.parameters["sequence_id"].int64_param = sequence_id
    return request.SerializeToString()


class StreamError(RuntimeError):
    pass


async def paced_sequence(channel: grpc.aio.Channel, utterance: Utterance, sequence_id: int) -> list[float]:
    """Send one utterance's chunks at real time as one sequence on one ModelStreamInfer call; the latency of
    each chunk (s, sent -> answered). Raises StreamError on an error answer or a missing one."""
    call = channel.stream_stream(STREAM_METHOD)(wait_for_ready=True)  # no serialisers: bytes in, bytes out
    suffix = sequence_id_suffix(sequence_id)
    loop = asyncio.get_running_loop()
    sent_at: list[float] = []

    async def send() -> None:
        started = loop.time()
        for request, end_s in zip(utterance.requests, utterance.audio_end_s):
            delay = started + end_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            sent_at.append(loop.time())
            await call.write(request + suffix)
        await call.done_writing()

    sender = asyncio.ensure_future(send())
    latencies = []
    try:
        for _ in utterance.requests:
            answer = await call.read()
            if answer is grpc.aio.EOF:
                raise StreamError(f"sequence {sequence_id}: the call ended after {len(latencies)} answers")
            received = loop.time()
            response = pb.ModelStreamInferResponse.FromString(answer)
            if response.error_message:
                raise StreamError(f"sequence {sequence_id}: {response.error_message}")
            latencies.append(received - sent_at[len(latencies)])
        await sender
    finally:
        if not sender.done():
            sender.cancel()
        elif not sender.cancelled():
            sender.exception()  # retrieved: a failed write ends in the StreamError above, not in a log line
        call.cancel()
    return latencies
