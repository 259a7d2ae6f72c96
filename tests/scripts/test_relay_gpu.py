"""scripts/relay_gpu.py: `pack` writes a leg's Kaldi dir as Ogg/Opus that soundfile (as training reads it) decodes
back, real speech first, stopping at the size budget (what travels to a GPU machine is 64 MiB); `train` continues
the relay's schedule; what it imports is on the GPU image or carried."""

from __future__ import annotations

import collections
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from tests.conftest import ROOT
from tests.helpers.scripts import load_script


def _tone_dir(root: Path, utts: list[str], seconds: float = 2.0) -> Path:
    """A Kaldi dir of 440 Hz tones, one per utterance id."""
    root.mkdir()
    t = np.arange(int(seconds * 16000)) / 16000
    scp, text = [], []
    for utt in utts:
        path = root / f"{utt}.flac"
        sf.write(path, (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000, subtype="PCM_16")
        scp.append(f"{utt} {path}\n")
        text.append(f"{utt} words of {utt}\n")
    (root / "wav.scp").write_text("".join(scp))
    (root / "text").write_text("".join(text))
    return root


def test_pack_writes_opus_at_its_bitrate_that_reads_back(tmp_path, monkeypatch):
    relay = load_script("relay_gpu")
    src = _tone_dir(tmp_path / "train", ["train_020001", "fotaq_train_a", "train_020000"])
    out = tmp_path / "pack"
    assert relay.main(["pack", "--data", str(src), "--out", str(out), "--max-mib", "8"]) == 0
    utts = [line.split()[0] for line in (out / "wav.scp").read_text().splitlines()]
    assert utts == ["train_020000", "fotaq_train_a", "train_020001"]
    audio, rate = sf.read(out / "audio" / "fotaq_train_a.opus", dtype="float32")
    assert rate == 16000 and abs(audio.size - 32000) < 2000 and np.abs(audio).max() > 0.1
    assert (out / "text").read_text().splitlines()[1] == "fotaq_train_a words of fotaq_train_a"
    # at the bitrate the size budget assumes (a tone of 2 s: the Ogg pages' overhead weighs more than in speech)
    kbps = 8 * (out / "audio" / "fotaq_train_a.opus").stat().st_size / 2 / 1000
    assert relay.OPUS_KBPS * 0.8 < kbps < relay.OPUS_KBPS * 1.4, kbps
    # a budget smaller than two files keeps the first only
    monkeypatch.setattr(relay, "MIN_PACK_MIB", 0)
    assert relay.main(["pack", "--data", str(src), "--out", str(out), "--max-mib",
                       str((out / "audio" / "fotaq_train_a.opus").stat().st_size * 1.5 / 2**20)]) == 0
    assert len((out / "wav.scp").read_text().splitlines()) == 1
    # and one smaller than any file is refused, not an empty pack for the GPU to fail on
    with pytest.raises(SystemExit, match="no utterance fits"):
        relay.main(["pack", "--data", str(src), "--out", str(out), "--max-mib", "0.0001"])


def test_a_pack_is_refused_before_the_wheels_it_travels_with_or_without_room(tmp_path, monkeypatch):
    relay = load_script("relay_gpu")
    src = _tone_dir(tmp_path / "train", ["train_000000"])
    monkeypatch.setattr(relay, "REPO", tmp_path)
    with pytest.raises(SystemExit, match="wheels` first"):
        relay.main(["pack", "--data", str(src), "--out", str(tmp_path / "pack")])
    with pytest.raises(SystemExit, match="are left for the pack"):
        relay.main(["pack", "--data", str(src), "--out", str(tmp_path / "pack"), "--max-mib", "1"])


def test_a_pack_spreads_every_source_so_any_budget_keeps_the_mix():
    relay = load_script("relay_gpu")
    utts = ["train_000002", "fotaq_train_b", "train_000001", "bass_train_a", "train_000003", "drascula_train_c"]
    assert relay.pack_order(utts) == ["train_000001", "bass_train_a", "drascula_train_c", "fotaq_train_b",
                                      "train_000002", "train_000003"]
    sizes = {"bass_": 300, "fotaq_": 100, "drascula_": 20, "synthetic": 200}
    many = [f"{prefix if prefix != 'synthetic' else 'train_'}{i:05d}" for prefix, n in sizes.items() for i in range(n)]
    order = relay.pack_order(many)
    assert sorted(order) == sorted(many)
    for kept in (10, 77, 300, 599):
        counts = collections.Counter(relay.source_of(u) for u in order[:kept])
        for source, n in sizes.items():
            assert abs(counts[source] - kept * n / len(many)) <= 1, (kept, source, counts)


def test_the_opus_level_falls_back_where_nothing_can_be_measured():
    relay = load_script("relay_gpu")
    t = np.arange(16000 * 4) / 16000
    speechlike = (0.3 * np.sin(2 * np.pi * 300 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)
    level = relay.opus_level([(speechlike, 16000)], relay.OPUS_KBPS)
    assert 0.9 < level < 1.0
    assert relay.opus_level([], relay.OPUS_KBPS) == relay.DEFAULT_OPUS_LEVEL
    assert relay.opus_level([(np.zeros(800, np.float32), 16000)], relay.OPUS_KBPS) == relay.DEFAULT_OPUS_LEVEL


def test_unpack_decodes_the_pack_to_wav_once(tmp_path):
    relay = load_script("relay_gpu")
    src = _tone_dir(tmp_path / "train", ["fotaq_train_a", "train_000000"])
    pack = tmp_path / "pack"
    assert relay.main(["pack", "--data", str(src), "--out", str(pack), "--max-mib", "8"]) == 0
    data = relay.unpack(pack, tmp_path / "wav", 2)
    rows = dict(line.split(maxsplit=1) for line in (data / "wav.scp").read_text().splitlines())
    assert sorted(rows) == ["fotaq_train_a", "train_000000"]
    audio, rate = sf.read(rows["fotaq_train_a"], dtype="float32")
    assert rate == 16000 and abs(audio.size - 32000) < 2000 and np.abs(audio).max() > 0.1
    assert (data / "text").read_text() == (pack / "text").read_text()
    stamp = Path(rows["fotaq_train_a"]).stat().st_mtime_ns
    relay.unpack(pack, tmp_path / "wav", 2)  # a second run on the same machine reuses it
    assert Path(rows["fotaq_train_a"]).stat().st_mtime_ns == stamp


def test_the_pack_budget_is_what_the_tree_and_the_wheels_leave_of_what_travels(tmp_path, monkeypatch):
    """The device tool carries the working tree (tracked and untracked files git does not ignore) with the pack
    and the wheels: 64 MiB in all, or the call is refused."""
    relay = load_script("relay_gpu")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/relay_pack/\n/.whl/\n")
    (tmp_path / "model.bin").write_bytes(b"\0" * 10 * 2**20)
    (tmp_path / ".whl").mkdir()
    (tmp_path / ".whl" / "a.whl").write_bytes(b"\0" * 2**20)
    (tmp_path / "relay_pack").mkdir()
    (tmp_path / "relay_pack" / "old.opus").write_bytes(b"\0" * 5 * 2**20)  # an earlier pack: replaced, not added
    monkeypatch.setattr(relay, "REPO", tmp_path)
    budget = relay.travel_budget_mib()
    assert budget == pytest.approx(64 - 10 - 1 - relay.TRAVEL_MARGIN_MIB, abs=0.01)


def test_a_gpu_leg_trains_with_the_relay_schedule_and_the_tree_on_its_path(tmp_path, monkeypatch):
    """The GPU leg continues the network and schedule of relay.json, keys added since it was written
    (frozen_convs) included, and train.py finds the project in the tree it runs from (nothing is installed on
    the GPU machine)."""
    relay = load_script("relay_gpu")
    state = json.loads((relay.STATE / "relay.json").read_text())
    state["schedule"]["frozen_convs"] = 2
    (tmp_path / "relay.json").write_text(json.dumps(state))
    monkeypatch.setattr(relay, "STATE", tmp_path)
    runs = []
    monkeypatch.setattr(relay.subprocess, "run", lambda cmd, **kw: runs.append((cmd, kw["env"])))
    monkeypatch.setattr(relay.shutil, "copyfile", lambda *a: None)
    monkeypatch.setattr(relay, "unpack", lambda pack, dest, workers: dest)
    monkeypatch.setenv("PYTHONPATH", "/tmp/site")
    out = tmp_path / "out"
    out.mkdir()
    assert relay.main(["train", "--pack", str(tmp_path / "pack"), "--out", str(out), "--exp", str(tmp_path / "exp"),
                       "--minutes", "1"]) == 0
    (training, env), (finalize, _) = runs
    assert training[training.index("--frozen-convs") + 1] == "2"
    assert training[training.index("--step-offset") + 1] == str(state["step"])
    assert training[training.index("--dropout") + 1] == str(state["network"]["dropout"])
    assert training[training.index("--device") + 1] == "cuda" and "--bf16" in training
    assert int(training[training.index("--loader-workers") + 1]) >= 1  # the cores make the GPU's batches
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/tmp/site"]
    assert finalize[:len(training)] == training and "--finalize" in finalize
