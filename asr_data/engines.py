"""Command-line speech synthesisers from Debian: espeak-ng (+ MBROLA voices), flite, festival, SVOX Pico,
RHVoice. Each call takes the text to say and a prosody draw and returns (float32 samples, sample rate).

Speed and pitch are drawn per utterance through each engine's own controls, so one voice gives many
renditions (espeak-ng, flite and the others are deterministic for the same settings).
"""

from __future__ import annotations

import io
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

TIMEOUT_S = 60


@dataclass(frozen=True)
class Prosody:
    """Per-utterance variation: tempo (1.0 = the voice's default), pitch shift in relative units."""
    tempo: float = 1.0   # > 1 is faster
    pitch: float = 1.0   # > 1 is higher


def _run(cmd: list[str], stdin: bytes | None = None) -> bytes:
    return subprocess.run(cmd, input=stdin, check=True, capture_output=True, timeout=TIMEOUT_S).stdout


def _read(data_or_path: bytes | Path) -> tuple[np.ndarray, int]:
    src = io.BytesIO(data_or_path) if isinstance(data_or_path, bytes) else data_or_path
    audio, sr = sf.read(src, dtype="float32", always_2d=True)
    return audio.mean(axis=1), sr


def _via_file(cmd_for: callable, stdin: bytes | None = None) -> tuple[np.ndarray, int]:
    """Engines that only write a file: run into a temporary wav and read it back."""
    with tempfile.TemporaryDirectory(prefix="tts_") as tmp:
        out = Path(tmp) / "out.wav"
        _run(cmd_for(str(out)), stdin)
        return _read(out)


def espeak(text: str, voice: str, p: Prosody) -> tuple[np.ndarray, int]:
    """espeak-ng; voice e.g. 'en-us+m3' or an MBROLA voice 'mb-us1' (needs the mbrola-* package)."""
    wpm = int(np.clip(175 * p.tempo, 80, 400))
    pitch = int(np.clip(50 * p.pitch, 5, 95))
    return _read(_run(["espeak-ng", "-v", voice, "-s", str(wpm), "-p", str(pitch), "--stdout", text]))


def flite(text: str, voice: str, p: Prosody) -> tuple[np.ndarray, int]:
    """CMU flite; voice one of kal, kal16, awb, rms, slt."""
    return _via_file(lambda out: ["flite", "-voice", voice, "--setf", f"duration_stretch={1 / p.tempo:.3f}",
                                  "--setf", f"int_f0_target_mean={_flite_f0(voice) * p.pitch:.1f}",
                                  "-t", text, "-o", out])


def _flite_f0(voice: str) -> float:
    return {"slt": 160.0, "awb": 110.0, "rms": 100.0}.get(voice, 105.0)


FESTIVAL_VOICES = {"kal": "voice_kal_diphone", "ked": "voice_ked_diphone",
                   "slt_hts": "voice_cmu_us_slt_arctic_hts"}


def festival(text: str, voice: str, p: Prosody) -> tuple[np.ndarray, int]:
    """festival with utt.synth + utt.save.wave (SayText wants an audio device)."""
    said = re.sub(r'["\\]', " ", text)
    return _via_file(lambda out: [
        "festival", "-b", f"({FESTIVAL_VOICES[voice]})",
        f"(Parameter.set 'Duration_Stretch {1 / p.tempo:.3f})",
        f'(utt.save.wave (utt.synth (Utterance Text "{said}")) "{out}" (quote riff))'])


def pico(text: str, voice: str, p: Prosody) -> tuple[np.ndarray, int]:
    """SVOX Pico; voice en-US or en-GB. Speed and pitch through its markup tags (percent)."""
    said = re.sub(r"[<>&]", " ", text)
    marked = f"<speed level='{int(100 * p.tempo)}'><pitch level='{int(100 * p.pitch)}'>{said}</pitch></speed>"
    return _via_file(lambda out: ["pico2wave", "-l", voice, "-w", out, marked])


def rhvoice(text: str, voice: str, p: Prosody) -> tuple[np.ndarray, int]:
    """RHVoice; voice one of alan, bdl, clb, slt (evgeniy-eng and lyubov also speak English). Text on stdin."""
    rate = int(np.clip(100 * p.tempo, 50, 200))    # percent of the voice's default (100), 200 at most
    pitch = int(np.clip(100 * p.pitch, 50, 200))
    return _via_file(lambda out: ["RHVoice-test", "-p", voice, "-r", str(rate), "-t", str(pitch), "-o", out],
                     stdin=text.encode())


ENGINES = {"espeak": espeak, "mbrola": espeak, "flite": flite, "festival": festival, "pico": pico,
           "rhvoice": rhvoice}
