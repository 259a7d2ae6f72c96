"""`asr-client` run in-process (in a worker thread: the server lives on the test's event loop)."""

from __future__ import annotations

import asyncio
import io
import json
import sys
import threading
import time

import numpy as np

import pytest

from asr_client.cli import main
from tests.client.tones import tones


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


async def test_transcribe_folder_writes_clean_jsonl_while_the_progress_bar_goes_to_stderr(url, corpus, tmp_path, capsys):
    trans = tmp_path / "trans.txt"
    trans.write_text("a\tthree one four one five\nb\ttwo seven one eight\nc\tnine nine nine\nd\tzero one two three four five six\n")
    results, summary_json = tmp_path / "results.jsonl", tmp_path / "summary.json"
    rc = await asyncio.to_thread(main, [
        "transcribe", str(corpus.folder), "--url", url, "--trans", str(trans), "--concurrency", "2",
        "--output", str(results), "--summary-json", str(summary_json),
    ])
    out, err = capsys.readouterr()
    assert rc == 1  # one utterance failed
    assert out == ""
    records = {r["key"]: r for r in jsonl(results.read_text())}  # every line parses: nothing else got in
    assert sorted(records) == ["a", "b", "c", "corrupt", "d"]
    assert {k: records[k]["text"] for k in "abcd"} == corpus.texts
    assert records["corrupt"]["text"] is None and "corrupt.wav" in records["corrupt"]["error"]
    assert records["c"]["reference"] == "nine nine nine" and len(records["a"]["latency_ms"]) == 1
    assert "5/5" in err and "skipped corrupt: cannot read audio file" in err  # the bar and the skip, on stderr
    assert "WER 5.26% (1/19 words)" in err and "server attention_rescoring:1: 4 requests" in err
    summary = json.loads(summary_json.read_text())
    assert summary["failed"] == 1 and summary["error_rates"]["word_errors"] == 1
    assert summary["error_rates"]["wer"] == pytest.approx(1 / 19)


async def test_transcribe_with_wenet_flags_streams_to_stdout(url, corpus, tmp_path, capsys):
    scp, text = tmp_path / "wav.scp", tmp_path / "text"
    scp.write_text("".join(f"utt_{k}\t{corpus.paths[k]}\n" for k in "bd"))
    text.write_text("".join(f"utt_{k}\t{corpus.texts[k]}\n" for k in "bd"))
    rc = await asyncio.to_thread(main, [
        "transcribe", "--wavscp", str(scp), "--trans", str(text), "--model_name", "streaming_wenet",
        "--streaming", "--wenet-chunks", "-u", url,
    ])
    out, err = capsys.readouterr()
    assert rc == 0
    records = sorted(jsonl(out), key=lambda r: r["key"])  # stdout holds results only, progress is elsewhere
    assert [(r["key"], r["text"], len(r["latency_ms"])) for r in records] == [
        ("utt_b", corpus.texts["b"], 2), ("utt_d", corpus.texts["d"], 3)]
    assert "2/2" in err and "WER 0.00% (0/11 words)" in err and "chunk latency ms: p50" in err


async def test_stream_file_prints_partials_on_stderr_and_the_final_on_stdout(url, corpus, capsys):
    rc = await asyncio.to_thread(main, ["stream", str(corpus.paths["d"]), "--url", url])
    out, err = capsys.readouterr()
    assert rc == 0 and out == corpus.texts["d"] + "\n"
    assert "partial    0.69s: zero one\n" in err and "partial    1.33s: zero one two three four\n" in err
    assert "3 chunks, 1.75 s audio" in err


async def test_stream_stdin_pcm_at_8k_as_json(url, capsys, monkeypatch):
    pcm = (tones("six two eight", rate=8000, seed=3) * 32767).astype("<i2").tobytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(pcm)))
    rc = await asyncio.to_thread(main, ["stream", "-", "--url", url, "--pcm-rate", "8000", "--chunk-ms", "200"])
    out, _ = capsys.readouterr()
    assert rc == 0 and out == "six two eight\n"

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(pcm[:8000])))  # 0.5 s at 8 kHz
    rc = await asyncio.to_thread(main, ["stream", "-", "-u", url, "--pcm-rate", "8000", "--json", "--sequence-id", "5"])
    result = json.loads(capsys.readouterr().out)
    assert rc == 0 and result["text"] == "six two" and result["sequence_id"] == 5
    assert [p["audio_end_s"] for p in result["partials"]] == [0.5] and result["partials"][0]["latency_ms"] > 0


async def test_stream_failures_are_one_clear_line(url, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "sounddevice", None)  # import fails as if not installed
    assert await asyncio.to_thread(main, ["stream", "--microphone", "-u", url]) == 1
    assert "--microphone needs the sounddevice package" in capsys.readouterr().err

    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"\x00" * 64)
    assert await asyncio.to_thread(main, ["stream", str(broken), "-u", url]) == 1
    assert capsys.readouterr().err.startswith("asr-client: cannot read audio file")

    with pytest.raises(SystemExit) as usage:
        main(["stream"])
    assert usage.value.code == 2


