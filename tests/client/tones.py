"""A toy "speech" code the fake models can decode exactly: each word is a 250 ms sine tone.

Digit d ("zero".."nine") is a tone at 400 + 100*d Hz: all below 4 kHz, so 8 kHz files carry them too.
The decoder picks the strongest FFT bin of each 250 ms segment and maps it to the nearest digit frequency.
The fake models embed DECODER_SOURCE, so tests and models share one definition.
"""

from __future__ import annotations

import numpy as np

WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
WORD_S = 0.25  # seconds of tone per word
BASE_HZ, STEP_HZ = 400.0, 100.0  # digit d -> BASE_HZ + STEP_HZ * d

DECODER_SOURCE = f'''
import numpy as np

WORDS = {WORDS!r}
SEGMENT = int({WORD_S} * 16000)  # samples per word at 16 kHz


def decode(samples, complete_only=False):
    """(n,) float32 at 16 kHz -> words of the tones in it; a trailing part-segment counts only if not
    complete_only and at least half a word long."""
    words = []
    for start in range(0, len(samples), SEGMENT):
        segment = samples[start:start + SEGMENT]
        if len(segment) < SEGMENT and (complete_only or len(segment) < SEGMENT // 2):
            break
        spectrum = np.abs(np.fft.rfft(segment, n=SEGMENT))
        hz = np.argmax(spectrum) * 16000 / SEGMENT
        digit = int(round((hz - {BASE_HZ}) / {STEP_HZ}))
        if spectrum.max() > 1.0 and 0 <= digit < len(WORDS):
            words.append(WORDS[digit])
    return " ".join(words)
'''


def tones(text: str, rate: int = 16_000, amplitude: float = 0.5, seed: int = 0, noise: float = 0.01) -> np.ndarray:
    """"three one four" -> (n,) float32 at `rate` Hz; a little seeded noise so nothing is suspiciously exact."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(WORD_S * rate)) / rate
    parts = [amplitude * np.sin(2 * np.pi * (BASE_HZ + STEP_HZ * WORDS.index(w)) * t) for w in text.split()]
    samples = np.concatenate(parts) if parts else np.zeros(0)
    return (samples + noise * rng.standard_normal(len(samples))).astype(np.float32)
