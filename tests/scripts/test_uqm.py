"""asr_data.uqm: voiced dialogue entries are read from the two packs' layouts, built here as small zips, and cut
into their subtitle lines at the pauses nearest the subtitle times."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr_data import uqm

RATE = uqm.SAMPLE_RATE


def speech(seconds: float, freq: float = 220.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def pause(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), np.float32)


def ogg(audio: np.ndarray) -> bytes:
    out = io.BytesIO()
    sf.write(out, audio, RATE, format="OGG", subtype="VORBIS")
    return out.getvalue()


def packs(tmp_path: Path, clips: dict[str, np.ndarray], texts: dict[str, str], times: dict[str, str],
          own_texts: dict[str, str] = {}) -> tuple[Path, Path]:
    voice, content = tmp_path / "voice.uqm", tmp_path / "content.uqm"
    with zipfile.ZipFile(voice, "w") as z:
        for name, audio in clips.items():
            z.writestr(f"3dovoice/{name.split('-')[0]}/{name}", ogg(audio))
        for race, text in times.items():
            z.writestr(f"3dovoice/{race}/{race}.ts", text)
        for race, text in own_texts.items():
            z.writestr(f"3dovoice/{race}/{race}.txt", text)
    with zipfile.ZipFile(content, "w") as z:
        for race, text in texts.items():
            z.writestr(f"base/comm/{race}/{race}.txt", text)
    return voice, content


def test_entries_pair_clips_with_their_lines_and_leave_out_unvoiced_and_effect_voices(tmp_path: Path):
    text = ("#(HELLO)\tsyreen-000.ogg\nHello there, Captain.\nHow are you today?\n\n"
            "#(player_line)\nI am the right one for you.\n\n"
            "#(BYE) syreen-001.ogg\nGoodbye.\n\n"
            "#(BROKEN)\tsyreen-002.ogg\nOne.\nTwo.\nThree.\n")
    times = "#(HELLO) 1500\n#(player_line) \n#(BYE) \n#(BROKEN) 900\n"
    clips = {f"syreen-00{i}.ogg": speech(1.0) for i in range(3)} | {"vux-000.ogg": speech(1.0)}
    voice, content = packs(tmp_path, clips, {"syreen": text, "vux": "#(X)\tvux-000.ogg\nHi.\n"},
                           {"syreen": times, "vux": "#(X) \n"})
    entries = uqm.entries(voice, content)
    assert [(e.label, e.ogg, e.lines, e.times_ms) for e in entries] == [
        ("HELLO", "syreen-000.ogg", ("Hello there, Captain.", "How are you today?"), (1500,)),
        ("BYE", "syreen-001.ogg", ("Goodbye.",), ()),
    ]  # BROKEN: three lines but one time; vux: processed voices; player_line: not voiced
    assert [e.race for e in uqm.entries(voice, content, races={"vux"})] == ["vux"]


def test_the_voice_packs_own_copy_of_a_text_wins(tmp_path: Path):
    voice, content = packs(tmp_path, {"melnorme-000.ogg": speech(1.0)},
                           {"melnorme": "#(A)\tmelnorme-000.ogg\nOld wording.\n"}, {"melnorme": "#(A) \n"},
                           own_texts={"melnorme": "#(A)\tmelnorme-000.ogg\nAs recorded.\n"})
    assert uqm.entries(voice, content)[0].lines == ("As recorded.",)


def test_lines_are_cut_at_the_pause_nearest_each_subtitle_time(tmp_path: Path):
    # speech 2.0 s, pause 0.3 s (2.0-2.3), speech 2.5 s: the subtitle says 1.8 s, the pause is 0.35 s later
    audio = np.concatenate([speech(2.0), pause(0.3), speech(2.5, 330.0)])
    entry = uqm.Entry("spathi", "A", "spathi-000.ogg", ("We are Spathi, the bravest.", "Run away now please."),
                      (1800,))
    first, second = uqm.cut(entry, audio)
    assert 2.0 <= first.end / RATE <= 2.3 and first.start == 0 and second.end == audio.size
    assert (first.name, first.text, second.name) == ("spathi-000-0", "We are Spathi, the bravest.", "spathi-000-1")
    assert np.abs(uqm.line_audio(first, audio)).max() > 0.2


def test_a_boundary_inside_speech_drops_both_lines_it_touches(tmp_path: Path):
    audio = np.concatenate([speech(2.0), speech(2.0, 330.0)])  # no pause anywhere near 2 s
    entry = uqm.Entry("spathi", "A", "spathi-000.ogg", ("One two three four five.", "Six seven eight nine."),
                      (2000,))
    assert uqm.cut(entry, audio) == []


def test_a_line_too_fast_or_too_slow_for_its_text_is_dropped():
    audio = np.concatenate([speech(0.4), pause(0.3), speech(3.0)])
    entry = uqm.Entry("pkunk", "A", "pkunk-000.ogg",
                      ("Incomprehensibility unfathomable extraordinary.", "Yes."), (500,))
    assert uqm.cut(entry, audio) == []  # 17 syllables in ~0.5 s, then one syllable in 3 s


def test_entry_audio_decodes_the_clip(tmp_path: Path):
    voice, content = packs(tmp_path, {"yehat-000.ogg": speech(1.5)}, {"yehat": "#(A)\tyehat-000.ogg\nHonour.\n"},
                           {"yehat": "#(A) \n"})
    entry = uqm.entries(voice, content)[0]
    audio = uqm.entry_audio(entry, voice)
    assert audio.dtype == np.float32 and abs(audio.size / RATE - 1.5) < 0.05


def test_gen_corpus_uqm_writes_the_cut_lines_as_a_training_split_once(tmp_path: Path, monkeypatch):
    from tests.helpers.scripts import load_script

    gen = load_script("gen_corpus")
    audio = np.concatenate([speech(2.0), pause(0.3), speech(1.5, 330.0)])
    text = "#(HELLO)\tspathi-000.ogg\nWe are the 2 bravest Spathi.\nRun away!\n"
    voice, content = packs(tmp_path, {"spathi-000.ogg": audio}, {"spathi": text}, {"spathi": "#(HELLO) 2100\n"})
    monkeypatch.setattr(uqm, "VOICE_PACK", voice)
    monkeypatch.setattr(uqm, "CONTENT_PACK", content)
    root = tmp_path / "data"
    assert gen.main(["uqm", "--root", str(root)]) == 0
    split = root / "uqm" / "uqm_train"
    assert (split / "text").read_text().splitlines() == ["uqm_train_spathi-000-0 we are the two bravest spathi",
                                                         "uqm_train_spathi-000-1 run away"]
    assert (split / "utt2spk").read_text().split()[1] == "uqm-spathi"
    first = sf.info(str(root / "uqm" / "wavs" / "spathi" / "uqm_train_spathi-000-0.flac"))
    assert first.samplerate == 16000 and 1.9 < first.duration < 2.4
    monkeypatch.setattr(uqm, "entries", lambda *a, **k: pytest.fail("a finished split is not made again"))
    assert gen.main(["uqm", "--root", str(root)]) == 0


def test_a_line_longer_than_max_seconds_is_dropped():
    audio = np.concatenate([speech(uqm.MAX_SECONDS + 1.0), pause(0.3), speech(2.0)])
    words = " ".join(["banana"] * 20)  # 60 syllables: a plausible rate for 11 s
    first_ms = int(uqm.MAX_SECONDS * 1000) + 1150
    entry = uqm.Entry("utwig", "A", "utwig-000.ogg", (words, "Then the rest of it."), (first_ms,))
    assert [line.text for line in uqm.cut(entry, audio)] == ["Then the rest of it."]


def test_a_subtitle_time_whose_search_reaches_the_clips_end_ends_the_cutting_there():
    # three lines; the second time (3.9 s) lies within the search of the clip's end (4.0 s): its quietest frame
    # could be the clip's trailing silence, so the second and third lines are not cut; the first one is
    audio = np.concatenate([speech(1.5), pause(0.3), speech(1.6, 330.0), pause(0.6)])
    entry = uqm.Entry("chmmr", "A", "chmmr-000.ogg", ("Greetings, Captain.", "We are the Chmmr.", "Yes."),
                      (1650, 2250))
    assert [line.text for line in uqm.cut(entry, audio)] == ["Greetings, Captain."]


def test_subtitle_times_closer_than_the_search_drop_the_entry():
    audio = np.concatenate([speech(1.5), pause(0.3), speech(0.3, 330.0), pause(0.3), speech(1.5, 440.0)])
    entry = uqm.Entry("supox", "A", "supox-000.ogg", ("One two three four.", "Five.", "Six seven eight nine."),
                      (1650, 100))
    assert uqm.cut(entry, audio) == []


def test_a_clip_named_by_two_entries_keeps_the_first_entrys_text(tmp_path: Path):
    text = "#(A)\tumgah-000.ogg\nFirst text.\n\n#(B)\tumgah-000.ogg\nSecond text.\n"
    voice, content = packs(tmp_path, {"umgah-000.ogg": speech(1.0)}, {"umgah": text}, {"umgah": "#(A) \n#(B) \n"})
    assert [e.lines for e in uqm.entries(voice, content)] == [("First text.",)]
