"""scripts/make_corpus.py, the demo model's espeak-ng corpus: test A's sentences never reach training, and a
machine without the synthesiser gets a clear stop instead of an empty corpus."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import soundfile as sf

from tests.helpers.scripts import load_script


def texts(split_dir) -> dict[str, str]:
    return dict(line.split(maxsplit=1) for line in (split_dir / "text").read_text().splitlines())


@pytest.mark.skipif(shutil.which("espeak-ng") is None or shutil.which("sox") is None,
                    reason="espeak-ng and sox are not installed (apt-get install espeak-ng sox)")
def test_a_small_corpus_has_every_split_and_keeps_test_a_out_of_training(tmp_path):
    make = load_script("make_corpus")
    assert make.main(["--out", str(tmp_path), "--train", "6", "--test", "2", "--jobs", "1"]) == 0
    train, test_a = texts(tmp_path / "train"), texts(tmp_path / "test_a")
    assert len(train) == 6 and len(test_a) == 2 and len(texts(tmp_path / "test_b")) == 2
    assert not set(test_a.values()) & set(train.values())
    path = (tmp_path / "train" / "wav.scp").read_text().split()[1]
    audio, rate = sf.read(path)
    assert rate == 16000 and len(audio) > rate // 4
    # the test splits alone are the same utterances, sound for sound
    alone = tmp_path / "tests_only"
    assert make.main(["--out", str(alone), "--train", "6", "--test", "2", "--jobs", "1",
                      "--splits", "test_a", "test_b"]) == 0
    assert not (alone / "train").exists()
    for split in ("test_a", "test_b"):
        assert texts(alone / split) == texts(tmp_path / split)
        for utt in texts(alone / split):
            a, _ = sf.read(alone / "wavs" / split / f"{utt}.wav", dtype="int16")
            b, _ = sf.read(tmp_path / "wavs" / split / f"{utt}.wav", dtype="int16")
            assert np.array_equal(a, b), utt


def test_without_the_synthesiser_it_stops_before_making_anything(tmp_path, monkeypatch):
    make = load_script("make_corpus")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(SystemExit, match="espeak-ng and sox not found"):
        make.main(["--out", str(tmp_path / "corpus"), "--train", "2", "--test", "1"])
    assert not (tmp_path / "corpus").exists()


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_a_split_that_comes_out_empty_fails_the_run(tmp_path, monkeypatch):
    make = load_script("make_corpus")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sox").write_text("#!/bin/sh\nexit 2\n")  # installed, but every conversion fails
    (bin_dir / "sox").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert make.main(["--out", str(tmp_path / "corpus"), "--train", "2", "--test", "1", "--jobs", "1",
                      "--splits", "test_a"]) == 1
