"""scripts/relay_gpu.py pack: a leg's Kaldi dir as Ogg/Opus that soundfile (as training reads it) decodes back,
real speech first, stopping at the size budget (what travels to a GPU machine is 64 MiB)."""

from __future__ import annotations


import numpy as np
import soundfile as sf

from tests.helpers.scripts import load_script


def test_pack_writes_opus_that_reads_back_real_speech_first(tmp_path):
    relay = load_script("relay_gpu")
    src = tmp_path / "train"
    src.mkdir()
    t = np.arange(32000) / 16000
    scp, text = [], []
    for utt in ("train_020001", "fotaq_train_a", "train_020000"):
        path = src / f"{utt}.flac"
        sf.write(path, (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000, subtype="PCM_16")
        scp.append(f"{utt} {path}\n")
        text.append(f"{utt} words of {utt}\n")
    (src / "wav.scp").write_text("".join(scp))
    (src / "text").write_text("".join(text))
    out = tmp_path / "pack"
    assert relay.main(["pack", "--data", str(src), "--out", str(out)]) == 0
    utts = [line.split()[0] for line in (out / "wav.scp").read_text().splitlines()]
    assert utts == ["fotaq_train_a", "train_020000", "train_020001"]
    audio, rate = sf.read(out / "audio" / "fotaq_train_a.opus", dtype="float32")
    assert rate == 16000 and abs(audio.size - 32000) < 2000 and np.abs(audio).max() > 0.1
    assert (out / "text").read_text().splitlines()[0] == "fotaq_train_a words of fotaq_train_a"
    # a budget smaller than two files keeps the first only
    assert relay.main(["pack", "--data", str(src), "--out", str(out), "--max-mib",
                       str((out / "audio" / "fotaq_train_a.opus").stat().st_size * 1.5 / 2**20)]) == 0
    assert len((out / "wav.scp").read_text().splitlines()) == 1
