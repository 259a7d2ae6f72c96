"""Cheap channel effects applied once, at generation, to each synthesised utterance (numpy only).

Done here: resampling to 16 kHz, silence padding, loudness, simulated room reverberation (an exponentially
decaying noise impulse response), telephone band limit with 8-bit mu-law companding, additive white / pink /
brown noise. Done by the synthesiser: tempo and pitch. Done at training time (scripts/train.py): speed
perturbation 0.9/1.0/1.1 and SpecAugment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import soxr

SAMPLE_RATE = 16000


@dataclass(frozen=True)
class Channel:
    """One utterance's draw of effects; every field is recorded in the manifest."""
    pad_s: tuple[float, float]   # silence before / after
    peak: float                  # linear peak level after normalisation
    rt60_s: float                # reverberation time; 0: none
    wet: float                   # reverberant share of the mix
    telephone: bool
    noise: str                   # none / white / pink / brown
    snr_db: float

    @classmethod
    def draw(cls, rng: np.random.Generator) -> "Channel":
        # Shares chosen so that about a third of the utterances stay clean: the model is small and
        # the synthetic voices are already hard enough.
        reverb = rng.random() < 0.25
        noise = str(rng.choice(["none", "white", "pink", "brown"], p=[0.5, 0.5 / 3, 0.5 / 3, 0.5 / 3]))
        return cls(pad_s=(float(rng.uniform(0.05, 0.4)), float(rng.uniform(0.05, 0.4))),
                   peak=float(rng.uniform(0.1, 0.95)),
                   rt60_s=float(rng.uniform(0.15, 0.8)) if reverb else 0.0,
                   wet=float(rng.uniform(0.2, 0.7)) if reverb else 0.0,
                   telephone=bool(rng.random() < 0.08),
                   noise=noise, snr_db=float(rng.uniform(8, 35)) if noise != "none" else float("inf"))


def to_16k(audio: np.ndarray, sr: int) -> np.ndarray:
    audio = np.asarray(audio, dtype=np.float32)
    return audio if sr == SAMPLE_RATE else soxr.resample(audio, sr, SAMPLE_RATE).astype(np.float32)


def room_impulse(rng: np.random.Generator, rt60_s: float) -> np.ndarray:
    """Direct path plus a decaying noise tail: amplitude falls 60 dB over rt60_s."""
    n = max(1, int(rt60_s * SAMPLE_RATE))
    t = np.arange(n) / SAMPLE_RATE
    tail = rng.standard_normal(n) * np.exp(-6.9078 * t / rt60_s)  # ln(1000) = 6.9078: -60 dB at rt60
    tail[: int(0.003 * SAMPLE_RATE)] = 0.0                         # first reflections arrive a little later
    h = tail / (np.sqrt(np.sum(tail**2)) + 1e-9)
    h[0] = 1.0
    return h.astype(np.float32)


def _fft_convolve(x: np.ndarray, h: np.ndarray) -> np.ndarray:
    n = x.size + h.size - 1
    size = 1 << (n - 1).bit_length()
    return np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(h, size), size)[: x.size].astype(np.float32)


def telephone(x: np.ndarray) -> np.ndarray:
    """300-3400 Hz band and 8-bit mu-law, as a narrow-band phone line sounds."""
    spec = np.fft.rfft(x)
    freqs = np.fft.rfftfreq(x.size, 1 / SAMPLE_RATE)
    spec[(freqs < 300) | (freqs > 3400)] = 0
    y = np.fft.irfft(spec, x.size)
    peak = float(np.abs(y).max()) or 1.0
    y = y / peak
    mu = 255.0
    code = np.round(np.sign(y) * np.log1p(mu * np.abs(y)) / np.log1p(mu) * 127) / 127
    return (np.sign(code) * np.expm1(np.abs(code) * np.log1p(mu)) / mu * peak).astype(np.float32)


def coloured_noise(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    white = rng.standard_normal(n)
    if kind == "white":
        return white.astype(np.float32)
    spec = np.fft.rfft(white)
    f = np.maximum(np.fft.rfftfreq(n, 1 / SAMPLE_RATE), 20.0)
    spec /= np.sqrt(f) if kind == "pink" else f  # 1/f power (pink), 1/f^2 (brown)
    return np.fft.irfft(spec, n).astype(np.float32)


def apply(audio: np.ndarray, ch: Channel, rng: np.random.Generator) -> np.ndarray:
    """16 kHz float speech -> the utterance as recorded through `ch`, clipped to [-1, 1]."""
    x = audio.astype(np.float32)
    if ch.rt60_s > 0:
        wet = _fft_convolve(x, room_impulse(rng, ch.rt60_s))
        x = (1 - ch.wet) * x + ch.wet * wet * (np.sqrt(np.mean(x**2)) / (np.sqrt(np.mean(wet**2)) + 1e-9))
    if ch.telephone:
        x = telephone(x)
    pads = [np.zeros(int(s * SAMPLE_RATE), np.float32) for s in ch.pad_s]
    x = np.concatenate([pads[0], x, pads[1]])
    x = x / (float(np.abs(x).max()) or 1.0) * ch.peak
    if ch.noise != "none":
        speech = x[pads[0].size: x.size - pads[1].size]
        noise = coloured_noise(rng, ch.noise, x.size)
        scale = np.sqrt(np.mean(speech**2) / (np.mean(noise**2) + 1e-12) / 10 ** (ch.snr_db / 10))
        x = x + noise * scale
    return np.clip(x, -1.0, 1.0).astype(np.float32)
