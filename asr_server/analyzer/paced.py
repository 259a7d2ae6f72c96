"""Paced real-time streams: the one load perf_analyzer cannot generate, written here for that reason.

perf_analyzer sends a sequence's steps as fast as the server answers (or at a global request rate), so it
measures how many chunks per second the server can take, not whether S people talking at once each get their
partial transcripts in time. Here each of S streams sends one chunk when its audio has "happened" (real time,
paced on the event loop's clock by asr_client.streaming), plays utterances back to back, and starts staggered over
one chunk. Reported: chunk latency (chunk sent -> its partial transcript) and final latency (END chunk sent ->
final, rescored transcript), which perf_analyzer cannot tell apart from the other responses.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

SAMPLE_RATE = 16000


@dataclass(frozen=True)
class PacedResult:
    streams: int  # concurrent paced streams
    chunks_per_s: float  # chunk responses per wall-clock second, all streams together
    chunk_p50_ms: float
    chunk_p99_ms: float
    final_p99_ms: float
    audio_s: float  # seconds of audio streamed, all streams together
    errors: int  # streams that failed
    first_error: str


def _p(values: Sequence[float], q: float) -> float:
    return 1e3 * float(np.percentile(values, q)) if len(values) else float("inf")


async def paced_streams(url: str, model: str, utterances: Sequence[np.ndarray], streams: int,
                        seconds: float, chunk_ms: float = 640.0) -> PacedResult:
    """`streams` real-time streams to `model`, each playing at least `seconds` of audio."""
    from asr_client.streaming import StreamingClient, StreamOptions

    async with StreamingClient(url, StreamOptions(model=model, chunk_ms=chunk_ms, realtime=True,
                                                  stream_timeout_s=seconds + 60)) as client:
        async def one(i: int):
            await asyncio.sleep(i / streams * chunk_ms / 1000)
            chunk_lat, final_lat, audio, k = [], [], 0.0, i
            while audio < seconds:
                samples = utterances[k % len(utterances)]
                result = await client.transcribe(samples)
                lat = result.chunk_latencies_s
                chunk_lat += lat
                final_lat.append(lat[-1])
                audio += samples.size / SAMPLE_RATE
                k += 1
            return chunk_lat, final_lat, audio

        started = time.perf_counter()
        results = await asyncio.gather(*(one(i) for i in range(streams)), return_exceptions=True)
        elapsed = time.perf_counter() - started
    errors = [r for r in results if isinstance(r, BaseException)]
    ok = [r for r in results if not isinstance(r, BaseException)]
    chunks = [x for c, _, _ in ok for x in c]
    finals = [x for _, f, _ in ok for x in f]
    return PacedResult(streams, len(chunks) / elapsed if elapsed > 0 else 0.0, _p(chunks, 50), _p(chunks, 99),
                       _p(finals, 99), sum(a for _, _, a in ok), len(errors),
                       repr(errors[0])[:300] if errors else "")


def run_paced(url: str, model: str, utterances: Sequence[np.ndarray], streams: int, seconds: float,
              chunk_ms: float = 640.0) -> PacedResult:
    return asyncio.run(paced_streams(url, model, utterances, streams, seconds, chunk_ms))
