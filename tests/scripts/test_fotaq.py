"""asr_data.fotaq: the game's voiced lines are paired with their clips, read from a small resource file built
here in queen.1c's layout (a dialogue with an opening line, segmented lines, repeat-visit lines, Joe's
stock responses and object descriptions, and a cutaway scene)."""

from __future__ import annotations

import struct

from asr_data import fotaq


def pstring(buf: bytearray, text: str, align: int) -> None:
    """Length-prefixed string padded so the next field starts at a multiple of `align` (of the body)."""
    buf.append(len(text))
    buf.extend(text.encode("latin-1"))
    while len(buf) % align:
        buf.append(0)


def dog(talk_key: int, joe: list[tuple[int, str]], person: list[tuple[int, str]], again: tuple[str, str]) -> bytes:
    body = bytearray(32 + 96)  # header, one dialogue level
    body[0:10] = struct.pack(">hhhhh", 1, 7, talk_key, len(joe), len(person))
    for line_id, text in joe:
        body.extend(struct.pack(">hh", 0, line_id))
        pstring(body, text, 4)
    person_off = len(body)
    for line_id, text in person:
        body.extend(struct.pack(">hh", 0, line_id))
        pstring(body, text, 4)
    again_off = len(body)
    pstring(body, again[0], 2)
    pstring(body, again[1], 2)
    body[22:28] = struct.pack(">HHH", person_off, 0, again_off)
    return b"AmBk" + bytes(16) + bytes(body)


def cut(sentences: list[str]) -> bytes:
    body = bytearray(12)
    body[2:4] = struct.pack(">h", len(sentences))
    body[8:10] = struct.pack(">H", 12)  # the sentences start right after the header here
    pstring(body, "*FL", 2)             # entry string (Joe's facing), not spoken
    for text in sentences:
        pstring(body, text, 2)
    return b"AmBk" + bytes(16) + bytes(body)


def resource_file(path, files: dict[str, bytes]) -> None:
    names = sorted(files)
    table_end = 4 + 6 + 2 + 1 + 2 + 21 * len(names)
    table, data = bytearray(), bytearray()
    for name in names:
        table.extend(name.encode().ljust(12, b"\0") + struct.pack(">BII", 1, table_end + len(data), len(files[name])))
        data.extend(files[name])
    path.write_bytes(b"QTBL" + b"CEM10\0" + bytes(2) + b"\x01" + struct.pack(">H", len(names)) + table + data)


def test_voiced_lines_are_paired_with_their_clips(tmp_path):
    verbs = [f"verb{i}" for i in range(12)]
    responses = ["It doesn't seem to open*24"] + [f"Response {i}" for i in range(2, 41)]
    jas2 = "\n".join(["A rusty key*02", "key", "ROOM"] + verbs + responses) + "\n"
    files = {
        "TAM2.DOG": dog(2, joe=[(0, "Hello there."), (6, "I need a boat.*04*03Right now.")],
                        person=[(6, "No boats here.*02")], again=("Back again?", "Yes, me.")),
        "C5A.CUT": cut(["*", "Look out!*02Too late."]),
        "QUEEN.JAS": b"AmBk" + bytes(16) + struct.pack(">HHHH", 1, 1, 0, 1),
        "QUEEN2.JAS": jas2.encode(),
    }
    voiced = ["02SSSSJ1", "020006J1", "020006J3", "020006P1", "02XXXXP1", "02XXXXJ1", "JOE00011", "JOE00411",
              "C5A__021", "C5A__022"]
    files.update({f"{n}.SB": b"\xff\xe3" for n in voiced})
    path = tmp_path / "queen.1c"
    resource_file(path, files)

    got = {c.name: (c.text, c.speaker) for c in fotaq.clips(path)}
    assert got == {
        "02SSSSJ1": ("Hello there.", "joe"),
        "020006J1": ("I need a boat.", "joe"),
        "020006J3": ("Right now.", "joe"),          # the empty segment between two commands has no clip
        "020006P1": ("No boats here.", "tam"),      # TAM2.DOG's person: the character, not the file
        "02XXXXP1": ("Back again?", "tam"),
        "02XXXXJ1": ("Yes, me.", "joe"),
        "JOE00011": ("It doesn't seem to open", "joe"),
        "JOE00411": ("A rusty key", "joe"),         # object descriptions follow the 40 responses
        "C5A__021": ("Look out!", "cutaway"),       # scene object 2 (object 1 says nothing: "*")
        "C5A__022": ("Too late.", "cutaway"),
    }


def test_segments_split_at_stage_commands():
    assert fotaq.segments("Hi.*04*03Bye.") == ["Hi.", "", "Bye."]
    assert fotaq.segments("Go*XY00(237,112)there") == ["Go", "there"]
    assert fotaq.segments("Plain line") == ["Plain line"]
