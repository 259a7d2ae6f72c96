"""The synchronous API (transcribe, stream) and the output writers, against the fake pipelines' server."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import soundfile

import pytest

import asr_client
from asr_client import writers
from asr_client.batch import UtteranceResult
from asr_client.cli import main


async def test_transcribe_a_file_an_array_and_stream_without_asyncio(url, corpus):
    path = corpus.paths["a"]
    result = await asyncio.to_thread(asr_client.transcribe, path, url=url)
    assert result.text == corpus.texts["a"] and result.duration_s > 0
    samples, rate = soundfile.read(path, dtype="int16")
    from_array = await asyncio.to_thread(asr_client.transcribe, samples, sample_rate=rate, url=url)
    assert from_array.text == corpus.texts["a"]
    partials = await asyncio.to_thread(lambda: list(asr_client.stream(path, url=url, chunk_ms=200)))
    assert len(partials) > 1 and partials[-1].text == corpus.texts["a"]
    assert [p.index for p in partials] == list(range(len(partials)))


def test_an_array_needs_its_rate():
    with pytest.raises(ValueError, match="sample_rate"):
        asr_client.transcribe(np.zeros(16000, np.float32))


def result(key: str = "call") -> UtteranceResult:
    words = (("hello", 0.5, 0.9, 0.98), ("there", 1.0, 1.4, 0.9))
    return UtteranceResult(key=key, path=f"/data/{key}.wav", reference="hello there", hypothesis="hello there",
                           duration_s=2.0, elapsed_s=0.1, words=words)


def test_every_writer_writes_its_format(tmp_path):
    written = writers.write_all(result("calls/one"), tmp_path, writers.parse_formats("all"))
    assert sorted(p.name for p in written) == ["one.json", "one.srt", "one.tsv", "one.txt", "one.vtt"]
    folder = tmp_path / "calls"
    assert (folder / "one.txt").read_text() == "hello there\n"
    record = json.loads((folder / "one.json").read_text())
    assert record["text"] == "hello there" and record["words"][1] == {"word": "there", "start": 1.0, "end": 1.4,
                                                                       "confidence": 0.9}
    assert (folder / "one.srt").read_text() == "1\n00:00:00,500 --> 00:00:01,400\nhello there\n"
    assert (folder / "one.vtt").read_text().startswith("WEBVTT\n\n00:00:00.500 --> 00:00:01.400\nhello there")
    assert (folder / "one.tsv").read_text() == "start\tend\ttext\n500\t900\thello\n1000\t1400\tthere\n"
    with pytest.raises(ValueError, match="unknown output format 'doc'"):
        writers.parse_formats("txt,doc")


async def test_output_dir_from_the_command_line(url, corpus, tmp_path, capsys):
    out = tmp_path / "out"
    rc = await asyncio.to_thread(main, ["transcribe", str(corpus.paths["a"]), str(corpus.paths["d"]), "-u", url,
                                        "--output-dir", str(out), "--output-format", "txt", "--no-progress"])
    assert rc == 0
    capsys.readouterr()
    for key in ("a", "d"):
        assert (out / f"{key}.txt").read_text() == corpus.texts[key] + "\n"
    rc = await asyncio.to_thread(main, ["transcribe", str(corpus.paths["a"]), "-u", url, "--output-dir", str(out),
                                        "--output-format", "txt,nope"])
    assert rc == 2 and "unknown output format 'nope'" in capsys.readouterr().err

