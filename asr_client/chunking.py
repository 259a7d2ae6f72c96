"""How a stream of samples is cut into the chunks sent as one request each.

The server buffers audio to its own decoding windows, so any chunk length works; 640 ms is the default
because it is one WeNet decoding chunk (16 encoder frames x 4 subsampling x 10 ms). The first chunk carries
LOOKAHEAD_MS more: a decoding window reads 67 fbank frames (10960 samples) for its 64-frame stride, so with
chunks cut every 640 ms from the start each window would wait for the next chunk's first 45 ms, and every
transcript (and an endpoint's final) would come one chunk late. Shifted by the look-ahead, each 640 ms chunk
completes one window, as WeNet's client does with its 11040-sample first chunk.
`wenet_chunks` reproduces WeNet's Triton client instead: a first chunk of 11040 samples (the 67-frame first
decoding window plus 2 frames of fbank look-ahead, 690 ms) then 10240 samples (640 ms), each zero-padded to
its nominal length with WAV_LENS giving the real one. That is what a server that does not buffer needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AsyncIterable, AsyncIterator, Iterator

import numpy as np

from asr_client.audio import SAMPLE_RATE

WENET_FIRST_CHUNK_SAMPLES = 11_040  # 690 ms at 16 kHz
WENET_CHUNK_SAMPLES = 10_240  # 640 ms at 16 kHz
# extra audio in the first chunk, ms: what WeNet's 11040-sample first chunk adds to 640 ms (its window of
# 16-frame chunks reads 3 fbank frames past the chunk, plus the last frame's 25 ms length: 45 ms, rounded up)
LOOKAHEAD_MS = 50.0


@dataclass(frozen=True)
class ChunkPlan:
    first_samples: int  # length of the first chunk, samples at 16 kHz
    next_samples: int  # length of every later chunk, samples at 16 kHz
    pad: bool  # zero-pad short chunks to their nominal length (WAV_LENS still says the real length)

    @classmethod
    def from_options(cls, chunk_ms: float, wenet_chunks: bool, lookahead_ms: float = LOOKAHEAD_MS) -> "ChunkPlan":
        """``chunk_ms`` per request after a first one ``lookahead_ms`` longer (0: all equal)."""
        if wenet_chunks:
            return cls(WENET_FIRST_CHUNK_SAMPLES, WENET_CHUNK_SAMPLES, pad=True)
        samples = round(chunk_ms * SAMPLE_RATE / 1000)
        if samples <= 0:
            raise ValueError(f"chunk length must be positive, got {chunk_ms} ms")
        if lookahead_ms < 0:
            raise ValueError(f"look-ahead must not be negative, got {lookahead_ms} ms")
        return cls(samples + round(lookahead_ms * SAMPLE_RATE / 1000), samples, pad=False)

    def size(self, index: int) -> int:
        return self.first_samples if index == 0 else self.next_samples

    def padded(self, chunk: np.ndarray, index: int) -> np.ndarray:
        """(n,) -> (n,) or, when padding, (size(index),) with trailing zeros."""
        missing = self.size(index) - len(chunk)
        if not self.pad or missing <= 0:
            return chunk
        return np.concatenate([chunk, np.zeros(missing, dtype=np.float32)])


def split(samples: np.ndarray, plan: ChunkPlan) -> Iterator[np.ndarray]:
    """(num_samples,) -> unpadded chunks following the plan; the last one may be short."""
    start, index = 0, 0
    while start < len(samples):
        end = start + plan.size(index)
        yield samples[start:end]
        start, index = end, index + 1


async def rechunk(blocks: AsyncIterable[np.ndarray], plan: ChunkPlan) -> AsyncIterator[np.ndarray]:
    """Blocks of any length (stdin, microphone) -> unpadded chunks following the plan."""
    pending: list[np.ndarray] = []
    have, index = 0, 0
    async for block in blocks:
        pending.append(block)
        have += len(block)
        while have >= plan.size(index):
            buffer = np.concatenate(pending)
            size = plan.size(index)
            yield buffer[:size]
            pending, have, index = [buffer[size:]], have - size, index + 1
    if have:
        yield np.concatenate(pending)


async def flag_last(chunks: AsyncIterable[np.ndarray]) -> AsyncIterator[tuple[np.ndarray, bool]]:
    """Pair every chunk with `is_last`; a live source's end is only known when the next read comes back empty,
    so each chunk is held until the following one arrives."""
    iterator = chunks.__aiter__()
    try:
        current = await iterator.__anext__()
    except StopAsyncIteration:
        return
    async for following in iterator:
        yield current, False
        current = following
    yield current, True


async def from_array(samples: np.ndarray, plan: ChunkPlan) -> AsyncIterator[np.ndarray]:
    for chunk in split(samples, plan):
        yield chunk
