"""scripts/gen_corpus.py and asr_data.manifest: the append-only manifest survives a torn last line, exports
Kaldi-style splits, and a generation run stopped part-way and resumed makes exactly the corpus of an
uninterrupted run (espeak-ng voices only, skipped where espeak-ng is not installed)."""

from __future__ import annotations

import json
import shutil
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr_data import augment
from asr_data.manifest import Manifest, export_kaldi, read_rows, summary
from tests.helpers.scripts import load_script


def row(utt: str, split: str = "train", dur: float = 1.5, family: str = "flite") -> dict:
    return {"utt": utt, "split": split, "path": f"wavs/{split}/{utt}.flac", "dur": dur, "label": f"words of {utt}",
            "speaker": f"{family}-slt", "family": family}


def test_manifest_drops_a_torn_last_line_and_keeps_appending(tmp_path):
    path = tmp_path / "manifest.jsonl"
    m = Manifest(path)
    m.append(row("train_000000"))
    m.append(row("train_000001"))
    m.close()
    with open(path, "a") as fh:
        fh.write('{"utt": "train_000002", "spl')  # killed mid-write
    m = Manifest(path)
    assert set(m.rows) == {"train_000000", "train_000001"}
    assert "train_000002" not in m
    m.append(row("train_000002"))
    m.close()
    assert [r["utt"] for r in read_rows(path)] == ["train_000000", "train_000001", "train_000002"]


def test_export_writes_sorted_kaldi_files_and_summary_counts_hours(tmp_path):
    rows = [row("train_000001", dur=3600.0), row("train_000000", family="kokoro"),
            row("test_open_000000", split="test_open")]
    assert export_kaldi(rows, tmp_path) == {"train": 2, "test_open": 1}
    text = (tmp_path / "train" / "text").read_text().splitlines()
    assert text == ["train_000000 words of train_000000", "train_000001 words of train_000001"]
    scp = (tmp_path / "train" / "wav.scp").read_text().splitlines()
    assert scp[0] == f"train_000000 {tmp_path.resolve()}/wavs/train/train_000000.flac"
    assert (tmp_path / "train" / "utt2spk").read_text().splitlines()[1] == "train_000001 flite-slt"
    table = summary(rows)
    assert table["train"]["all"] == [2, pytest.approx(1.0 + 1.5 / 3600)]
    assert table["train"]["kokoro"][0] == 1 and table["test_open"]["flite"][0] == 1


def test_channel_effects_keep_length_level_and_range():
    rng = np.random.default_rng(0)
    speech = (0.5 * np.sin(np.arange(16000) * 2 * np.pi * 440 / 16000)).astype(np.float32)
    ch = augment.Channel(pad_s=(0.1, 0.2), peak=0.5, rt60_s=0.4, wet=0.5, telephone=True, noise="pink",
                         snr_db=20.0)
    out = augment.apply(speech, ch, rng)
    assert out.size == 16000 + 1600 + 3200 and out.dtype == np.float32
    assert np.abs(out).max() <= 1.0
    assert np.abs(out[:1600]).max() > 0  # noise in the padding too, as in a recording
    assert augment.to_16k(np.zeros(24000, np.float32), 24000).size == 16000


SIZES = ["--test-template", "2", "--test-digits", "2", "--test-open", "2", "--test-heldout-voice", "2",
         "--train", "8"]


def frozen_text(root: Path) -> None:
    """Text pools as build_text leaves them (so the test needs neither wordfreq nor the text packages)."""
    d = root / "text"
    d.mkdir(parents=True)
    (d / "train.tsv").write_text("fortunes/a\tThe sun is warm today.\tthe sun is warm today\n"
                                 "wordnet/noun\tA small red boat\ta small red boat\n")
    (d / "heldout.tsv").write_text("fortunes/science\tWater boils when hot.\twater boils when hot\n")
    (d / "vocab.txt").write_text("the\nof\nhouse\ngreen\nrun\n")
    (d / "names.txt").write_text("anna\nben\n")
    (d / "done").write_text("")


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed "
                    "(bash scripts/get_tts_voices.sh installs it)")
