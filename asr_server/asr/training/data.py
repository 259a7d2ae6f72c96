"""Kaldi-style data directories (``wav.scp`` + ``text``) and the 16 kHz audio they list."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

SAMPLE_RATE = 16000  # Hz; the corpus is written at this rate and the fbank expects it


def read_data_dir(d: Path) -> list[tuple[str, str, str]]:
    """(utt, wav path, text) from wav.scp + text."""
    wavs = dict(line.split(maxsplit=1) for line in (d / "wav.scp").read_text(encoding="utf-8").splitlines()
                if line.strip())
    rows = []
    for line in (d / "text").read_text(encoding="utf-8").splitlines():
        parts = line.split(maxsplit=1)
        if len(parts) == 2 and parts[0] in wavs:
            rows.append((parts[0], wavs[parts[0]].strip(), parts[1].strip()))
    return rows


def utterance_seconds(rows: list[tuple[str, str, str]]) -> list[float]:
    """Each row's audio duration, from its file's header (a file listed twice is read once)."""
    seconds: dict[str, float] = {}
    for _, path, _ in rows:
        if path not in seconds:
            info = sf.info(path)
            seconds[path] = info.frames / info.samplerate
    return [seconds[path] for _, path, _ in rows]


def load_wav(path: str) -> np.ndarray:
    wav, sr = sf.read(path, dtype="float32")
    if sr != SAMPLE_RATE:
        raise ValueError(f"{path}: {sr} Hz, expected {SAMPLE_RATE}")
    return wav
