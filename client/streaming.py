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
from typing import AsyncIterable, AsyncIterator, Callable, Optional, Union

import grpc
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.utils import InferenceServerException

from client import chunking
from client.audio import SAMPLE_RATE
from client.tensors import transcript_of, transcript_output, wav_inputs

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
    realtime: bool = False  # pace chunks at the speed of speech (a chunk leaves once its audio "happened")
    stream_timeout_s: Optional[float] = None  # give up on an utterance's stream after this many seconds

    def __post_init__(self):
        if not self.model:
            raise ValueError("model name must not be empty")
        if not self.wenet_chunks and self.chunk_ms <= 0:
            raise ValueError(f"chunk_ms must be positive, got {self.chunk_ms}")

    @property
    def plan(self) -> chunking.ChunkPlan:
        return chunking.ChunkPlan.from_options(self.chunk_ms, self.wenet_chunks)


@dataclass(frozen=True)
class Partial:
    index: int  # chunk number, from 0
    text: str  # transcript so far
    audio_end_s: float  # seconds of audio sent up to and including this chunk
    latency_s: float  # from sending this chunk to receiving its response


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

    `samples` is (n,) float32 at 16 kHz in [-1, 1] (see client.audio), or an async iterable of such blocks
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
        sent_at: dict[str, float] = {}
        audio_end: dict[str, float] = {}
        total = {"chunks": 0, "samples": 0, "started": None}

        async def requests() -> AsyncIterator[dict]:
            index = 0
            async for chunk, last in chunking.flag_last(chunks):
                total["samples"] += len(chunk)
                audio_time = total["samples"] / SAMPLE_RATE
                if total["started"] is None:
                    total["started"] = loop.time()
                if self.options.realtime:
                    # Deadline on the loop's clock: the chunk's audio must have been "spoken" first.
                    delay = total["started"] + audio_time - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                request_id = f"{sequence_id}:{index}"
                sent_at[request_id] = loop.time()
                audio_end[request_id] = audio_time
                total["chunks"] = index + 1
                yield dict(
                    model_name=self.options.model,
                    inputs=wav_inputs(plan.padded(chunk, index), len(chunk)),
                    outputs=transcript_output(),
                    request_id=request_id,
                    sequence_id=sequence_id,
                    sequence_start=index == 0,
                    sequence_end=last,
                )
                index += 1

        partials: list[Partial] = []
        responses = self._client.stream_infer(requests(), stream_timeout=self.options.stream_timeout_s)
        finished = False
        try:
            async for result, error in responses:
                if error is not None:
                    raise StreamingError(f"model '{self.options.model}' sequence {sequence_id}: {error.message()}")
                received = loop.time()
                request_id = result.get_response().id
                partial = Partial(
                    index=len(partials),
                    text=transcript_of(result),
                    audio_end_s=audio_end.get(request_id, total["samples"] / SAMPLE_RATE),
                    latency_s=received - sent_at.get(request_id, received),
                )
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
        if len(partials) != total["chunks"]:
            raise StreamingError(
                f"model '{self.options.model}' answered {len(partials)} of {total['chunks']} chunks of "
                f"sequence {sequence_id}"
            )
        started = total["started"] if total["started"] is not None else loop.time()
        return StreamResult(
            text=partials[-1].text if partials else "",
            partials=tuple(partials),
            sequence_id=sequence_id,
            audio_s=total["samples"] / SAMPLE_RATE,
            elapsed_s=loop.time() - started,
        )


def _rpc_message(error: grpc.RpcError) -> str:
    details = getattr(error, "details", None)
    return details() if callable(details) else str(error)
