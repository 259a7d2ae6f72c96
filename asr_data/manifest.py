"""The generator's record of finished utterances: an append-only JSON-lines manifest, one line per
utterance written after its audio file is in place, and its export to Kaldi-style split dirs. A line relabelled
later (the games' lines, when the label rules change) is appended again: the last row of an utterance wins.

A crash can leave at most a partial last line; `Manifest` drops it on open, so a restart redoes that one
utterance (its seed makes it identical) and skips every other finished one.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Iterable


class Manifest:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._drop_partial_tail()
        self.rows: dict[str, dict] = {}
        for row in read_rows(self.path):
            self.rows[row["utt"]] = row
        self._fh = open(self.path, "a", encoding="utf-8")

    def _drop_partial_tail(self) -> None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):
            os.truncate(self.path, data.rfind(b"\n") + 1)

    def __contains__(self, utt: str) -> bool:
        return utt in self.rows

    def append(self, row: dict) -> None:
        self._fh.write(json.dumps(row, sort_keys=True) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.rows[row["utt"]] = row

    def close(self) -> None:
        self._fh.close()


def latest_rows(path: Path) -> list[dict]:
    """A manifest's rows, the last one of each utterance (a relabelled line is appended again: see
    `scripts/gen_corpus.py write_real_clips`), in the order utterances first appear."""
    rows: dict[str, dict] = {}
    for row in read_rows(path):
        rows[row["utt"]] = row
    return list(rows.values())


def read_rows(path: Path) -> Iterable[dict]:
    if not Path(path).exists():
        return
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.endswith("\n"):
                yield json.loads(line)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def export_kaldi(rows: Iterable[dict], root: Path) -> dict[str, int]:
    """ROOT/<split>/{wav.scp,text,utt2spk,utt2dur} from manifest rows (absolute wav paths), sorted by utt.
    Returns utterances per split."""
    by_split: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_split[row["split"]].append(row)
    for split, items in by_split.items():
        items.sort(key=lambda r: r["utt"])
        d = Path(root) / split
        d.mkdir(parents=True, exist_ok=True)
        _atomic_write(d / "wav.scp", "".join(f"{r['utt']} {Path(root, r['path']).resolve()}\n" for r in items))
        _atomic_write(d / "text", "".join(f"{r['utt']} {r['label']}\n" for r in items))
        _atomic_write(d / "utt2spk", "".join(f"{r['utt']} {r['speaker']}\n" for r in items))
        _atomic_write(d / "utt2dur", "".join(f"{r['utt']} {r['dur']:.3f}\n" for r in items))
    return {s: len(v) for s, v in by_split.items()}


def summary(rows: Iterable[dict]) -> dict[str, dict[str, list[float]]]:
    """{split: {family: [utterances, hours]}}, with an 'all' family per split."""
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0, 0.0]))
    for r in rows:
        for fam in (r["family"], "all"):
            cell = out[r["split"]][fam]
            cell[0] += 1
            cell[1] += r["dur"] / 3600
    return out


# Utterance id prefixes of the games' recorded lines: the real speech of a leg's split, the rest is synthetic.
REAL_SPEECH = ("fotaq_", "drascula_", "bass_", "uqm_")


def leg_name(leg: int, with_uqm: bool) -> str:
    """A relay leg's folder name under ROOT/legs and ROOT/exp. A leg that trains on The Ur-Quan Masters'
    non-commercial lines has folders of its own, so a licence-clean relay never reuses its data or its
    checkpoints (a non-commercial relay branched from a clean one counts the same leg numbers)."""
    return f"leg{leg}_uqm" if with_uqm else f"leg{leg}"
