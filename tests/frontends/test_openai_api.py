"""OpenAI's transcription endpoint, driven by the official `openai` client against the bundled model: every
response format, word and segment times, the long-audio path, and errors in OpenAI's shape."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

from asr_client.audio import load_audio
from tests.conftest import BUNDLED_REPO, ROOT

openai = pytest.importorskip("openai", reason="the official openai client (the dev extra installs it)")

pytestmark = pytest.mark.skipif(
    not (BUNDLED_REPO / "encoder" / "1" / "encoder.onnx").exists(),
    reason="the bundled model's graphs are not exported: run bash scripts/build_demo_repo.sh",
)
DATA = ROOT / "tests" / "data" / "demo_utts"
UTT, TEXT = "test_b_000000", "can you bring two chairs to the beach"


def wav_bytes(samples: np.ndarray) -> bytes:
    out = io.BytesIO()
    soundfile.write(out, samples, 16000, format="WAV", subtype="PCM_16")
    return out.getvalue()


async def test_the_official_client_gets_every_format(running):
    async with running(BUNDLED_REPO, allow_grpc=False) as server:
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{server.http_port}/v1", api_key="unused")
        path = DATA / f"{UTT}.flac"
        create = client.audio.transcriptions.create
        assert (await create(model="whisper-1", file=path)).text == TEXT
        assert (await create(model="whisper-1", file=path, response_format="text")).strip() == TEXT
        srt = await create(model="whisper-1", file=path, response_format="srt")
        assert srt.startswith("1\n00:00:0") and TEXT.split()[0] in srt
        vtt = await create(model="whisper-1", file=path, response_format="vtt")
        assert vtt.startswith("WEBVTT") and "-->" in vtt
        verbose = await create(model="whisper-1", file=path, response_format="verbose_json",
                               timestamp_granularities=["word", "segment"])
        assert verbose.text == TEXT and verbose.duration > 1
        assert [w.word for w in verbose.words] == TEXT.split()
        assert all(0 <= w.start <= w.end <= verbose.duration for w in verbose.words)
        assert verbose.segments and verbose.segments[0].text.startswith("can you")
        # a served model by name works too; a long file goes through the long-audio path
        samples = load_audio(path).samples
        pause = np.zeros(16000, np.float32)
        long = np.concatenate([samples, pause] * 20)  # ~60 s: over the one-request limit
        result = await create(model="attention_rescoring", file=("long.wav", wav_bytes(long)),
                              response_format="verbose_json", timestamp_granularities=["word"])
        assert result.duration > 55 and result.text.count("chairs") >= 18
        starts = [w.start for w in result.words]
        assert starts == sorted(starts) and starts[-1] > 50
        await client.close()


async def test_errors_come_back_in_openais_shape(running):
    async with running(BUNDLED_REPO, allow_grpc=False) as server:
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{server.http_port}/v1", api_key="unused")
        with pytest.raises(openai.BadRequestError) as info:
            await client.audio.transcriptions.create(model="whisper-1", file=("notes.txt", b"not audio at all"))
        assert info.value.body["type"] == "invalid_request_error" and info.value.body["param"] == "file"
        assert "cannot read audio file notes.txt" in info.value.body["message"]
        with pytest.raises(openai.BadRequestError) as info:
            await client.audio.transcriptions.create(model="whisper-1", file=DATA / f"{UTT}.flac",
                                                     response_format="doc")
        assert info.value.body["param"] == "response_format"
        await client.close()


async def test_a_file_longer_than_the_cap_is_refused_before_it_is_decoded(running, monkeypatch):
    from asr_server.protocol import openai_api

    monkeypatch.setattr(openai_api, "MAX_AUDIO_S", 1.0)
    async with running(BUNDLED_REPO, allow_grpc=False) as server:
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{server.http_port}/v1", api_key="unused")
        with pytest.raises(openai.BadRequestError) as info:
            await client.audio.transcriptions.create(model="whisper-1", file=DATA / f"{UTT}.flac")
        assert "at most 1 s" in info.value.body["message"] and info.value.body["param"] == "file"
        await client.close()


async def test_the_python_api_gives_words_with_times(running):
    import asyncio

    import asr_client

    async with running(BUNDLED_REPO, allow_http=False) as server:
        url = f"127.0.0.1:{server.grpc_port}"
        result = await asyncio.to_thread(asr_client.transcribe, DATA / f"{UTT}.flac", url=url)
    assert result.text == TEXT and [w.word for w in result.words] == TEXT.split()
    assert 0 <= result.words[0].start < result.words[0].end <= result.words[1].start + 0.01
