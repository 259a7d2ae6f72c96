"""Training-time augmentation: speed perturbation, band limits and leading silence of the waveform, SpecAugment
masks on the fbank.

Every random draw comes from the ``random.Random`` the caller passes, in a fixed order, so a run that resumes
from a checkpoint draws exactly what an uninterrupted run draws.
"""

from __future__ import annotations

import random

import numpy as np
import soxr

SPEEDS = (0.9, 1.0, 1.1)  # speed perturbation factors (tempo and pitch together, like sox speed)


def speed_perturb(wav: np.ndarray, factor: float) -> np.ndarray:
    """Resample by linear interpolation: factor > 1 is faster and higher."""
    if factor == 1.0:
        return wav
    src = np.arange(0, wav.size - 1, factor)
    return np.interp(src, np.arange(wav.size), wav).astype(np.float32)


def spec_augment(feats: np.ndarray, rng: random.Random, num_t_mask: int = 2, num_f_mask: int = 2,
                 max_t: int = 40, max_f: int = 10) -> np.ndarray:
    """Zero random time and frequency bands (WeNet's spec_aug defaults, max_t a little shorter for 2-4 s clips)."""
    x = feats.copy()
    t, f = x.shape
    for _ in range(num_t_mask):
        w = rng.randint(1, max_t)
        s = rng.randint(0, max(0, t - w))
        x[s:s + w] = 0.0
    for _ in range(num_f_mask):
        w = rng.randint(1, max_f)
        s = rng.randint(0, max(0, f - w))
        x[:, s:s + w] = 0.0
    return x


BAND_LIMIT_RATES = (8000, 11025)  # telephone audio and the games' 11 kHz speech
LSB = 1.0 / 32768                 # one step of 16-bit audio


def requantise(wav: np.ndarray, rng: random.Random) -> np.ndarray:
    """Round to 16-bit steps with one step of triangular dither, as a 16-bit file holds it: a resampled
    signal's empty upper band then carries the same faint noise that recorded band-limited audio has."""
    noise = np.random.default_rng(rng.getrandbits(32)).triangular(-LSB, 0.0, LSB, wav.size)
    return (np.round((wav + noise) / LSB) * LSB).astype(np.float32)


def band_limit(wav: np.ndarray, rate: int, rng: random.Random) -> np.ndarray:
    """16 kHz -> `rate` -> 16 kHz: nothing left above rate / 2."""
    down = soxr.resample(wav, 16000, rate)
    return requantise(soxr.resample(down, rate, 16000)[: wav.size], rng)


def lead_silence(wav: np.ndarray, seconds: float, rng: random.Random) -> np.ndarray:
    """Prepend `seconds` of near-silence (16-bit dither noise) before the utterance."""
    pad = requantise(np.zeros(int(seconds * 16000), np.float32), rng)
    return np.concatenate([pad, wav])
