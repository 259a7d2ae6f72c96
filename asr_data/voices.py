"""The voice catalogue: which synthesiser families and voices train, which is held out, how a voice and its
prosody are drawn, and how to run one. Licences and speeds are in models/demo_en/MODEL_CARD.md, "Data v2".

Held out for testing: SVOX Pico (its engine and its two speakers occur nowhere in training). flite is not
held out although it was a candidate: its slt, kal and awb/rms voices are CMU ARCTIC speakers that festival
and RHVoice also voice, so it would not measure an unseen speaker.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from asr_data.engines import ENGINES, Prosody

ESPEAK_ACCENTS = ("en-gb", "en-us", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp", "en-gb-x-gbcwmd",
                  "en-029", "en-us-nyc")
ESPEAK_VARIANTS_DIR = Path("/usr/lib/x86_64-linux-gnu/espeak-ng-data/voices/!v")
KOKORO_BLEND_SHARE = 0.35  # share of Kokoro utterances spoken by a blend of two voices (a new speaker)

TRAIN_VOICES: dict[str, tuple[str, ...]] = {
    "mbrola": ("mb-us1", "mb-us2", "mb-us3", "mb-en1"),
    "flite": ("kal16", "awb", "rms", "slt"),
    "festival": ("kal", "ked", "slt_hts"),
    # RHVoice's evgeniy-eng and lyubov (accented English) are CC BY-NC-ND 4.0: not used, so that no
    # non-commercial voice shapes the shipped model. alan, bdl, clb, slt are LGPL-2.1+.
    "rhvoice": ("alan", "bdl", "clb", "slt"),
    "piper": ("joe",),
}
HELDOUT_VOICES: dict[str, tuple[str, ...]] = {"pico": ("en-US", "en-GB")}
# Share of training utterances per family. Kokoro is the most natural and the slowest (~1.3x real time on one
# core, about 85% of the generation time at this share); espeak-ng is kept small, it is what the old model knew.
TRAIN_FAMILIES = {"kokoro": 0.22, "piper": 0.12, "rhvoice": 0.15, "festival": 0.10, "flite": 0.12,
                  "mbrola": 0.12, "espeak": 0.17}
HELDOUT_FAMILIES = {"pico": 1.0}


@dataclass(frozen=True)
class Voice:
    family: str    # synthesiser family: a key of TRAIN_FAMILIES / HELDOUT_FAMILIES
    name: str      # voice within it; Kokoro blends read 'af_heart*0.7+bm_george*0.3'
    tempo: float   # speaking rate relative to the voice's default (> 1 faster)
    pitch: float   # pitch relative to the voice's default (> 1 higher)

    @property
    def speaker(self) -> str:
        return f"{self.family}-{self.name}".replace("*", "x").replace("+", "_")


def espeak_voices() -> list[str]:
    variants = sorted(p.name for p in ESPEAK_VARIANTS_DIR.iterdir()) if ESPEAK_VARIANTS_DIR.is_dir() else []
    return [f"{a}+{v}" for a in ESPEAK_ACCENTS for v in variants] + list(ESPEAK_ACCENTS)


def _kokoro_names() -> list[str]:
    from asr_data.neural import kokoro_voices

    return kokoro_voices()


def draw_voice(rng: random.Random, families: dict[str, float], kokoro_names: list[str] | None = None,
               espeak_names: list[str] | None = None) -> Voice:
    family = rng.choices(list(families), weights=list(families.values()))[0]
    if family == "kokoro":
        names = kokoro_names or _kokoro_names()
        a = rng.choice(names)
        if rng.random() < KOKORO_BLEND_SHARE:
            b = rng.choice([n for n in names if n != a])
            w = round(rng.uniform(0.2, 0.8), 2)
            name = f"{a}*{w}+{b}*{round(1 - w, 2)}"
        else:
            name = a
    elif family == "espeak":
        name = rng.choice(espeak_names or espeak_voices())
    else:
        name = rng.choice({**TRAIN_VOICES, **HELDOUT_VOICES}[family])
    wide = family in ("espeak", "mbrola")  # formant/diphone engines stay intelligible over a wider range
    tempo = round(rng.uniform(0.75, 1.45) if wide else rng.uniform(0.8, 1.3), 3)
    pitch = round(rng.uniform(0.6, 1.5) if wide else rng.uniform(0.85, 1.2), 3)
    return Voice(family, name, tempo, pitch)


def synthesise(text: str, voice: Voice, seed: int) -> tuple[np.ndarray, int]:
    """Say `text` in `voice`: (float32 samples, sample rate)."""
    p = Prosody(voice.tempo, voice.pitch)
    if voice.family in ENGINES:
        return ENGINES[voice.family](text, voice.name, p)
    from asr_data.neural import NEURAL

    return NEURAL[voice.family](text, voice.name, p, seed=seed)
