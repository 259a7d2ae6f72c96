"""Streaming recognition over Triton's bidirectional ModelStreamInfer RPC (works with real Triton too).

One utterance is one sequence: chunks go out with the same sequence_id, START on the first and END on the last;
each response carries the current partial transcript and the END response the final one. Several utterances
may stream at once over one client: each gets its own gRPC stream and sequence id.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from dataclasses import dataclass
from typing import Any, AsyncIterable, AsyncIterator, Callable, Mapping, Optional, Union

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException

from asr_client import chunking
from asr_client.audio import SAMPLE_RATE
from asr_client.tensors import details_of, transcript_of, transcript_output, wav_inputs

DEFAULT_URL = "127.0.0.1:8001"
DEFAULT_STREAMING_MODEL = "streaming_wenet"
DEFAULT_CHUNK_MS = 640.0  # one WeNet decoding chunk; the server buffers any other length
MAX_SEQUENCE_ID = 2**63 - 1  # Triton keeps uint64 ids, but int64 keeps every client and server happy


class StreamingError(Exception):
    """The server rejected a chunk or the stream broke; the message is the server's."""


@dataclass(frozen=True)
class StreamOptions:
    model: str = DEFAULT_STREAMING_MODEL  # Triton model (usually the streaming ensemble)
    chunk_ms: float = DEFAULT_CHUNK_MS  # chunk length sent per request, milliseconds of audio
    wenet_chunks: bool = False  # send WeNet's zero-padded 11040 then 10240-sample chunks instead of chunk_ms
    lookahead_ms: float = chunking.LOOKAHEAD_MS  # the first chunk's extra audio (chunking.py says why)
    realtime: bool = False  # pace chunks at the speed of speech (a chunk leaves once its audio "happened")
    stream_timeout_s: Optional[float] = None  # give up on an utterance's stream after this many seconds
    # request parameters sent with START: details, endpoint, endpoint_rule2_silence, hotwords, ...
    parameters: Optional[Mapping[str, Any]] = None
    details: bool = False  # ask for the DETAILS output with every chunk (segments that ended, words, times)

    def __post_init__(self):
        if not self.model:
            raise ValueError("model name must not be empty")
        if not self.wenet_chunks and self.chunk_ms <= 0:
            raise ValueError(f"chunk_ms must be positive, got {self.chunk_ms}")

    @property
    def plan(self) -> chunking.ChunkPlan:
        return chunking.ChunkPlan.from_options(self.chunk_ms, self.wenet_chunks, self.lookahead_ms)


@dataclass(frozen=True)
class Partial:
    index: int  # chunk number, from 0
    text: str  # transcript so far
    audio_end_s: float  # seconds of audio sent up to and including this chunk
    latency_s: float  # from sending this chunk to receiving its response
    details: Optional[dict] = None  # its DETAILS JSON when StreamOptions.details

    @property
    def finals(self) -> list[dict]:
        """The segments that ended with this chunk (endpointing, or END), each with its final text."""
        return list((self.details or {}).get("finals", []))


@dataclass(frozen=True)
class StreamResult:
    text: str  # final transcript (the END response's)
    partials: tuple[Partial, ...]  # one per chunk, in order; the last one is the final
    sequence_id: int
    audio_s: float  # seconds of audio streamed
    elapsed_s: float  # wall time from the first chunk sent to the final response

    @property
    def chunk_latencies_s(self) -> tuple[float, ...]:
        return tuple(p.latency_s for p in self.partials)


AudioSource = Union[np.ndarray, AsyncIterable[np.ndarray]]
PartialCallback = Callable[[Partial], None]


