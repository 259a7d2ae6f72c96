"""Result writers, one per output format, in a registry as whisper's ``get_writer``: each writes one
utterance's result (an ``UtteranceResult``) to a text stream. ``write_all`` puts each input file's result into
``<output_dir>/<key>.<format>`` for one file or thousands.

    txt   the transcript, one line
    json  text, words with times and confidence, duration, the reference when known
    srt   subtitles (cues cut at pauses and lengths, asr_client.subtitles)
    vtt   WebVTT subtitles
    tsv   one word per line: start, end (milliseconds, as whisper's tsv), word
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable, TextIO

from asr_client import longform, report, subtitles
from asr_client.batch import UtteranceResult

Writer = Callable[[UtteranceResult, TextIO], None]


def _words(result: UtteranceResult) -> list[longform.Word]:
    return [longform.Word(w, s, e, c) for w, s, e, c in result.words]


def write_txt(result: UtteranceResult, out: TextIO) -> None:
    out.write((result.hypothesis or "") + "\n")


def write_json(result: UtteranceResult, out: TextIO) -> None:
    out.write(json.dumps(report.result_record(result), ensure_ascii=False, indent=1) + "\n")


def write_srt(result: UtteranceResult, out: TextIO) -> None:
    out.write(subtitles.to_srt(subtitles.cues(_words(result))))


def write_vtt(result: UtteranceResult, out: TextIO) -> None:
    out.write(subtitles.to_vtt(subtitles.cues(_words(result))))


def write_tsv(result: UtteranceResult, out: TextIO) -> None:
    out.write("start\tend\ttext\n")
    for w in _words(result):
        out.write(f"{round(w.start * 1000)}\t{round(w.end * 1000)}\t{w.word}\n")


WRITERS: dict[str, Writer] = {"txt": write_txt, "json": write_json, "srt": write_srt, "vtt": write_vtt,
                              "tsv": write_tsv}
NEEDS_WORDS = frozenset({"srt", "vtt", "tsv", "json"})  # formats that carry word times


def get_writer(name: str) -> Writer:
    try:
        return WRITERS[name]
    except KeyError:
        raise ValueError(f"unknown output format {name!r}: one of {', '.join(WRITERS)} or all") from None


def parse_formats(text: str) -> list[str]:
    """'all' or a comma-separated list of format names -> the names (checked)."""
    names = list(WRITERS) if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        get_writer(name)
    return names


def write_all(result: UtteranceResult, output_dir: Path, formats: Iterable[str]) -> list[Path]:
    """``<output_dir>/<key>.<format>`` for each format (keys with '/' from nested folders make subfolders)."""
    written = []
    for name in formats:
        path = Path(output_dir) / f"{result.key}.{name}"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as out:
            get_writer(name)(result, out)
        written.append(path)
    return written
