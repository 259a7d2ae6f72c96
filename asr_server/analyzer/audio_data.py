"""perf_analyzer --input-data JSON made of real audio, for the ASR ensembles' WAV / WAV_LENS inputs.

Offline (unary) models get one entry per utterance; perf_analyzer cycles through them. Streaming models get
one stream per utterance, cut into chunks of `chunk_ms` (the last one shorter): perf_analyzer sends each stream
as one sequence, START on its first chunk and END on its last. Samples travel base64-encoded (raw little-endian
float32), which keeps the file small and the audio bit-exact.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Sequence

import numpy as np

SAMPLE_RATE = 16000  # Hz; what the ASR models take


def load_utterances(source: Path, limit: int = 0) -> list[np.ndarray]:
    """Audio of a Kaldi-style folder (wav.scp with paths relative to it) or of every audio file in a folder,
    resampled to 16 kHz mono float32."""
    from asr_client.audio import load_audio

    source = Path(source)
    if (source / "wav.scp").is_file():
        paths = [source / line.split(maxsplit=1)[1]
                 for line in (source / "wav.scp").read_text().splitlines() if line.strip()]
    else:
        paths = sorted(p for p in source.iterdir() if p.suffix.lower() in (".wav", ".flac", ".ogg", ".mp3"))
    if limit:
        paths = paths[:limit]
    if not paths:
        raise ValueError(f"no audio in {source}")
    return [np.ascontiguousarray(load_audio(p).samples, dtype=np.float32) for p in paths]


def _entry(samples: np.ndarray, wav: str, wav_lens: str) -> dict:
    return {
        wav: {"b64": base64.b64encode(samples.astype("<f4").tobytes()).decode("ascii"), "shape": [int(samples.size)]},
        wav_lens: {"content": [int(samples.size)], "shape": [1]},
    }


def offline_data(utterances: Sequence[np.ndarray], wav: str = "WAV", wav_lens: str = "WAV_LENS") -> dict:
    return {"data": [_entry(u, wav, wav_lens) for u in utterances]}


def streaming_data(utterances: Sequence[np.ndarray], chunk_ms: float = 640.0, wav: str = "WAV",
                   wav_lens: str = "WAV_LENS") -> dict:
    chunk = int(round(chunk_ms * SAMPLE_RATE / 1000))
    if chunk <= 0:
        raise ValueError("chunk_ms must be positive")
    streams = [[_entry(u[i:i + chunk], wav, wav_lens) for i in range(0, u.size, chunk)] for u in utterances]
    return {"data": streams}


def write(data: dict, path: Path) -> Path:
    Path(path).write_text(json.dumps(data))
    return Path(path)
