"""asr_data.drascula: speech clips are paired with their line of the matching text table, read from a small
drascula.dat built here in the version 6 layout (two languages, English first) next to a few .ALS clips."""

from __future__ import annotations

import struct

import numpy as np

from asr_data import drascula

RATE = drascula.SAMPLE_RATE


def text_table(per_language: list[list[str]]) -> bytes:
    """A text table: its count, then per language a length, 2 bytes of padding and the padded records."""
    out = bytearray(struct.pack(">H", len(per_language[0])))
    for strings in per_language:
        records = bytearray()
        for s in strings:
            body = s.encode("cp437") + b"\0"
            body += bytes(-(len(body) + 2) % 4)
            records += struct.pack(">H", len(body) + 2) + body
        out += struct.pack(">H", len(records) + 2) + bytes(2) + records
    return bytes(out)


def dat(tables: dict[str, list[str]]) -> bytes:
    out = bytearray(b"DRASCULA" + bytes([drascula.DAT_VERSION]))
    for _name, size in drascula.DAT_TABLES:     # one entry of game data each, skipped by the reader
        out += struct.pack(">H", 1) + bytes(size)
    out += struct.pack(">H", 2)                 # languages
    for name in drascula.TEXT_TABLES:
        english = tables.get(name, [""])
        out += text_table([english, [f"ES {s}" if s else "" for s in english]])
    return bytes(out)


def als(seconds: float, level: int = 40, silence: float = 0.0) -> bytes:
    """A clip: header, `silence` s of 0x80, a square wave, `silence` s of 0x80, trailer."""
    quiet = bytes([128]) * int(silence * RATE)
    tone = np.where(np.arange(int(seconds * RATE)) % 20 < 10, 128 + level, 128 - level).astype(np.uint8)
    return bytes(32) + quiet + tone.tobytes() + quiet + bytes(32)


def test_clips_pair_with_their_table_line_and_speaker(tmp_path):
    (tmp_path / "drascula.dat").write_bytes(dat({
        "text": ["", "THAT'S A BIG DOOR", "", "SO?", "WEARS A TOUP\u00c9"],
        "textd": [""] * 57 + ["HOW DO YOU KNOW I'M A FOREIGNER?"] + [""] * 10 + ["HI THERE FOREIGNER"]
                 + [""] * 14 + ["BLA, BLA, BLA."],
        "textvb": ["", "WHO THE HELL IS CALLING AT THIS TIME?"],
        "texti": ["", "MASTER, THIS IS NOT WORKING"],
    }))
    clips = {"1": 1.5, "2": 1.0, "3": 0.5, "4": 1.0, "D57": 2.0, "D68": 1.5, "D83": 1.0, "VB1": 2.5, "I1": 2.0,
             "S1": 1.0, "F1": 1.0}
    for name, seconds in clips.items():
        (tmp_path / f"{name}.ALS").write_bytes(als(seconds))
    (tmp_path / "I1.ALS").write_bytes(als(0.5))    # 27 characters in half a second: not what the clip says
    (tmp_path / "ABC.ALG").write_bytes(b"picture")

    got = {c.name: (c.text, c.speaker) for c in drascula.clips(tmp_path)}
    assert got == {
        "1": ("THAT'S A BIG DOOR", "hacker"),
        "3": ("SO?", "hacker"),                     # clip 2's English line is empty: not paired
        "4": ("WEARS A TOUP\u00c9", "hacker"),       # code page 437 text (0x90)
        "D57": ("HOW DO YOU KNOW I'M A FOREIGNER?", "hacker"),  # the hero's lines to the blind man
        "D68": ("HI THERE FOREIGNER", "blindman"),
        "D83": ("BLA, BLA, BLA.", "trunk"),
        "VB1": ("WHO THE HELL IS CALLING AT THIS TIME?", "vonbraun"),
    }                                               # S* (sound effects) and F* have no text table


def test_clip_audio_is_unsigned_8_bit_without_header_trailer_or_long_silence(tmp_path):
    (tmp_path / "D5.ALS").write_bytes(als(1.0, level=64, silence=2.0))
    audio, rate = drascula.clip_audio("D5", tmp_path)
    assert rate == RATE and audio.dtype == np.float32
    assert abs(audio.size / RATE - 1.2) < 0.02    # the tone and 0.1 s of silence either side
    assert np.isclose(np.abs(audio).max(), 0.5)   # 128 +- 64 -> +-0.5
    lower = tmp_path / "lower"
    lower.mkdir()
    (lower / "d5.als").write_bytes(als(1.0))
    assert drascula.clip_audio("D5", lower)[0].size == RATE   # any case of the file name


def test_read_texts_rejects_other_files(tmp_path):
    (tmp_path / "drascula.dat").write_bytes(b"DRASCULA\x05")
    try:
        drascula.read_texts(tmp_path / "drascula.dat")
    except ValueError as e:
        assert "version 6" in str(e)
    else:
        raise AssertionError("an old drascula.dat was read")
