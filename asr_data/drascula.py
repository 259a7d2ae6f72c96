"""Real human speech from Debian's `drascula` (Drascula: The Vampire Strikes Back, English version): its voiced
lines paired with their text. The speech clips and the text table file sit side by side in
/usr/share/scummvm/drascula/en/ (layouts as ScummVM's engines/drascula reads them and its
devtools/create_drascula writes drascula.dat; this is an independent reader, no ScummVM code).

Licence (/usr/share/doc/drascula/copyright): "Drascula-License", Copyright 1996-2008 Alcachofa Soft S.L.:
free distribution on any medium with the readme and copyright notices intact, a reasonable copying fee
allowed, no fee for the game itself, modification allowed if marked as modified; game data provided "as is".

Speech: <prefix><n>.ALS, raw 8-bit unsigned mono PCM at 11025 Hz between a 32-byte header and a 32-byte
trailer. The prefix names the speaking character and the text table, and <n> is the line's index in that
table (the game plays "<prefix><n>.als" with line n of the same table):

    ''  hacker (John Hacker, the hero)   _text      I   igor        _texti
    D   see below                        _textd     L   werewolf    _textl
    B   drunk                            _textb     P   pianist     _textp
    BJ  bj (Billie Jean)                 _textbj    T   bartender   _textt
    E   desiderio (uncle Desiderio)      _texte     VB  vonbraun    _textvb

The D table holds several voices: lines 1-55 Count Drascula ('drascula'), 56-67 John Hacker talking to the
blind man, 68-78 the blind man, 82 the bartender, 83 the talking trunk. S*.ALS are sound effects and F*.ALS
have no text; 23 speech clips without an English line (empty, or past the table's end) are not paired.

drascula.dat (version 6, big-endian): 'DRASCULA', a version byte, thirteen counted tables of game data
(skipped), the number of languages, then fifteen text tables. A text table is its count of strings, then
per language: a uint16 length, 2 bytes of padding, and per string a uint16 record length followed by the
NUL-terminated string padded to a multiple of 4. English is language 0.

Pairing check (Debian 1.0+ds4-2): clip duration against text length correlates 0.85-0.99 per table with the
index as is, and 0.0-0.5 with the index shifted by one. Three hero lines whose clips are too short for their
text (estimated 8.6-9.7 syllables a second, where the game's median is 3.3; the recording says less than the
subtitle) are dropped by MAX_SYLLABLES_PER_SECOND. The result: 739 clips of 12 speakers (455 the hero's),
0.77 h, 0.70 h with the silence at their ends trimmed.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from asr_data.clips import syllables, trim_silence, unsigned_8bit

DRASCULA_DIR = Path("/usr/share/scummvm/drascula/en")
SAMPLE_RATE = 11025
HEADER = TRAILER = 32           # bytes around a clip's samples
DAT_VERSION = 6
# (name, bytes per entry) of the game-data tables that precede the text in drascula.dat
DAT_TABLES = (("charmap", 4), ("item locations", 4), ("x_pol/y_pol", 4), ("verbBarX", 2), ("x1d_menu", 4),
              ("frameX", 2), ("candles", 4), ("pianistX", 2), ("drunkX", 2), ("room pre-updates", 20),
              ("room updates", 20), ("room actions", 10), ("talk sequences", 8))
TEXT_TABLES = ("text", "textd", "textb", "textbj", "texte", "texti", "textl", "textp", "textt", "textvb",
               "textsys", "texthis", "textverbs", "textmisc", "textd1")
PREFIXES = {"": ("text", "hacker"), "D": ("textd", None), "B": ("textb", "drunk"), "BJ": ("textbj", "bj"),
            "E": ("texte", "desiderio"), "I": ("texti", "igor"), "L": ("textl", "werewolf"),
            "P": ("textp", "pianist"), "T": ("textt", "bartender"), "VB": ("textvb", "vonbraun")}
MAX_SYLLABLES_PER_SECOND = 8.5  # a subtitle said faster than this is not what the clip says
CLIP_NAME = re.compile(r"^([A-Z]*)(\d+)\.ALS$", re.IGNORECASE)


@dataclass(frozen=True)
class Clip:
    name: str       # clip file name without .ALS, upper case: '1', 'D57', 'VB12'
    text: str       # the line as written in the game (English, upper case)
    speaker: str    # the character: 'hacker', 'drascula', 'igor', ... (table above)


def d_speaker(n: int) -> str:
    """Who says line n of the D table."""
    if n <= 55:
        return "drascula"
    if n <= 67:
        return "hacker"
    if n <= 78:
        return "blindman"
    return {82: "bartender", 83: "trunk"}.get(n, "drascula")


def read_texts(path: Path, language: int = 0) -> dict[str, list[str]]:
    """Every text table of drascula.dat in one language: {'text': [...], 'textd': [...], ...}."""
    data = path.read_bytes()
    if data[:8] != b"DRASCULA" or data[8] != DAT_VERSION:
        raise ValueError(f"{path}: not a version {DAT_VERSION} drascula.dat")
    pos = 9

    def u16() -> int:
        nonlocal pos
        pos += 2
        return struct.unpack_from(">H", data, pos - 2)[0]

    for _name, size in DAT_TABLES:
        count = u16()
        pos += count * size
    n_langs = u16()
    if not 0 <= language < n_langs:
        raise ValueError(f"{path}: language {language} of {n_langs}")
    tables = {}
    for name in TEXT_TABLES:
        count = u16()
        for lang in range(n_langs):
            u16()       # the language block's length
            pos += 2    # padding
            strings = []
            for _ in range(count):
                size = u16()                # the record: this uint16, the string, its padding
                end = pos + size - 2
                strings.append(data[pos:end].split(b"\0")[0].decode("cp437"))
                pos = end
            if lang == language:
                tables[name] = strings
    if pos != len(data):
        raise ValueError(f"{path}: {len(data) - pos} bytes left after the text tables")
    return tables


def clip_files(root: Path) -> dict[str, Path]:
    """Speech clip name (upper case, no extension) -> file, for the clips with a speaking prefix."""
    out = {}
    for p in root.iterdir():
        m = CLIP_NAME.match(p.name)
        if m and m.group(1).upper() in PREFIXES:
            out[p.name[:-4].upper()] = p
    return out


def clips(root: Path = DRASCULA_DIR) -> list[Clip]:
    """Every speech clip with a non-empty English line that its duration can hold, sorted by name."""
    texts = read_texts(root / "drascula.dat")
    out = []
    for name, path in sorted(clip_files(root).items()):
        m = CLIP_NAME.match(path.name)
        prefix, n = m.group(1).upper(), int(m.group(2))
        table, speaker = PREFIXES[prefix]
        lines = texts[table]
        text = " ".join(lines[n].split()) if n < len(lines) else ""
        seconds = (path.stat().st_size - HEADER - TRAILER) / SAMPLE_RATE
        if not text or seconds <= 0 or syllables(text) / seconds > MAX_SYLLABLES_PER_SECOND:
            continue
        out.append(Clip(name, text, speaker or d_speaker(n)))
    return out


def clip_audio(name: str, root: Path = DRASCULA_DIR) -> tuple[np.ndarray, int]:
    """(float32 samples in [-1, 1), rate) of clip `name` ('D57'), leading and trailing silence trimmed."""
    path = root / f"{name}.ALS"
    if not path.exists():   # names are upper case in the Debian package; accept any case
        path = {p.name.upper(): p for p in root.iterdir()}[f"{name.upper()}.ALS"]
    raw = path.read_bytes()[HEADER:-TRAILER]
    audio = unsigned_8bit(raw)
    return trim_silence(audio, SAMPLE_RATE), SAMPLE_RATE
