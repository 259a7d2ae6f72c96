"""A live in-process server with the fake pipelines, and a folder of generated test audio."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.client.fake_asr import fake_asr_repo
from tests.client.tones import tones
from tests.conftest import running_server

# key -> (spoken digits, how the file is written)
CORPUS = {
    "a": ("three one four one five", "16k"),
    "b": ("two seven one eight", "8k"),
    "c": ("nine nine eight", "stereo"),
    "d": ("zero one two three four five six", "16k"),
}


@dataclass(frozen=True)
class Corpus:
    folder: Path
    texts: dict  # key -> spoken words
    paths: dict  # key -> wav path
    corrupt: Path  # a .wav that is not audio


def write_corpus(folder: Path) -> Corpus:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for seed, (key, (text, kind)) in enumerate(CORPUS.items()):
        path = folder / f"{key}.wav"
        if kind == "8k":
            soundfile.write(path, tones(text, rate=8000, seed=seed), 8000, subtype="PCM_16")
        elif kind == "stereo":
            mono = tones(text, seed=seed)
            # Right channel quieter and in phase: the mono mix keeps the tone, at 3/4 amplitude.
            soundfile.write(path, np.stack([mono, 0.5 * mono], axis=1), 16000, subtype="PCM_16")
        else:
            soundfile.write(path, tones(text, seed=seed), 16000, subtype="PCM_16")
        paths[key] = path
    corrupt = folder / "corrupt.wav"
    corrupt.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt garbage that is not a wave file")
    return Corpus(folder, {k: t for k, (t, _) in CORPUS.items()}, paths, corrupt)


@pytest.fixture
def corpus(tmp_path: Path) -> Corpus:
    return write_corpus(tmp_path / "audio")


@pytest.fixture
async def asr_server(tmp_path: Path):
    # gRPC is all the client speaks; HTTP and metrics stay off.
    async with running_server(fake_asr_repo(tmp_path / "repo"), allow_http=False, allow_metrics=False) as server:
        yield server


@pytest.fixture
def url(asr_server) -> str:
    return f"127.0.0.1:{asr_server.grpc_port}"