def test_a_resumed_run_makes_the_same_corpus_as_an_uninterrupted_one(tmp_path, monkeypatch):
    gen = load_script("gen_corpus")
    monkeypatch.setattr(gen.signal, "signal", lambda *a: None)  # leave pytest's handlers alone
    monkeypatch.setattr(gen.voices, "_kokoro_names", lambda: [])
    monkeypatch.setattr(gen.voices, "TRAIN_FAMILIES", {"espeak": 1.0})
    monkeypatch.setattr(gen.voices, "HELDOUT_FAMILIES", {"espeak": 1.0})
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    for root in (whole, parts):
        frozen_text(root)
    assert gen.main(["run", "--root", str(whole), "--seed", "7", *SIZES]) == 0
    assert gen.main(["run", "--root", str(parts), "--seed", "7", *SIZES, "--limit", "5"]) == 0
    assert len(list(read_rows(parts / "manifest.jsonl"))) == 5
    assert gen.main(["run", "--root", str(parts)]) == 0  # resume: plan and seed come from plan.json

    def rows(root):
        return {r["utt"]: {k: v for k, v in r.items() if k != "synth_cpu_s"}
                for r in read_rows(root / "manifest.jsonl")}

    a, b = rows(whole), rows(parts)
    assert len(a) == 16 and a == b
    for utt, r in a.items():
        x, sr = sf.read(whole / r["path"], dtype="int16")
        y, _ = sf.read(parts / r["path"], dtype="int16")
        assert sr == 16000 and np.array_equal(x, y), utt
    assert (parts / "train" / "text").read_text() == (whole / "train" / "text").read_text()
    labels = {r["label"] for r in a.values() if r["split"] == "test_open"}
    assert labels == {"water boils when hot"}  # held-out text only
    assert not any(r["label"] == "water boils when hot" for r in a.values() if r["split"] == "train")
    # a second run with a different seed would be another corpus: refused
    with pytest.raises(SystemExit):
        gen.main(["run", "--root", str(parts), "--seed", "8"])
    # status reads the finished corpus
    assert gen.main(["status", "--root", str(parts)]) == 0
    plan = json.loads((parts / "plan.json").read_text())
    assert plan == {"seed": 7, "sizes": {"test_template": 2, "test_digits": 2, "test_open": 2,
                                         "test_heldout_voice": 2, "train": 8}}


def test_freeze_takes_the_first_train_indices_and_lists_the_game_lines_twice(tmp_path, monkeypatch):
    gen = load_script("gen_corpus")
    export_kaldi([row(f"train_{i:06d}", dur=2.0) for i in (3, 0, 2, 1)], tmp_path)
    export_kaldi([row("fotaq_train_020001p2", split="fotaq_train", dur=1.0)], tmp_path / "fotaq")
    assert gen.main(["freeze", "--root", str(tmp_path), "--freeze-train", "5"]) == 1  # index 4 is not made yet
    assert not (tmp_path / "train_v2").exists()
    assert gen.main(["freeze", "--root", str(tmp_path), "--freeze-train", "3"]) == 0
    frozen = tmp_path / "train_v2"
    utts = [line.split()[0] for line in (frozen / "wav.scp").read_text().splitlines()]
    assert utts == ["fotaq_train_020001p2", "fotaq_train_020001p2_rep2", "train_000000", "train_000001",
                    "train_000002"]
    for name in ("text", "utt2spk", "utt2dur"):
        assert [line.split()[0] for line in (frozen / name).read_text().splitlines()] == utts
    assert (frozen / "text").read_text().splitlines()[1] == "fotaq_train_020001p2_rep2 words of fotaq_train_020001p2"


needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed "
                                  "(bash scripts/get_tts_voices.sh installs it)")


@pytest.fixture
def leg_gen(monkeypatch):
    """gen_corpus with espeak-ng voices only and legs of 50 indices, one utterance per eval split."""
    gen = load_script("gen_corpus")
    monkeypatch.setitem(sys.modules, gen.__name__, gen)  # the worker processes' jobs name it
    monkeypatch.setattr(gen.voices, "_kokoro_names", lambda: [])
    monkeypatch.setattr(gen.voices, "TRAIN_FAMILIES", {"espeak": 1.0})
    monkeypatch.setattr(gen.voices, "HELDOUT_FAMILIES", {"espeak": 1.0})
    monkeypatch.setattr(gen, "LEG_FAST_FAMILIES", {"espeak": 1.0})
    monkeypatch.setattr(gen, "LEG_KOKORO_EVERY", 10**9)  # index 0 of a leg only: not made here
    monkeypatch.setattr(gen, "EVAL_SIZE", 1)
    monkeypatch.setattr(gen, "LEG_STRIDE", 50)
    return gen


def leg_root(root: Path) -> Path:
    """A data root with the frozen text pools and a line of two games, as a leg finds it."""
    frozen_text(root)
    export_kaldi([dict(row("fotaq_train_x1", split="fotaq_train"), path="wavs/fotaq_train/x1.flac")],
                 root / "fotaq")
    (root / "fotaq" / "manifest.jsonl").write_text(json.dumps(
        dict(row("fotaq_train_x1", split="fotaq_train"), path="wavs/fotaq_train/x1.flac")) + "\n")
    (root / "bass").mkdir()
    (root / "bass" / "manifest.jsonl").write_text(json.dumps(
        dict(row("bass_train_2_117", split="bass_train", family="bass"), path="wavs/bass_train_2_117.flac")) + "\n")
    return root


