"""Audio in the form the ASR pipelines take: mono float32 samples in [-1, 1] at 16 kHz.

Files are read with soundfile (WAV, FLAC, Ogg/Vorbis/Opus, MP3: what libsndfile knows) and, for everything
else ffmpeg decodes (m4a/AAC, webm, mp4, ...), with PyAV; mixed down to mono and resampled with soxr.
Raw 16-bit PCM (stdin, microphone) arrives in blocks and is converted block by block.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, BinaryIO, Iterator, Optional

import numpy as np
import soundfile
import soxr

SAMPLE_RATE = 16_000  # Hz, what WeNet's pipelines expect on WAV
PCM16_BYTES = 2  # bytes per sample of raw s16le input
PCM16_SCALE = 32768.0  # int16 full scale -> [-1, 1)
DECODE_BLOCK_FRAMES = 1 << 16  # an upload is decoded, mixed down and resampled this many frames at a time


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
    """Read an audio file (soundfile, else PyAV) as mono 16 kHz float32; AudioError if it cannot be read."""
    path = Path(path)
    if not path.is_file():
        raise AudioError(f"cannot read audio file {path}: "
                         f"{'it is a folder' if path.is_dir() else 'No such file'}")
    try:
        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except Exception as error:  # soundfile raises LibsndfileError, RuntimeError, OSError, TypeError...
        # LibsndfileError's str() repeats the path; its error_string is just the reason.
        reason = getattr(error, "error_string", None) or str(error)
        try:
            data, rate = decode_with_av(path)
        except AvUnavailable:
            raise AudioError(f"cannot read audio file {path}: {reason} (soundfile reads WAV, FLAC, Ogg and MP3; "
                             "for m4a, webm, mp4, aac and the rest install PyAV: pip install av)") from error
        except Exception as av_error:  # noqa: BLE001 - neither decoder could: say both reasons
            raise AudioError(f"cannot read audio file {path}: {reason}; ffmpeg (PyAV): "
                             f"{str(av_error).splitlines()[0] if str(av_error) else type(av_error).__name__}"
                             ) from error
    if data.shape[0] == 0:
        raise AudioError(f"audio file {path} has no samples")
    samples = finite(resample(to_mono(data) if data.shape[1] > 1 else data[:, 0], rate), path)
    # Resampling can overshoot full scale by a hair; the pipelines expect [-1, 1].
    np.clip(samples, -1.0, 1.0, out=samples)
    return Audio(samples=samples, source_rate=int(rate), source_channels=int(data.shape[1]))


def finite(samples: np.ndarray, name) -> np.ndarray:
    """`samples`, or AudioError if any is NaN or infinite (a float file can hold them; clipping keeps a NaN,
    and one NaN turns a whole recognition, or the pause finder of long audio, into nonsense)."""
    if not np.isfinite(samples).all():
        raise AudioError(f"audio file {name} holds samples that are not finite numbers (NaN or infinity)")
    return samples


def _mono_16k(blocks: Iterator[np.ndarray], rate: int, name: str,
              max_seconds: Optional[float]) -> tuple[np.ndarray, int]:
    """(frames, channels) float32 blocks at `rate` -> (mono SAMPLE_RATE float32, the channel count), mixed down
    and resampled block by block: memory holds the result and one block, whatever rate and channel count the
    file declares (a few MiB of FLAC silence can declare hours of 8-channel audio at 192 kHz)."""
    stream = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ") if rate != SAMPLE_RATE \
        else None
    out, frames, channels = [], 0, 1
    for block in blocks:
        frames, channels = frames + block.shape[0], block.shape[1]
        if max_seconds is not None and frames > max_seconds * rate:
            raise AudioError(f"audio file {name} lasts more than {max_seconds:.0f} s")
        mono = np.ascontiguousarray(to_mono(block) if channels > 1 else block[:, 0], dtype=np.float32)
        out.append(stream.resample_chunk(mono) if stream is not None else mono)
    if frames == 0:
        raise AudioError(f"audio file {name} has no samples")
    if stream is not None:
        out.append(stream.resample_chunk(np.zeros(0, np.float32), last=True))
    return np.concatenate(out), channels


def decode_audio_bytes(data: bytes, name: str = "upload", max_seconds: Optional[float] = None) -> Audio:
    """An uploaded file's bytes (any format soundfile or PyAV reads) as mono 16 kHz float32; AudioError if not,
    or if it holds more than ``max_seconds`` (checked before the samples are decoded where the format says its
    length, and while decoding otherwise)."""
    import io

    try:
        with soundfile.SoundFile(io.BytesIO(data)) as sound:
            rate = sound.samplerate
            if max_seconds is not None and sound.frames > max_seconds * rate:
                raise AudioError(f"audio file {name} lasts {sound.frames / rate:.0f} s: at most {max_seconds:.0f} s")
            samples, channels = _mono_16k(sound.blocks(DECODE_BLOCK_FRAMES, dtype="float32", always_2d=True),
                                          rate, name, max_seconds)
    except AudioError:
        raise
    except Exception as error:  # noqa: BLE001 - then ffmpeg's decoders
        reason = getattr(error, "error_string", None) or str(error)
        try:
            with open_with_av(io.BytesIO(data)) as (rate, blocks):
                samples, channels = _mono_16k(blocks, rate, name, max_seconds)
        except AudioError:
            raise
        except AvUnavailable:
            raise AudioError(f"cannot read audio file {name}: {reason}") from error
        except Exception as av_error:  # noqa: BLE001
            raise AudioError(f"cannot read audio file {name}: {reason}; ffmpeg (PyAV): {av_error}") from error
    samples = finite(samples, name)
    np.clip(samples, -1.0, 1.0, out=samples)
    return Audio(samples=samples, source_rate=int(rate), source_channels=int(channels))


class AvUnavailable(Exception):
    """PyAV is not installed."""


@contextlib.contextmanager
def open_with_av(source):
    """(rate, an iterator of (frames, channels) float32 blocks) of the first audio stream of a file (or file
    object) that ffmpeg decodes, through PyAV; AvUnavailable without PyAV."""
    try:
        import av
    except ImportError:
        raise AvUnavailable() from None
    with av.open(str(source) if isinstance(source, Path) else source) as container:
        streams = [s for s in container.streams if s.type == "audio"]
        if not streams:
            raise ValueError("no audio stream")
        stream = streams[0]
        rate, channels = stream.codec_context.sample_rate, stream.codec_context.channels
        packed = av.AudioResampler(format="flt")  # packed float32 whatever the codec's sample format

        def blocks() -> Iterator[np.ndarray]:
            for frame in container.decode(stream):
                for out in packed.resample(frame):  # (1, samples * channels) -> (samples, channels)
                    yield out.to_ndarray().reshape(-1, channels)

        yield int(rate), blocks()


def decode_with_av(source) -> tuple[np.ndarray, int]:
    """(frames, channels) float32 and the rate of the first audio stream of a file (or file object) that ffmpeg
    decodes, through PyAV, whole (an upload is decoded block by block instead: decode_audio_bytes)."""
    with open_with_av(source) as (rate, blocks):
        decoded = list(blocks)
    return (np.concatenate(decoded) if decoded else np.zeros((0, 1), np.float32)), rate


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


# The first bytes of the containers people pipe: WAV, FLAC, Ogg, MP3 (ID3 tag or frame sync), AIFF, MP4/M4A
# ('ftyp' at offset 4), Matroska/WebM. Raw PCM has no header at all.
_SIGNATURES = ((0, b"RIFF"), (0, b"fLaC"), (0, b"OggS"), (0, b"ID3"), (0, b"\xff\xfb"), (0, b"\xff\xf3"),
               (0, b"\xff\xf2"), (0, b"FORM"), (4, b"ftyp"), (0, b"\x1a\x45\xdf\xa3"))
SNIFF_BYTES = 12


def looks_like_container(head: bytes) -> bool:
    """Whether the first bytes of a stream are an audio container's (not raw PCM)."""
    return any(head[at:at + len(magic)] == magic for at, magic in _SIGNATURES)


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
