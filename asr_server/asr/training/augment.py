"""Training-time augmentation: speed perturbation of the waveform, SpecAugment masks on the fbank.

Every random draw comes from the ``random.Random`` the caller passes, in a fixed order, so a run that resumes
from a checkpoint draws exactly what an uninterrupted run draws.
"""

from __future__ import annotations

import random

import numpy as np

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