@needs_espeak
def test_a_relay_leg_makes_its_own_indices_and_the_fixed_eval_splits(tmp_path, leg_gen):
    gen = leg_gen
    assert gen.leg_families("train", 7) == {"espeak": 1.0} and gen.leg_families("test_open", 0) is None
    roots = [leg_root(tmp_path / "a"), leg_root(tmp_path / "b")]
    # minutes 0: the eval utterances, then stop after the first training utterance
    assert gen.main(["leg", "--root", str(roots[0]), "--seed", "7", "--leg", "2", "--minutes", "0",
                     "--jobs", "1", *SIZES]) == 0
    assert gen.main(["leg", "--root", str(roots[1]), "--seed", "7", "--leg", "2", "--minutes", "0.15",
                     "--jobs", "2", *SIZES]) == 0
    a, b = ({r["utt"]: r for r in read_rows(root / "manifest.jsonl")} for root in roots)
    train_a = sorted(u for u in a if u.startswith("train"))
    assert train_a[0] == "train_000100" and set(train_a) <= set(b)  # leg 2 draws from 2 * LEG_STRIDE up
    for utt in a:
        assert {k: v for k, v in a[utt].items() if k != "synth_cpu_s"} == \
               {k: v for k, v in b[utt].items() if k != "synth_cpu_s"}, utt
    legs = roots[0] / "legs"
    utts = [line.split()[0] for line in (legs / "leg2" / "train" / "wav.scp").read_text().splitlines()]
    assert utts == ["bass_train_2_117", "fotaq_train_x1", *train_a]  # every game's training lines
    scp = (legs / "leg2" / "train" / "wav.scp").read_text()
    assert str((roots[0] / "fotaq" / "wavs" / "fotaq_train" / "x1.flac").resolve()) in scp
    assert str((roots[0] / "bass" / "wavs" / "bass_train_2_117.flac").resolve()) in scp
    for split in ("test_template", "test_digits", "test_open", "test_heldout_voice"):
        assert len((legs / "eval" / split / "text").read_text().splitlines()) == 1


@needs_espeak
@pytest.mark.timeout(120)
def test_a_leg_stops_its_workers_when_the_parent_process_catches_sigterm(tmp_path, leg_gen):
    """The workers are forked: they would inherit a SIGTERM handler of the process that runs the leg (a
    server, a test runner) and outlive the pool's terminate(), hanging the leg at its deadline."""
    caught = []
    # more indices than a quiet machine makes in the 0.6 s deadline (50 once all fitted), so the leg is cut
    leg_gen.LEG_STRIDE = 2000
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: caught.append(signum))
    try:
        assert leg_gen.main(["leg", "--root", str(leg_root(tmp_path)), "--seed", "7", "--leg", "1",
                             "--minutes", "0.01", "--jobs", "2", *SIZES]) == 0
    finally:
        signal.signal(signal.SIGTERM, previous)
    made = [r["utt"] for r in read_rows(tmp_path / "manifest.jsonl") if r["split"] == "train"]
    assert 1 <= len(made) < 2000  # stopped at the deadline, part-way through the leg's indices
    assert caught == []  # the parent itself was never signalled


def test_a_game_line_made_under_older_label_rules_is_relabelled_not_made_again(tmp_path):
    """'No.' used to be labelled 'number': a surviving data folder gets the new label appended, and readers
    take the last row of each utterance."""
    from asr_data.manifest import latest_rows

    gen = load_script("gen_corpus")
    root = tmp_path / "fotaq"
    manifest = Manifest(root / "manifest.jsonl")
    manifest.append({"utt": "fotaq_train_1", "split": "fotaq_train", "path": "wavs/fotaq_train/fotaq_train_1.flac",
                     "dur": 0.5, "label": "number", "speak": "No.", "kind": "real", "source": "fotaq",
                     "family": "fotaq", "voice": "joe", "speaker": "fotaq-joe"})
    manifest.close()
    lines = [("fotaq_train", "fotaq_train_1", "C1", "No.", "joe", "fotaq_train"),
             ("fotaq_train", "fotaq_train_2", "C2", "Yes.", "joe", "fotaq_train")]
    loaded = []

    def load_audio(name):
        loaded.append(name)
        return np.zeros(8000, np.float32), 16000

    counts, made, skipped = gen.write_real_clips(root, "fotaq", lines, load_audio)
    assert loaded == ["C2"] and made == 1 and skipped == 0  # the old line's audio is not made again
    rows = latest_rows(root / "manifest.jsonl")
    assert [(r["utt"], r["label"]) for r in rows] == [("fotaq_train_1", "no"), ("fotaq_train_2", "yes")]
    assert (root / "fotaq_train" / "text").read_text().splitlines() == ["fotaq_train_1 no", "fotaq_train_2 yes"]
    gen.write_real_clips(root, "fotaq", lines, load_audio)  # a second run appends nothing more
    assert len(list(read_rows(root / "manifest.jsonl"))) == 3
