"""Audio loading (mono mix, resampling, corrupt files, raw PCM) and input lists, without a server."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from asr_client import chunking
from asr_client.audio import AudioError, load_audio, read_pcm16_blocks, resample
from asr_client.inputs import InputError, collect_utterances
from asr_client.tensors import wav_inputs
from tests.client.tones import tones


def test_8k_stereo_file_becomes_16k_mono_with_its_tone(tmp_path: Path):
    left = tones("five", rate=8000, noise=0.0)
    path = tmp_path / "stereo8k.wav"
    soundfile.write(path, np.stack([left, np.zeros_like(left)], axis=1), 8000)
    audio = load_audio(path)
    assert (audio.source_rate, audio.source_channels) == (8000, 2)
    assert len(audio.samples) == 4000 and audio.samples.dtype == np.float32
    # Channels (left, 0) average to left/2; the 900 Hz tone survives resampling.
    spectrum = np.abs(np.fft.rfft(audio.samples))
    assert np.argmax(spectrum) * 16000 / len(audio.samples) == pytest.approx(900, abs=4)
    assert np.max(np.abs(audio.samples)) == pytest.approx(0.25, abs=0.01)  # tones() amplitude 0.5, halved


@pytest.mark.parametrize("content", [b"", b"RIFF\x00\x00\x00\x00WAVEjunk", b"not audio at all" * 10])
def test_unreadable_file_raises_audio_error_naming_it(tmp_path: Path, content: bytes):
    path = tmp_path / "bad.wav"
    path.write_bytes(content)
    with pytest.raises(AudioError, match="bad.wav"):
        load_audio(path)
    with pytest.raises(AudioError, match="missing.wav"):
        load_audio(tmp_path / "missing.wav")


async def test_stdin_pcm_blocks_at_8k_are_resampled_without_losing_samples():
    samples = tones("one two", rate=8000, noise=0.0)
    pcm = (samples * 32767).astype("<i2").tobytes() + b"\x01"  # a dangling half sample is dropped
    blocks = [b async for b in read_pcm16_blocks(io.BytesIO(pcm), block_samples=1000, rate=8000)]
    joined = np.concatenate(blocks)
    assert len(joined) == 8000  # 0.5 s at 16 kHz: the streaming resampler flushes its tail
    reference = resample(samples, 8000)
    assert np.max(np.abs(joined[200:-200] - reference[200:-200])) < 0.01


def test_chunk_plans_default_and_wenet():
    # the first chunk carries the decoding window's look-ahead (50 ms), so each later 640 ms chunk completes a
    # window of 67 fbank frames (10960 + 10240 k samples) instead of waiting for the next chunk
    plan = chunking.ChunkPlan.from_options(640, wenet_chunks=False)
    sizes = [len(c) for c in chunking.split(np.zeros(40_000, np.float32), plan)]
    assert sizes == [11040, 10240, 10240, 8480]
    ends = np.cumsum(sizes)[:-1]
    assert all(10960 + 10240 * k <= end < 10960 + 10240 * k + 160 for k, end in enumerate(ends))
    even = chunking.ChunkPlan.from_options(640, wenet_chunks=False, lookahead_ms=0)
    assert [len(c) for c in chunking.split(np.zeros(25_000, np.float32), even)] == [10240, 10240, 4520]
    wenet = chunking.ChunkPlan.from_options(640, wenet_chunks=True)
    chunks = list(chunking.split(np.ones(28_000, np.float32), wenet))
    assert [len(c) for c in chunks] == [11040, 10240, 6720]
    last = wenet.padded(chunks[2], 2)
    wav, lens = wav_inputs(last, len(chunks[2]))
    assert wav.shape() == [1, 10240] and lens.shape() == [1, 1]
    assert last[6720:].sum() == 0 and last[:6720].sum() == 6720
    with pytest.raises(ValueError):
        chunking.ChunkPlan.from_options(0, wenet_chunks=False)
    with pytest.raises(ValueError):
        chunking.ChunkPlan.from_options(640, wenet_chunks=False, lookahead_ms=-1)


async def test_rechunk_and_flag_last_cut_blocks_of_any_length():
    async def blocks():
        for size in (100, 3000, 7, 2000, 893):
            yield np.full(size, size, np.float32)

    plan = chunking.ChunkPlan(first_samples=2500, next_samples=1500, pad=False)
    out = [(len(c), last) async for c, last in chunking.flag_last(chunking.rechunk(blocks(), plan))]
    assert out == [(2500, False), (1500, False), (1500, False), (500, True)]


def test_inputs_folder_scp_text_manifest_and_overrides(tmp_path: Path):
    (tmp_path / "set" / "spk1").mkdir(parents=True)
    (tmp_path / "set" / "spk2").mkdir()
    for name in ("set/spk1/x.wav", "set/spk2/x.wav", "set/spk2/y.flac", "set/notes.txt"):
        (tmp_path / name).write_bytes(b"")
    folder = collect_utterances([tmp_path / "set"])
    assert [(u.key, u.path.name) for u in folder] == [("spk1/x", "x.wav"), ("spk2/x", "x.wav"), ("spk2/y", "y.flac")]

    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "wav.scp").write_text("u1 audio/u1.wav\nu2\t/abs/u2.wav\n\n")
    (lists / "text").write_text("u1 hello  world\nu2\tgood bye\n")
    scp = collect_utterances([lists / "wav.scp"])
    assert [(u.key, str(u.path), u.reference) for u in scp] == [
        ("u1", str(lists / "audio" / "u1.wav"), "hello world"), ("u2", "/abs/u2.wav", "good bye")]
    assert collect_utterances([lists]) == scp  # a folder holding wav.scp means that list

    trans = tmp_path / "trans.txt"
    trans.write_text("u1\tother words\n")
    overridden = collect_utterances([lists / "wav.scp"], references=trans, data_dir=tmp_path / "data")
    assert overridden[0].reference == "other words" and overridden[0].path == tmp_path / "data" / "audio" / "u1.wav"
    assert overridden[1].reference == "good bye"

    manifest = tmp_path / "m.jsonl"
    manifest.write_text("\n".join(json.dumps(e) for e in [
        {"audio_filepath": "a.wav", "text": "one", "duration": 1.0},
        {"key": "k2", "wav": "/w/b.wav"},
        {"path": "a.wav"},
    ]) + "\n")
    listed = collect_utterances([manifest])
    assert [(u.key, u.path, u.reference) for u in listed] == [
        ("a", tmp_path / "a.wav", "one"), ("k2", Path("/w/b.wav"), None), ("a#1", tmp_path / "a.wav", None)]

    (tmp_path / "broken.jsonl").write_text('{"text": "no path"}\n')
    with pytest.raises(InputError, match="broken.jsonl:1: no audio path"):
        collect_utterances([tmp_path / "broken.jsonl"])
    (tmp_path / "bad.scp").write_text("lonely\n")
    with pytest.raises(InputError, match="bad.scp:1"):
        collect_utterances([tmp_path / "bad.scp"])


def encode_with_av(path: Path, samples: np.ndarray, rate: int, codec: str) -> None:
    av = pytest.importorskip("av", reason="PyAV decodes what soundfile cannot")
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1).astype(np.float32), format="flt", layout="mono")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


def test_formats_soundfile_cannot_read_are_decoded_with_pyav(tmp_path: Path):
    samples = tones("five", rate=22050, noise=0.0)
    path = tmp_path / "memo.m4a"
    encode_with_av(path, samples, 22050, "aac")
    audio = load_audio(path)
    assert audio.source_rate == 22050 and audio.source_channels == 1
    assert abs(len(audio.samples) - len(samples) * 16000 / 22050) < 0.1 * 16000  # AAC pads its frames
    spectrum = np.abs(np.fft.rfft(audio.samples))
    assert np.argmax(spectrum) * 16000 / len(audio.samples) == pytest.approx(900, abs=10)


def test_a_missing_file_says_no_such_file_and_a_folder_says_what_it_skipped(tmp_path: Path, caplog):
    with pytest.raises(AudioError, match="missing.wav: No such file"):
        load_audio(tmp_path / "missing.wav")
    folder = tmp_path / "calls"
    folder.mkdir()
    soundfile.write(folder / "a.wav", tones("one", rate=16000), 16000)
    (folder / "b.m4a").write_bytes(b"")  # a known format: listed, and reported if unreadable
    (folder / "c.voc").write_bytes(b"")
    (folder / "notes.txt").write_text("not audio, not worth a word")
    with caplog.at_level("WARNING", logger="asr_client"):
        keys = [u.key for u in collect_utterances([folder])]
    assert keys == ["a", "b"]
    assert "skipped 1 file(s)" in caplog.text and "c.voc" in caplog.text and "notes.txt" not in caplog.text