class FakeSoundDevice:
    """Stands in for `sounddevice`: RawInputStream feeds a recorded tone to the callback from its own thread."""

    def __init__(self, recording: np.ndarray):
        self.pcm = (recording * 32767).astype("<i2").tobytes()

    def check_input_settings(self, samplerate, channels, dtype):
        assert (samplerate, channels, dtype) == (16000, 1, "int16")

    def RawInputStream(self, samplerate, channels, dtype, blocksize, callback):  # noqa: N802 - sounddevice's name
        assert (samplerate, channels, dtype) == (16000, 1, "int16")
        pcm, block_bytes = self.pcm, blocksize * 2

        class Stream:
            def __enter__(self):
                self.running = True
                self.thread = threading.Thread(target=self.feed)
                self.thread.start()
                return self

            def feed(self):
                for start in range(0, len(pcm), block_bytes):
                    if not self.running:
                        return
                    callback(pcm[start:start + block_bytes], blocksize, None, None)
                    time.sleep(0.001)

            def __exit__(self, *exc_info):
                self.running = False
                self.thread.join()

        return Stream()


async def test_stream_microphone_stops_after_duration(url, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "sounddevice", FakeSoundDevice(tones("one two three four five", seed=4)))
    rc = await asyncio.to_thread(main, ["stream", "--microphone", "--duration", "0.75", "-u", url, "--chunk-ms", "100"])
    out, err = capsys.readouterr()
    assert rc == 0 and out == "one two three\n" and "7 chunks, 0.75 s audio" in err  # 150 ms, then 100 ms


async def test_transcribe_usage_and_input_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as usage:
        main(["transcribe"])
    assert usage.value.code == 2
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("not json\n")
    assert await asyncio.to_thread(main, ["transcribe", str(manifest), "-u", "127.0.0.1:1"]) == 2
    assert "m.jsonl:1: not JSON" in capsys.readouterr().err


async def test_transcribe_against_no_server_says_so_once(corpus, tmp_path, capsys):
    results = tmp_path / "never.jsonl"
    rc = await asyncio.to_thread(main, ["transcribe", str(corpus.paths["a"]), "-u", "127.0.0.1:1", "-o", str(results)])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("cannot reach server at 127.0.0.1:1") == 1 and not results.exists()


async def test_a_wrong_model_or_url_is_one_line_that_says_what_to_do(url, corpus, capsys):
    wav = str(corpus.paths["a"])
    assert await asyncio.to_thread(main, ["stream", wav, "-u", url, "-m", "attention_rescoring"]) == 1
    err = capsys.readouterr().err
    assert "model 'attention_rescoring' does not stream" in err and "streaming models here: streaming_wenet" in err
    assert await asyncio.to_thread(main, ["transcribe", wav, "-u", url, "-m", "streaming_wenet",
                                          "--no-progress"]) == 1
    assert "is a streaming model: add --streaming" in capsys.readouterr().err
    assert await asyncio.to_thread(main, ["transcribe", wav, "-u", url, "-m", "nope", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "model 'nope' is not available" in err and "the server has: attention_rescoring, streaming_wenet" in err
    # a URL typed with a scheme works; Triton's HTTP port is named as such
    assert await asyncio.to_thread(main, ["transcribe", wav, "-u", f"http://{url}/", "--no-progress"]) == 0
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["transcribe", wav, "-u", "http://127.0.0.1:8000"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach server at 127.0.0.1:8000" in err and "asr-client speaks gRPC" in err


async def test_stream_stdin_sniffs_a_piped_file_and_wants_a_rate_for_raw_pcm(url, corpus, capsys, monkeypatch):
    wav = corpus.paths["b"].read_bytes()  # an 8 kHz WAV piped in: decoded, not read as PCM
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(wav)))
    assert await asyncio.to_thread(main, ["stream", "-", "-u", url]) == 0
    assert capsys.readouterr().out == corpus.texts["b"] + "\n"
    pcm = (tones("six two", rate=16000, seed=4) * 32767).astype("<i2").tobytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(pcm)))
    assert await asyncio.to_thread(main, ["stream", "-", "-u", url]) == 1
    assert "for raw s16le mono PCM give its rate with --pcm-rate" in capsys.readouterr().err


def test_hotwords_take_a_file_or_an_inline_list(tmp_path):
    from asr_client.cli import build_parser

    phrases = tmp_path / "hot.txt"
    phrases.write_text("# names\nchairs :2\nbeach\tthree\n\nsun dial\n")
    args = build_parser().parse_args(["transcribe", "x.wav", "--hotwords", str(phrases)])
    assert args.hotwords == "chairs :2\nbeach\tthree\nsun dial"
    from asr_server.asr.decoding.hotwords import parse_phrases
    with pytest.raises(ValueError, match="score"):  # what the server then says of a bad score in the file
        parse_phrases(args.hotwords, 2.0)
    args = build_parser().parse_args(["stream", "x.wav", "--hotwords", "chairs|beach:3"])
    assert args.hotwords == "chairs|beach:3"


def test_a_long_inline_hotword_list_is_not_taken_for_a_file():
    from asr_client.cli import build_parser

    inline = "|".join(f"phrase number {i}" for i in range(40))  # longer than a file name can be
    assert build_parser().parse_args(["stream", "x.wav", "--hotwords", inline]).hotwords == inline


async def test_a_microphone_without_an_input_device_is_one_line(url, capsys, monkeypatch):
    class NoDevice:
        def check_input_settings(self, **settings):
            raise ValueError("No input device matching settings")

    monkeypatch.setitem(sys.modules, "sounddevice", NoDevice())
    assert await asyncio.to_thread(main, ["stream", "--microphone", "-u", url]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "asr-client: no usable input device: No input device matching settings"
