"""Real human speech from The Ur-Quan Masters' voice pack (Debian non-free `uqm-voice` + `uqm-content`): the
3DO version's dialogue, about 11.4 h by 27 characters, cut into subtitle lines with their text.

Licence (/usr/share/doc/uqm-voice/copyright): Creative Commons Attribution-NonCommercial-ShareAlike 2.5.
A model trained on these lines is used and shared under the same terms: non-commercial, with attribution to
Toys for Bob and the UQM team, under the same licence. That is why nothing here runs unless asked for
(`gen_corpus.py uqm`, `relay_leg.py --with-uqm`) and why a model that saw them says so in its model card.

Layout (an independent reader of the packages' files, no UQM code):
- the voice pack (a zip, `addons/uqm-0.8.0-voice.uqm`) holds `3dovoice/<race>/<race>-NNN.ogg` (mono Vorbis,
  11,025 Hz) and `3dovoice/<race>/<race>.ts`: per dialogue entry `#(LABEL) d1,d2,...`, the milliseconds each
  subtitle line but the last is shown (the last runs to the end of the clip);
- the content pack (a zip, `packages/uqm-0.8.0-content.uqm`) holds `base/comm/<race>/<race>.txt`: per entry
  `#(LABEL)`, white space and `<race>-NNN.ogg`, then its subtitle lines, one per line (entries without an ogg
  are the player's lines, not voiced); the voice pack carries its own copy of six of these texts.

Cutting: an entry of n lines has n - 1 subtitle times; each is moved to the quietest 20 ms within
BOUNDARY_SEARCH_S of it (subtitle times drift from the speech by a few hundred ms; a time whose search would
reach past the clip's start or end ends the cutting there, and times closer together than the search drop the
entry), and a line is kept only when both its ends fell in a pause (a frame under PAUSE_SHARE of the clip's
typical loudness), its length is plausible for its text (MIN/MAX_SYLLABLES_PER_SECOND) and at most
MAX_SECONDS, and its text normalises.
Characters whose voices are processed with effects (EFFECT_RACES: robots, a probe, voices through vocoders or
pitch shifts) are left out.
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import soundfile as sf

from asr_data.clips import frame_rms, syllables, trim_silence

# where scripts/get_uqm.sh unpacks the two packages (not installed: they depend on the game)
UQM_DIR = Path(os.environ.get("ASR_DATA", "/work/asr_data")) / "uqm_pkg" / "usr" / "share" / "games" / "uqm" / "content"
VOICE_PACK = UQM_DIR / "addons" / "uqm-0.8.0-voice.uqm"
CONTENT_PACK = UQM_DIR / "packages" / "uqm-0.8.0-content.uqm"
SAMPLE_RATE = 11025
EFFECT_RACES = frozenset({"arilou", "ilwrath", "orz", "probe", "urquan", "vux"})
BOUNDARY_SEARCH_S = 0.4
FRAME_S = 0.02
PAUSE_SHARE = 0.25        # a pause frame's RMS is under this share of the clip's median loud-frame RMS
MAX_SECONDS = 10.0        # longer lines (under 1% of them) would make a training batch several times dearer
MIN_SYLLABLES_PER_SECOND = 1.0
MAX_SYLLABLES_PER_SECOND = 8.5
ENTRY = re.compile(r"^#\(([^)]+)\)(?:\s+(\S+\.ogg))?\s*$")


@dataclass(frozen=True)
class Entry:
    """One voiced dialogue entry: its clip and its subtitle lines with the times of all but the last."""
    race: str
    label: str
    ogg: str              # file name inside 3dovoice/<race>/
    lines: tuple[str, ...]
    times_ms: tuple[int, ...]


@dataclass(frozen=True)
class Line:
    """One subtitle line cut out of its entry's clip (samples [start, end) at SAMPLE_RATE)."""
    race: str
    name: str             # '<race>-NNN-<line index>': unique, the utterance id's tail
    text: str
    start: int
    end: int