class StreamingClient:
    """Streams utterances to a Triton streaming model.

        async with StreamingClient("127.0.0.1:8001") as client:
            result = await client.transcribe(samples, on_partial=print)

    `samples` is (n,) float32 at 16 kHz in [-1, 1] (see asr_client.audio), or an async iterable of such blocks
    of any length (stdin, microphone), re-cut into chunks here.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        options: StreamOptions = StreamOptions(),
        grpc_client: Optional[grpcclient.InferenceServerClient] = None,
    ):
        self.options = options
        self._owns_client = grpc_client is None
        self._client = grpc_client or grpcclient.InferenceServerClient(url)
        # A random base keeps concurrent client processes from colliding on one server's sequence ids.
        self._ids = itertools.count(random.SystemRandom().randrange(1, MAX_SEQUENCE_ID // 2))

    @property
    def grpc_client(self) -> grpcclient.InferenceServerClient:
        return self._client

    async def __aenter__(self) -> "StreamingClient":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_client:
            await self._client.close()

    def next_sequence_id(self) -> int:
        return next(self._ids)

    async def transcribe(
        self,
        audio: AudioSource,
        sequence_id: Optional[int] = None,
        on_partial: Optional[PartialCallback] = None,
    ) -> StreamResult:
        sequence_id = self.next_sequence_id() if sequence_id is None else sequence_id
        plan = self.options.plan
        chunks = chunking.from_array(audio, plan) if isinstance(audio, np.ndarray) else chunking.rechunk(audio, plan)
        loop = asyncio.get_running_loop()
        sent = _SentChunks()

        async def requests() -> AsyncIterator[dict]:
            async for index, (chunk, last) in _enumerate(chunking.flag_last(chunks)):
                audio_end_s = sent.samples_after(chunk) / SAMPLE_RATE
                if sent.started is None:
                    sent.started = loop.time()
                if self.options.realtime:
                    # A deadline on the loop's clock: the chunk's audio must have been "spoken" first.
                    delay = sent.started + audio_end_s - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                request_id = f"{sequence_id}:{index}"
                sent.record(request_id, loop.time(), audio_end_s)
                yield dict(
                    model_name=self.options.model,
                    inputs=wav_inputs(plan.padded(chunk, index), len(chunk)),
                    outputs=transcript_output(self.options.details),
                    parameters=dict(self.options.parameters) if index == 0 and self.options.parameters else None,
                    request_id=request_id,
                    sequence_id=sequence_id,
                    sequence_start=index == 0,
                    sequence_end=last,
                )

        partials: list[Partial] = []
        responses = self._client.stream_infer(requests(), stream_timeout=self.options.stream_timeout_s)
        finished = False
        try:
            async for result, error in responses:
                if error is not None:
                    raise StreamingError(f"model '{self.options.model}' sequence {sequence_id}: {error.message()}")
                received = loop.time()
                sent_at, audio_end_s = sent.lookup(result.get_response().id, received)
                partial = Partial(len(partials), transcript_of(result), audio_end_s, received - sent_at,
                                  details_of(result) if self.options.details else None)
                partials.append(partial)
                if on_partial is not None:
                    on_partial(partial)
            finished = True
        except grpc.RpcError as error:
            raise StreamingError(f"stream to '{self.options.model}' failed: {_rpc_message(error)}") from error
        except InferenceServerException as error:
            raise StreamingError(f"stream to '{self.options.model}' failed: {error.message()}") from error
        finally:
            if not finished:
                responses.cancel()
        if len(partials) != sent.count:
            raise StreamingError(
                f"model '{self.options.model}' answered {len(partials)} of {sent.count} chunks of sequence {sequence_id}"
            )
        return StreamResult(
            text=partials[-1].text if partials else "",
            partials=tuple(partials),
            sequence_id=sequence_id,
            audio_s=sent.samples / SAMPLE_RATE,
            elapsed_s=loop.time() - (sent.started if sent.started is not None else loop.time()),
        )


class _SentChunks:
    """Bookkeeping of one stream's requests, so each response can be matched to its send time."""

    def __init__(self):
        self.started: Optional[float] = None  # loop time the first chunk was ready
        self.samples = 0  # samples handed to the stream so far
        self.count = 0  # requests sent
        self._by_id: dict[str, tuple[float, float]] = {}  # request id -> (sent at, audio end s)

    def samples_after(self, chunk: np.ndarray) -> int:
        self.samples += len(chunk)
        return self.samples

    def record(self, request_id: str, sent_at: float, audio_end_s: float) -> None:
        self._by_id[request_id] = (sent_at, audio_end_s)
        self.count += 1

    def lookup(self, request_id: str, default_time: float) -> tuple[float, float]:
        # A server that drops response ids still gets a result, just without a latency.
        return self._by_id.pop(request_id, (default_time, self.samples / SAMPLE_RATE))


async def _enumerate(items: AsyncIterable) -> AsyncIterator[tuple[int, object]]:
    index = 0
    async for item in items:
        yield index, item
        index += 1


def _rpc_message(error: grpc.RpcError) -> str:
    details = getattr(error, "details", None)
    return details() if callable(details) else str(error)
