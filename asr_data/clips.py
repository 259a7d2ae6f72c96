"""Checks, trims and sample decoding shared by the readers of recorded game speech (drascula, bass, uqm)."""

from __future__ import annotations

import re

import numpy as np


def syllables(text: str) -> int:
    """A rough count of the syllables of an English text: vowel groups per word, a final silent e dropped."""
    count = 0
    for word in re.findall(r"[a-z]+", text.lower().replace("'", "")):
        groups = len(re.findall(r"[aeiouy]+", word))
        if groups > 1 and word.endswith("e") and not word.endswith(("le", "ee")):
            groups -= 1
        count += max(1, groups)
    return count


def unsigned_8bit(raw: bytes) -> np.ndarray:
    """8-bit unsigned PCM (silence at 128), as the games store it, as float32 in [-1, 1)."""
    return (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0


def frame_rms(audio: np.ndarray, frame: int) -> np.ndarray:
    """RMS of each whole frame of `frame` samples."""
    n = audio.size // frame
    return np.sqrt((audio[:n * frame].reshape(n, frame).astype(np.float64) ** 2).mean(axis=1))


def trim_silence(audio: np.ndarray, rate: int, floor: float = 0.02, margin: float = 0.1) -> np.ndarray:
    """Drop leading and trailing silence (10 ms frames under `floor` RMS), keeping `margin` seconds of it.
    Some clips hold seconds of silence (drascula's 3.ALS opens with 6.7 s)."""
    frame = rate // 100
    rms = frame_rms(audio, frame)
    loud = np.flatnonzero(rms > floor)
    if not loud.size:
        return audio
    keep = int(margin * rate)
    return audio[max(0, loud[0] * frame - keep):min(audio.size, (loud[-1] + 1) * frame + keep)]
