"""Live 16 kHz mono blocks from the default input device, through the optional `sounddevice` package."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Optional

import numpy as np

from asr_client.audio import SAMPLE_RATE, pcm16_to_float

INSTALL_HINT = "install it with `pip install sounddevice` (or the project's `microphone` extra) and PortAudio"


class MicrophoneUnavailable(Exception):
    """No sound-device library or no usable input device."""


def require_sounddevice():
    """The sounddevice module, or MicrophoneUnavailable saying how to get it (checked before streaming starts)."""
    try:
        import sounddevice
    except ImportError as error:
        raise MicrophoneUnavailable(f"--microphone needs the sounddevice package: {INSTALL_HINT}") from error
    except OSError as error:  # the package is there but the PortAudio library is not
        raise MicrophoneUnavailable(f"--microphone cannot load PortAudio ({error}): {INSTALL_HINT}") from error
    return sounddevice


def check_input_device(sounddevice) -> None:
    """MicrophoneUnavailable naming the device error when no input device can record 16 kHz mono int16 (found
    before the stream starts: raised inside a running stream it would surface as the stream's cancellation)."""
    try:
        sounddevice.check_input_settings(samplerate=SAMPLE_RATE, channels=1, dtype="int16")
    except Exception as error:  # noqa: BLE001 - PortAudioError or ValueError ("No input device matching ...")
        raise MicrophoneUnavailable(f"no usable input device: {error}") from error


async def microphone_blocks(
    block_ms: float, stop: asyncio.Event, duration_s: Optional[float] = None
) -> AsyncIterator[np.ndarray]:
    """Yield (n,) float32 blocks until `stop` is set or `duration_s` of audio has been captured."""
    sounddevice = require_sounddevice()
    loop = asyncio.get_running_loop()
    blocks: asyncio.Queue[bytes] = asyncio.Queue()

    def on_audio(data, frames, time, status) -> None:  # runs on PortAudio's thread
        loop.call_soon_threadsafe(blocks.put_nowait, bytes(data))

    block_frames = max(1, round(block_ms * SAMPLE_RATE / 1000))
    limit = None if duration_s is None else round(duration_s * SAMPLE_RATE)
    captured = 0
    try:
        device = sounddevice.RawInputStream(
            samplerate=SAMPLE_RATE, channels=1, dtype="int16", blocksize=block_frames, callback=on_audio
        )
    except Exception as error:  # PortAudioError has no stable import path across versions
        raise MicrophoneUnavailable(f"cannot open the input device: {error}") from error
    stopped = asyncio.ensure_future(stop.wait())
    with device:
        try:
            while limit is None or captured < limit:
                block = asyncio.ensure_future(blocks.get())
                await asyncio.wait({block, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not block.done():
                    block.cancel()
                    return
                samples = pcm16_to_float(block.result())
                if limit is not None:
                    samples = samples[: limit - captured]
                captured += len(samples)
                yield samples
        finally:
            stopped.cancel()
