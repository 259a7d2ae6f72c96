"""Transcribe many utterances with N in flight, offline (ModelInfer) or streaming (ModelStreamInfer).

A file that cannot be read, or that the server refuses, yields a result with `error` set and the rest go on.
Results come back in input order; `on_result` sees each one as it completes (progress bars, logs).
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import tritonclient.grpc.aio as grpcclient

from asr_client import longform, offline
from asr_client.audio import AudioError, load_audio
from asr_client.connections import own_connection_client
from asr_client.inputs import Utterance
from asr_client.streaming import DEFAULT_STREAMING_MODEL, DEFAULT_URL, StreamingClient, StreamingError, StreamOptions


@dataclass(frozen=True)
class TranscribeOptions:
    streaming: bool = False  # stream each utterance in chunks instead of one offline request
    model: Optional[str] = None  # default: attention_rescoring offline, streaming_wenet streaming
    concurrency: int = 4  # utterances in flight at once
    connections: int = 1  # TCP connections they are spread over (`asr-server --workers` serves each on one worker)
    stream: StreamOptions = StreamOptions()  # chunking and pacing when streaming (its model is ignored)
    timeout_s: Optional[float] = None  # per utterance: request or whole stream
    parameters: Optional[Mapping[str, Any]] = None  # request parameters (hotwords, endpoint rules, ...)
    words: bool = False  # ask for DETAILS and keep each word with its times
    long: bool = False  # offline: cut each file at pauses and send the pieces in parallel (asr_client.longform)

    def __post_init__(self):
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.connections < 1:
            raise ValueError(f"connections must be at least 1, got {self.connections}")

    @property
    def model_name(self) -> str:
        if self.model:
            return self.model
        return DEFAULT_STREAMING_MODEL if self.streaming else offline.DEFAULT_OFFLINE_MODEL


@dataclass(frozen=True)
class UtteranceResult:
    key: str
    path: str
    reference: Optional[str]  # known transcript, if any
    hypothesis: Optional[str]  # recognised text; None when the utterance failed
    duration_s: float  # audio seconds after resampling; 0 when unreadable
    elapsed_s: float  # wall time of the request (offline) or the whole stream (streaming)
    chunk_latencies_s: tuple[float, ...] = ()  # streaming: per chunk; offline: the one request's
    partials: int = 0  # responses received (chunks when streaming, 1 offline)
    error: Optional[str] = None  # why the utterance failed: unreadable audio or the server's message
    words: tuple = ()  # (word, start s, end s, confidence) when TranscribeOptions.words or long
    # long: (start s, end s, why) of speech that has no words in the result (a refused piece, a piece heard
    # as speech that came back empty); the rest of the file is transcribed
    untranscribed: tuple = ()

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class BatchResult:
    results: tuple[UtteranceResult, ...]  # in input order
    wall_s: float  # from the first request to the last result
    model: str
    streaming: bool


ResultCallback = Callable[[UtteranceResult], None]
# long: (utterance key, pieces done, pieces of that file), as the pieces of a file finish
ProgressCallback = Callable[[str, int, int], None]


async def transcribe_files(
    utterances: Sequence[Union[Utterance, str, Path]],
    url: str = DEFAULT_URL,
    options: TranscribeOptions = TranscribeOptions(),
    on_result: Optional[ResultCallback] = None,
    grpc_client: Optional[grpcclient.InferenceServerClient] = None,
    on_progress: Optional[ProgressCallback] = None,
) -> BatchResult:
    """Transcribe `utterances` (or plain paths) against the server at `url` (or an open `grpc_client`, which is
    the first of `options.connections`; the others are opened to `url` here)."""
    items = [u if isinstance(u, Utterance) else Utterance(key=Path(u).stem, path=Path(u)) for u in utterances]
    owned = [] if grpc_client is not None else [grpcclient.InferenceServerClient(url)]
    grpc_client = grpc_client or owned[0]
    in_flight = min(options.concurrency, max(1, len(items)))
    extra = [own_connection_client(url) for _ in range(min(options.connections, in_flight) - 1)]
    owned += extra
    stream_options = StreamOptions(
        model=options.model_name,
        chunk_ms=options.stream.chunk_ms,
        wenet_chunks=options.stream.wenet_chunks,
        realtime=options.stream.realtime,
        stream_timeout_s=options.timeout_s,
        parameters={**(options.parameters or {}), **({"details": True} if options.words else {})} or None,
        details=options.words,
    )
    # one (client, streamer) per connection; each worker below keeps to one, so they share the load
    connections = [(c, StreamingClient(options=stream_options, grpc_client=c)) for c in [grpc_client, *extra]]
    results: list[Optional[UtteranceResult]] = [None] * len(items)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(len(items)):
        queue.put_nowait(index)

    async def worker(client: grpcclient.InferenceServerClient, streamer: StreamingClient) -> None:
        while not queue.empty():
            index = queue.get_nowait()
            result = await _transcribe_one(items[index], options, client, streamer, on_progress)
            results[index] = result
            if on_result is not None:
                on_result(result)

    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        await asyncio.gather(*(worker(*connections[i % len(connections)]) for i in range(in_flight)))
    finally:
        for client in owned:
            await client.close()
    return BatchResult(
        results=tuple(r for r in results if r is not None),
        wall_s=loop.time() - started,
        model=options.model_name,
        streaming=options.streaming,
    )


async def _transcribe_one(
    utterance: Utterance,
    options: TranscribeOptions,
    grpc_client: grpcclient.InferenceServerClient,
    streamer: StreamingClient,
    on_progress: Optional[ProgressCallback] = None,
) -> UtteranceResult:
    base = dict(key=utterance.key, path=str(utterance.path), reference=utterance.reference)
    try:
        # Decoding and resampling are CPU work: keep them off the loop that drives the other streams.
        audio = await asyncio.to_thread(load_audio, utterance.path)
    except AudioError as error:
        return UtteranceResult(**base, hypothesis=None, duration_s=0.0, elapsed_s=0.0, error=str(error))
    try:
        if options.streaming:
            streamed = await streamer.transcribe(audio.samples)
            words = [w for p in streamed.partials for f in p.finals for w in f.get("words", [])]
            return UtteranceResult(
                **base, hypothesis=streamed.text, duration_s=audio.duration_s, elapsed_s=streamed.elapsed_s,
                chunk_latencies_s=streamed.chunk_latencies_s, partials=len(streamed.partials),
                words=tuple((w["word"], w["start"], w["end"], w.get("confidence")) for w in words),
            )
        if options.long:
            progress = None if on_progress is None else functools.partial(on_progress, utterance.key)
            long = await longform.transcribe_long(grpc_client, audio.samples, options.model_name,
                                                  options.concurrency, dict(options.parameters or {}),
                                                  timeout_s=options.timeout_s, on_progress=progress)
            if long.errors and not long.pieces:  # every piece refused: nothing of the file came back
                raise offline.OfflineError("; ".join(long.errors))
            return UtteranceResult(
                **base, hypothesis=long.text, duration_s=audio.duration_s, elapsed_s=long.latency_s,
                chunk_latencies_s=(long.latency_s,), partials=len(long.pieces),
                words=tuple((w.word, w.start, w.end, w.confidence) for w in long.words),
                untranscribed=long.untranscribed,
            )
        parameters = {**(options.parameters or {}), **({"details": True} if options.words else {})}
        answer = await offline.recognize(
            grpc_client, audio.samples, options.model_name, request_id=utterance.key, timeout_s=options.timeout_s,
            parameters=parameters, details=options.words,
        )
        words = (answer.details or {}).get("words", [])
        return UtteranceResult(
            **base, hypothesis=answer.text, duration_s=audio.duration_s, elapsed_s=answer.latency_s,
            chunk_latencies_s=(answer.latency_s,), partials=1,
            words=tuple((w["word"], w["start"], w["end"], w.get("confidence")) for w in words),
        )
    except (StreamingError, offline.OfflineError) as error:
        return UtteranceResult(**base, hypothesis=None, duration_s=audio.duration_s, elapsed_s=0.0, error=str(error))
