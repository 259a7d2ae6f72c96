"""Real human speech from Debian's `flight-of-the-amazon-queen` (freeware game, redistribution allowed): its
voiced lines paired with their text, read from the game's resource file queen.1c (format as ScummVM's
engines/queen reads it; this is an independent reader of the data layout, no ScummVM code).

queen.1c ("rebuilt" talkie version CEM10, MP3-compressed): 'QTBL', version, compression byte, then a table
of (12-byte name, bundle, offset, size) entries, big-endian. Speech clips are the *.SB entries (MP3, 11 kHz).

Three kinds of lines are paired here (6,587 of the 6,745 clips):
- dialogues (*.DOG): clip "<talkKey:2><id:4 hex>J|P<segment>" holds segment `segment` of the Joe (J) or
  other person (P) line `id`; a line's segments are separated by '*' + a two-character stage command;
- Joe's remarks (QUEEN2.JAS lines): clip "JOE<num:04><segment>", responses 1-40 then object
  descriptions 41-;
- cutaway scenes (*.CUT): clip "<scene name padded with '_' to 5><object:02><segment>"; the scene's
  sentences follow its entry string, one per scene object. Who speaks a cutaway line is in the scene's
  object records (variable length, tied to run-time object state) and is not read: speaker 'cutaway'.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

QUEEN_1C = Path("/usr/share/scummvm/flight-of-the-amazon-queen/queen.1c")
AMBK_HEADER = 20        # resource files carry an 'AmBk' header before their data
JOE_RESPONSE_MAX = 40   # Joe's stock responses precede the object descriptions in the JOE clip numbering


@dataclass(frozen=True)
class Entry:
    name: str
    offset: int
    size: int


@dataclass(frozen=True)
class Clip:
    name: str       # resource name without .SB
    text: str       # the line as written in the game
    speaker: str    # 'joe' or the other person of the dialogue (its file name less digits: 'tam')


def read_table(fh: BinaryIO) -> dict[str, Entry]:
    fh.seek(0)
    if fh.read(4) != b"QTBL":
        raise ValueError("not a rebuilt queen.1c (no QTBL header)")
    fh.read(6 + 2 + 1)  # version string, padding, compression
    (count,) = struct.unpack(">H", fh.read(2))
    table = {}
    for _ in range(count):
        name = fh.read(12).split(b"\0")[0].decode("ascii")
        _bundle, offset, size = struct.unpack(">BII", fh.read(9))
        table[name] = Entry(name, offset, size)
    return table


def read_entry(fh: BinaryIO, entry: Entry, skip: int = 0) -> bytes:
    fh.seek(entry.offset + skip)
    return fh.read(entry.size - skip)


def segments(sentence: str) -> list[str]:
    """A spoken line's segments: text between '*'+command marks ('*XY' carries 11 more characters)."""
    out, start, i = [], 0, 0
    while i < len(sentence):
        if sentence[i] == "*":
            out.append(sentence[start:i])
            command = sentence[i + 1:i + 3]
            i += 3 + (11 if command == "XY" else 0)
            start = i
        else:
            i += 1
    if start < len(sentence):
        out.append(sentence[start:])
    return out


def _i16(b: bytes, o: int) -> int:
    return struct.unpack_from(">h", b, o)[0]


def _u16(b: bytes, o: int) -> int:
    return struct.unpack_from(">H", b, o)[0]


def _string(b: bytes, o: int, align: int) -> tuple[str, int]:
    """Length-prefixed string; the next field starts at the following multiple of `align`."""
    n = b[o]
    o += 1
    if not n:
        return "", o
    return b[o:o + n].decode("latin-1"), (o + n + align - 1) & ~(align - 1)


