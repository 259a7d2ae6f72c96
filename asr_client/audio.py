"""Audio in the form the ASR pipelines take: mono float32 samples in [-1, 1] at 16 kHz.

Files are read with soundfile (any format libsndfile knows), mixed down to mono and resampled with soxr.
Raw 16-bit PCM (stdin, microphone) arrives in blocks and is converted block by block.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, BinaryIO

import numpy as np
import soundfile
import soxr

SAMPLE_RATE = 16_000  # Hz, what WeNet's pipelines expect on WAV
PCM16_BYTES = 2  # bytes per sample of raw s16le input
PCM16_SCALE = 32768.0  # int16 full scale -> [-1, 1)


class AudioError(Exception):
    """An input that cannot be turned into audio; the message says which file and why."""


@dataclass(frozen=True)
class Audio:
    samples: np.ndarray  # (num_samples,) float32 in [-1, 1], mono, SAMPLE_RATE Hz
    source_rate: int  # Hz of the file before resampling
    source_channels: int  # channels of the file before the mono mix-down

    @property
    def duration_s(self) -> float:
        return len(self.samples) / SAMPLE_RATE


def to_mono(data: np.ndarray) -> np.ndarray:
    """(frames,) or (frames, channels) -> (frames,) by averaging the channels."""
    if data.ndim == 1:
        return data
    return data.mean(axis=1, dtype=np.float64).astype(np.float32)


def resample(samples: np.ndarray, source_rate: int, target_rate: int = SAMPLE_RATE) -> np.ndarray:
    """(frames,) float32 at source_rate -> (frames',) float32 at target_rate."""
    if source_rate == target_rate or len(samples) == 0:
        return samples.astype(np.float32, copy=False)
    return soxr.resample(samples, source_rate, target_rate, quality="HQ").astype(np.float32, copy=False)


def load_audio(path: str | Path) -> Audio:
    """Read any soundfile-readable file as mono 16 kHz float32; raise AudioError if it cannot be read."""
    path = Path(path)
    try:
        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except Exception as error:  # soundfile raises LibsndfileError, RuntimeError, OSError, TypeError...
        # LibsndfileError's str() repeats the path; its error_string is just the reason.
        reason = getattr(error, "error_string", None) or str(error)
        raise AudioError(f"cannot read audio file {path}: {reason}") from error
    if data.shape[0] == 0:
        raise AudioError(f"audio file {path} has no samples")
    samples = resample(to_mono(data) if data.shape[1] > 1 else data[:, 0], rate)
    # Resampling can overshoot full scale by a hair; the pipelines expect [-1, 1].
    np.clip(samples, -1.0, 1.0, out=samples)
    return Audio(samples=samples, source_rate=int(rate), source_channels=int(data.shape[1]))


def pcm16_to_float(block: bytes) -> np.ndarray:
    """Little-endian int16 bytes -> (frames,) float32 in [-1, 1)."""
    usable = len(block) - len(block) % PCM16_BYTES
    return np.frombuffer(block[:usable], dtype="<i2").astype(np.float32) / PCM16_SCALE


class PcmResampler:
    """Converts consecutive raw PCM blocks at `rate` to 16 kHz float32, keeping filter state between blocks."""

    def __init__(self, rate: int):
        self._stream = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32") if rate != SAMPLE_RATE else None
        self._odd_byte = b""  # a block may end in the middle of a sample

    def push(self, block: bytes, last: bool = False) -> np.ndarray:
        block = self._odd_byte + block
        cut = len(block) - len(block) % PCM16_BYTES
        self._odd_byte = block[cut:]
        samples = pcm16_to_float(block[:cut])
        if self._stream is None:
            return samples
        return self._stream.resample_chunk(samples, last=last)


async def read_pcm16_blocks(
    stream: BinaryIO, block_samples: int, rate: int = SAMPLE_RATE
) -> AsyncIterator[np.ndarray]:
    """Yield float32 16 kHz blocks from a blocking binary stream of s16le mono PCM at `rate` Hz.

    Reads run in a worker thread so a slow pipe never blocks the event loop.
    """
    resampler = PcmResampler(rate)
    source_block_bytes = max(1, round(block_samples * rate / SAMPLE_RATE)) * PCM16_BYTES
    while True:
        block = await asyncio.to_thread(_read_exactly, stream, source_block_bytes)
        last = len(block) < source_block_bytes
        samples = resampler.push(block, last=last)
        if len(samples):
            yield samples
        if last:
            return


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    """Read `size` bytes unless the stream ends first (pipes return short reads)."""
    parts, have = [], 0
    while have < size:
        part = stream.read(size - have)
        if not part:
            break
        parts.append(part)
        have += len(part)
    return b"".join(parts)
