"""Subtitles from timed words: SRT and WebVTT cues (a few seconds and a line's worth of text each).

Both formats are a few lines of text; the packages that write them (srt, webvtt-py) would add two dependencies
for what ``cues`` + two formatters do here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

MAX_CUE_S = 6.0  # a cue lasts at most this long
MAX_CUE_CHARS = 64  # ... and holds at most this much text
GAP_S = 0.8  # a pause this long between words starts a new cue


@dataclass(frozen=True)
class Cue:
    start: float  # seconds
    end: float
    text: str


def cues(words: Sequence, max_s: float = MAX_CUE_S, max_chars: int = MAX_CUE_CHARS, gap_s: float = GAP_S
         ) -> list[Cue]:
    """words: objects with .word, .start, .end (seconds), in time order."""
    out: list[Cue] = []
    group: list = []
    for w in words:
        if group:
            text = " ".join(g.word for g in group + [w])
            if w.end - group[0].start > max_s or len(text) > max_chars or w.start - group[-1].end > gap_s:
                out.append(Cue(group[0].start, group[-1].end, " ".join(g.word for g in group)))
                group = []
        group.append(w)
    if group:
        out.append(Cue(group[0].start, group[-1].end, " ".join(g.word for g in group)))
    return out


def _clock(seconds: float, decimal: str) -> str:
    ms = int(round(max(seconds, 0.0) * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{decimal}{ms:03d}"


def to_srt(items: Iterable[Cue]) -> str:
    blocks = [f"{i}\n{_clock(c.start, ',')} --> {_clock(c.end, ',')}\n{c.text}\n" for i, c in enumerate(items, 1)]
    return "\n".join(blocks)


def to_vtt(items: Iterable[Cue]) -> str:
    blocks = [f"{_clock(c.start, '.')} --> {_clock(c.end, '.')}\n{c.text}\n" for c in items]
    return "WEBVTT\n\n" + "\n".join(blocks)