def dialogue_lines(dog: bytes) -> Iterator[tuple[str, str]]:
    """(clip prefix, line) of a .DOG dialogue (its AmBk header already removed)."""
    levels, talk_key, j_max, p_max = abs(_i16(dog, 0)), _i16(dog, 4), _i16(dog, 6), _i16(dog, 8)
    person_off, again_off, joe_off = _u16(dog, 22), _u16(dog, 26), 32 + levels * 96
    key = f"{talk_key:2d}".replace(" ", "0")
    for who, off, count in (("J", joe_off, j_max), ("P", person_off, p_max)):
        for _ in range(count):
            line_id = _i16(dog, off + 2)
            text, off = _string(dog, off + 4, 4)
            yield f"{key}{line_id:4x}{who}".replace(" ", "0").upper(), text
    if not _u16(dog, joe_off + 2):  # Joe's opening line, when he has one
        yield f"{key}SSSSJ", _string(dog, joe_off + 4, 2)[0]
    person_again, off = _string(dog, again_off, 2)  # the lines when they have talked before
    yield f"{key}XXXXP", person_again
    yield f"{key}XXXXJ", _string(dog, off, 2)[0]


def cutaway_lines(scene: str, cut: bytes) -> Iterator[tuple[str, str]]:
    """(clip prefix, line) of a .CUT scene (AmBk header removed): its entry string, then one sentence per
    scene object (object i's clips are '<scene padded to 5 with _><i:02>')."""
    objects, off = abs(_i16(cut, 2)), _u16(cut, 8)
    _entry, off = _string(cut, off, 2)
    base = scene.ljust(5, "_")
    for i in range(1, objects + 1):
        text, off = _string(cut, off, 2)
        yield f"{base}{i:02d}".upper(), text


def clips(path: Path = QUEEN_1C) -> list[Clip]:
    """Every voiced line whose clip exists, with its text."""
    with open(path, "rb") as fh:
        table = read_table(fh)
        voiced = {n[:-3] for n in table if n.endswith(".SB")}
        out: list[Clip] = []

        def add(prefix: str, text: str, speaker: str) -> None:
            for k, seg in enumerate(segments(text)):
                name = f"{prefix}{k + 1:x}".upper()
                if seg.strip() and name in voiced:
                    out.append(Clip(name, seg.strip(), speaker))

        for name in sorted(n for n in table if n.endswith(".DOG")):
            dog = read_entry(fh, table[name], AMBK_HEADER)
            for prefix, text in dialogue_lines(dog):
                # TAM1.DOG, TAM2.DOG ... are one character (one actor): the speaker is the name less digits
                add(prefix, text, "joe" if prefix.endswith("J") else f"{re.sub(r'[0-9]+$', '', name[:-4]).lower()}")
        for name in sorted(n for n in table if n.endswith(".CUT")):
            for prefix, text in cutaway_lines(name[:-4], read_entry(fh, table[name], AMBK_HEADER)):
                add(prefix, text, "cutaway")
        jas = read_entry(fh, table["QUEEN.JAS"], AMBK_HEADER)
        n_rooms, n_names, _n_objects, n_desc = (_u16(jas, o) for o in (0, 2, 4, 6))
        lines = read_entry(fh, table["QUEEN2.JAS"]).decode("latin-1").splitlines()
        first_response = n_desc + n_names + n_rooms + 12  # descriptions, names, rooms, 12 verbs
        numbered = list(enumerate(lines[first_response:first_response + JOE_RESPONSE_MAX], 1))
        numbered += [(i + JOE_RESPONSE_MAX, t) for i, t in enumerate(lines[:n_desc], 1)]
        for num, text in numbered:
            add(f"JOE{num:04d}", text, "joe")
    # a clip reached from two lines keeps the first
    seen: dict[str, Clip] = {}
    for c in out:
        seen.setdefault(c.name, c)
    return list(seen.values())


def clip_audio(path: Path, name: str):
    """(float32 samples, rate) of clip `name` (MP3 inside the resource file; libsndfile decodes it)."""
    import io

    import soundfile as sf

    with open(path, "rb") as fh:
        entry = read_table(fh)[f"{name}.SB"]
        data = read_entry(fh, entry)
    audio, sr = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    return audio.mean(axis=1), sr