def parse_text(text: str) -> dict[str, tuple[str, list[str]]]:
    """A comm .txt -> {label: (ogg, subtitle lines)} of its voiced entries."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current: Optional[list[str]] = None
    for raw in text.splitlines():
        m = ENTRY.match(raw)
        if m:
            current = None
            if m.group(2):
                current = []
                entries[m.group(1)] = (m.group(2), current)
            continue
        if current is not None and raw.strip():
            current.append(raw.strip())
    return entries


def parse_times(text: str) -> dict[str, list[int]]:
    """A .ts -> {label: milliseconds of each subtitle line but the last}."""
    times = {}
    for raw in text.splitlines():
        m = re.match(r"^#\(([^)]+)\)\s*(.*)$", raw)
        if m:
            times[m.group(1)] = [int(v) for v in m.group(2).split(",") if v.strip()]
    return times


def entries(voice_pack: Path = VOICE_PACK, content_pack: Path = CONTENT_PACK,
            races: Optional[set[str]] = None) -> list[Entry]:
    """Every voiced entry whose clip exists and whose subtitle times match its lines (n - 1 times for n lines),
    sorted by race and clip; effect-processed races are left out unless `races` names them."""
    out = []
    with zipfile.ZipFile(voice_pack) as voice, zipfile.ZipFile(content_pack) as content:
        clips = set(voice.namelist())
        content_names = set(content.namelist())
        for ts_name in sorted(n for n in clips if re.match(r"^3dovoice/[^/]+/[^/]+\.ts$", n)):
            race = ts_name.split("/")[1]
            if (races is None and race in EFFECT_RACES) or (races is not None and race not in races):
                continue
            # the voice pack's own copy of a text, where it has one, was edited to match its recordings
            own, shared = f"3dovoice/{race}/{race}.txt", f"base/comm/{race}/{race}.txt"
            if own in clips:
                text = voice.read(own)
            elif shared in content_names:
                text = content.read(shared)
            else:
                continue
            times = parse_times(voice.read(ts_name).decode("utf-8", "replace"))
            taken = set()  # a clip named by two entries is one recording: the first entry's text is kept
            for label, (ogg, lines) in parse_text(text.decode("utf-8", "replace")).items():
                if (f"3dovoice/{race}/{ogg}" in clips and ogg not in taken and lines
                        and len(times.get(label, ())) == len(lines) - 1):
                    taken.add(ogg)
                    out.append(Entry(race, label, ogg, tuple(lines), tuple(times[label])))
    return sorted(out, key=lambda e: (e.race, e.ogg))


def entry_audio(entry: Entry, voice_pack: Path = VOICE_PACK) -> np.ndarray:
    """The entry's clip: float32 mono samples at SAMPLE_RATE."""
    with zipfile.ZipFile(voice_pack) as voice:
        data = voice.read(f"3dovoice/{entry.race}/{entry.ogg}")
    audio, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    if rate != SAMPLE_RATE:
        raise ValueError(f"{entry.ogg}: {rate} Hz, expected {SAMPLE_RATE}")
    return audio.mean(axis=1)


def cut(entry: Entry, audio: np.ndarray) -> list[Line]:
    """The entry's lines that can be cut cleanly out of its clip (module docstring)."""
    frame = int(FRAME_S * SAMPLE_RATE)
    rms = frame_rms(audio, frame)
    if not rms.size:
        return []
    loud = rms[rms > np.percentile(rms, 50)]
    pause_level = PAUSE_SHARE * (np.median(loud) if loud.size else 0.0)
    # boundaries in samples: the clip's start, each subtitle time moved to the quietest nearby frame, its end
    bounds, clean = [0], [True]
    elapsed_ms = 0
    search = round(BOUNDARY_SEARCH_S * SAMPLE_RATE / frame)
    for ms in entry.times_ms:
        elapsed_ms += ms
        centre = round(elapsed_ms / 1000 * SAMPLE_RATE / frame)
        lo, hi = centre - search, centre + search + 1
        if lo < 0 or hi > rms.size:
            # The search would reach past the clip's start or end, where the quietest frame may be the clip's
            # own leading or trailing silence rather than the pause between two lines: the line this boundary
            # ends, and every later one, cannot be placed. The lines before it can.
            return _kept(entry, bounds, clean)
        best = lo + int(np.argmin(rms[lo:hi]))
        boundary = best * frame + frame // 2
        if boundary <= bounds[-1]:  # two subtitle times closer than the search: which speech is whose is unknown
            return []
        bounds.append(boundary)
        clean.append(bool(rms[best] <= pause_level))
    bounds.append(audio.size)
    clean.append(True)
    return _kept(entry, bounds, clean)


def _kept(entry: Entry, bounds: list[int], clean: list[bool]) -> list[Line]:
    """The lines between consecutive bounds whose both ends are clean and whose length suits their text."""
    kept = []
    for i, text in enumerate(entry.lines[:len(bounds) - 1]):
        start, end = bounds[i], bounds[i + 1]
        seconds = (end - start) / SAMPLE_RATE
        if seconds > MAX_SECONDS or not (clean[i] and clean[i + 1]):
            continue
        if MIN_SYLLABLES_PER_SECOND <= syllables(text) / seconds <= MAX_SYLLABLES_PER_SECOND:
            kept.append(Line(entry.race, f"{entry.ogg[:-4]}-{i}", text, start, end))
    return kept


def line_audio(line: Line, audio: np.ndarray) -> np.ndarray:
    """The line's samples, leading and trailing silence trimmed."""
    return trim_silence(audio[line.start:line.end], SAMPLE_RATE)
