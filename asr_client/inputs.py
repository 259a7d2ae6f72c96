"""Turn command-line inputs into a list of utterances: audio files, folders, Kaldi/WeNet lists, JSONL manifests.

- `*.wav`, `*.flac`, ... : one utterance, keyed by the file's stem.
- a folder: every audio file below it (sorted); a `wav.scp` inside it is used instead, with its `text`.
- `wav.scp` (or any `*.scp`): lines `key path`; a `text` file beside it gives references.
- `*.jsonl`: one object per line with the audio path under `audio_filepath`, `audio`, `wav` or `path`,
  optional `text` and `key`/`id`/`utt` (NeMo and WeNet data.list styles).
- references (`--trans` / Kaldi `text`): lines `key text`.

Relative paths in lists resolve against `data_dir` when given (WeNet's `--data_dir`), else against the
list's own folder.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

log = logging.getLogger("asr_client")

# files a data folder holds beside its audio, skipped without a word
NOT_AUDIO_SUFFIXES = frozenset({".txt", ".scp", ".jsonl", ".json", ".tsv", ".csv", ".md", ".lab", ".srt", ".vtt"})
AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".ogg", ".opus", ".mp3", ".aiff", ".aif", ".au", ".sph",
                            # decoded by PyAV (ffmpeg) when soundfile cannot
                            ".m4a", ".aac", ".mp4", ".webm", ".mkv", ".wma", ".amr", ".3gp", ".caf", ".mov"})
PATH_FIELDS = ("audio_filepath", "audio", "wav", "path")
KEY_FIELDS = ("key", "id", "utt", "utt_id")


class InputError(Exception):
    """A list or manifest that cannot be parsed at all (single bad audio files are reported later, per file)."""


@dataclass(frozen=True)
class Utterance:
    key: str  # unique id, printed in results
    path: Path  # audio file
    reference: Optional[str] = None  # transcript to score against, if known


def read_references(path: str | Path) -> dict[str, str]:
    """Kaldi/WeNet `text`: `key<whitespace>transcript` per line; a key with no text is an empty reference."""
    references = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        key, _, text = line.strip().partition("\t") if "\t" in line else line.strip().partition(" ")
        references[key.strip()] = " ".join(text.split())
    return references


def read_wav_scp(path: str | Path, data_dir: Optional[Path] = None) -> list[Utterance]:
    path = Path(path)
    utterances = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split(maxsplit=1)
        if len(fields) != 2:
            raise InputError(f"{path}:{number}: expected 'key path', got {line!r}")
        key, location = fields[0], fields[1].strip()
        utterances.append(Utterance(key=key, path=_resolve(location, data_dir or path.parent)))
    return utterances


def read_manifest(path: str | Path, data_dir: Optional[Path] = None) -> list[Utterance]:
    path = Path(path)
    utterances = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{path}:{number}: not JSON: {error}") from error
        location = next((entry[f] for f in PATH_FIELDS if isinstance(entry, dict) and f in entry), None)
        if not isinstance(location, str):
            raise InputError(f"{path}:{number}: no audio path (one of {', '.join(PATH_FIELDS)})")
        audio_path = _resolve(location, data_dir or path.parent)
        key = next((str(entry[f]) for f in KEY_FIELDS if f in entry), audio_path.stem)
        reference = entry.get("text")
        utterances.append(Utterance(key=key, path=audio_path, reference=reference))
    return utterances


def collect_utterances(
    inputs: Sequence[str | Path],
    references: Optional[str | Path] = None,
    data_dir: Optional[str | Path] = None,
) -> list[Utterance]:
    """Expand inputs in order; attach references from `references` (overrides lists' own); keys stay unique."""
    data_dir = Path(data_dir) if data_dir else None
    found: list[Utterance] = []
    for item in inputs:
        found.extend(_expand(Path(item), data_dir))
    if references is not None:
        by_key = read_references(references)
        found = [Utterance(u.key, u.path, by_key.get(u.key, u.reference)) for u in found]
    return _unique_keys(found)


def _expand(path: Path, data_dir: Optional[Path]) -> list[Utterance]:
    if path.is_dir():
        if (path / "wav.scp").is_file():
            return _scp_with_text(path / "wav.scp", data_dir)
        everything = sorted(p for p in path.rglob("*") if p.is_file())
        files = [p for p in everything if p.suffix.lower() in AUDIO_SUFFIXES]
        skipped = [p for p in everything if p.suffix.lower() not in AUDIO_SUFFIXES | NOT_AUDIO_SUFFIXES]
        if skipped:  # say so: a folder of .m4b or .voc files must not look like an empty folder
            names = ", ".join(str(p.relative_to(path)) for p in skipped[:5]) + (" ..." if len(skipped) > 5 else "")
            log.warning("skipped %d file(s) in %s whose suffix is not a known audio format (%s): %s", len(skipped),
                        path, " ".join(sorted(AUDIO_SUFFIXES)), names)
        return [Utterance(key=_folder_key(p, path), path=p) for p in files]
    if path.suffix == ".scp":
        return _scp_with_text(path, data_dir)
    if path.suffix == ".jsonl":
        return read_manifest(path, data_dir)
    # Anything else is taken as an audio file; if it is not one, transcription reports it and goes on.
    return [Utterance(key=path.stem, path=path)]


def _scp_with_text(scp: Path, data_dir: Optional[Path]) -> list[Utterance]:
    utterances = read_wav_scp(scp, data_dir)
    text = scp.parent / "text"
    if text.is_file():
        by_key = read_references(text)
        utterances = [Utterance(u.key, u.path, by_key.get(u.key)) for u in utterances]
    return utterances


def _folder_key(path: Path, root: Path) -> str:
    # Nested folders can hold equal stems (spk1/a.wav, spk2/a.wav): key on the relative path.
    return path.relative_to(root).with_suffix("").as_posix()


def _resolve(location: str, base: Path) -> Path:
    path = Path(location).expanduser()
    return path if path.is_absolute() else base / path


def _unique_keys(utterances: Iterable[Utterance]) -> list[Utterance]:
    seen: dict[str, int] = {}
    out = []
    for u in utterances:
        count = seen.get(u.key, 0)
        seen[u.key] = count + 1
        out.append(u if count == 0 else Utterance(f"{u.key}#{count}", u.path, u.reference))
    return out
