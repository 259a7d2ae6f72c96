"""Audio of any length, offline: cut at pauses, transcribe the pieces in parallel, stitch words and times.

The offline model refuses audio past its ``max_audio_seconds`` (its encoder attends over the whole input, so
memory grows with the square of the length), and a whole lecture in one request would leave every other core
idle. So the audio is cut where it is quietest, into pieces of at most ``max_piece_s``, the pieces go to the
server ``concurrency`` at a time, and each piece's words (its DETAILS, asked for with ``details=true``) are
shifted by the piece's start.

Pauses are stretches that neither a frame-energy floor nor Silero's VAD (asr_client.vad, when silero-vad is
installed) calls speech: each misses speech the other hears (the energy floor: sentences within a few dB of
steady noise; the VAD: some synthetic voices in noise), and sending a stretch of noise costs only compute,
while leaving out a sentence loses it. Speech with no pause for ``max_piece_s`` is cut at its quietest frame,
the pieces on either side overlapping so that each hears the words at the cut whole, and each word is
reported by the piece on whose side of the cut it lies. What could not be transcribed (a piece the server
refused, speech that came back without words) is reported with its times, never dropped in silence.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional

import numpy as np
import tritonclient.grpc.aio as grpcclient

from asr_client import offline
from asr_client.audio import SAMPLE_RATE
from asr_client.vad import default_vad

FRAME_S = 0.02  # energy frame, seconds
MAX_PIECE_S = 20.0  # longest piece sent in one request (well under the built repository's 60 s limit)
# A quiet stretch at least this long is a place to cut, and sounds shorter than MIN_SPEECH_S between such
# pauses are not speech (clicks, a step in the background): sherpa-onnx's VAD defaults (min_silence_duration,
# min_speech_duration). Shorter pauses occur inside sentences, and a sentence cut in two loses words at the cut.
MIN_PAUSE_S = 0.5
MIN_SPEECH_S = 0.25
# Audio kept around a piece's speech, taken from the pause beside it. Asymmetric because a CTC model emits a
# word's tokens after the word (the demo model: its last token a median 190 ms after the word's end), and a
# weak final consonant (the 's' of "chairs") falls under the energy floor: a piece that ends 0.2-0.3 s after
# the last loud frame loses its last letters ("black cha"). Before the speech, a little quiet is enough (a
# weak onset under the floor); more of the pause than that hurts when the pause is not the speech's own
# background (a recording whose noise changes at the sentence): the demo model then drops the first word.
PAD_BEFORE_S = 0.1
PAD_AFTER_S = 0.5
# A piece cut inside speech (no pause within max_piece_s) overlaps its neighbours by this much on each side:
# the model hears the words around the cut whole, and each piece keeps only the words on its side of the cut.
CUT_CONTEXT_S = 1.0
ABOVE_FLOOR_DB = 12.0  # a frame at most this far above the noise floor (10th percentile) counts as quiet
SILENT_DB = -90.0  # a frame below this mean power (dB re full scale) is digital silence


@dataclass(frozen=True)
class Piece:
    start: int  # first sample sent
    end: int  # one past the last sample sent
    keep_start: int = -1  # words centred before this sample belong to the piece before (-1: no cut, keep all)
    keep_end: int = -1  # words centred at or after this sample belong to the piece after (-1: keep all)

    def keeps(self, centre: int) -> bool:
        """Whether a word centred at sample ``centre`` (of the whole file) is this piece's to report."""
        return (self.keep_start < 0 or centre >= self.keep_start) and (self.keep_end < 0 or centre < self.keep_end)


def find_pieces(samples: np.ndarray, max_piece_s: float = MAX_PIECE_S, min_pause_s: float = MIN_PAUSE_S,
                sample_rate: int = SAMPLE_RATE, speech: Optional[np.ndarray] = None) -> list[Piece]:
    """Pieces of speech between pauses (at least ``min_pause_s`` quiet), none longer than ``max_piece_s`` of
    speech; the rest of each pause is left out. Speech with no pause is cut at its quietest frame, and those
    pieces overlap (see ``Piece.keeps``). ``speech``: a bool per FRAME_S frame from a VAD (asr_client.vad);
    without it a frame is quiet when its energy is near the file's noise floor."""
    frame = max(1, int(FRAME_S * sample_rate))
    n_frames = len(samples) // frame
    if n_frames == 0:
        return [Piece(0, len(samples))] if len(samples) else []
    energy = np.square(samples[: n_frames * frame].astype(np.float64).reshape(n_frames, frame)).mean(axis=1)
    db = 10 * np.log10(energy + 1e-12)
    loud = np.percentile(db, 95)
    # quiet: near the file's noise floor (recordings differ in level and noise; digital silence, which some
    # files hold in places, is left out of the floor's estimate), and never within 10 dB of the loud frames
    # (steady speech has no pause)
    sounding = db[db > SILENT_DB]
    floor = np.percentile(sounding, 10) if sounding.size else SILENT_DB
    threshold = min(floor + ABOVE_FLOOR_DB, loud - 10.0)
    quiet = (db < threshold) | (db < SILENT_DB)
    if speech is not None:  # quiet only where neither the energy nor the VAD hears anything
        quiet &= ~np.asarray(speech[:n_frames], bool) | (db < SILENT_DB)
    if quiet.all():
        return []
    # pauses: quiet runs at least min_pause long
    cuts = []
    run_start = None
    min_run = max(1, int(round(min_pause_s / FRAME_S)))
    for i, q in enumerate(np.append(quiet, False)):
        if q and run_start is None:
            run_start = i
        elif not q and run_start is not None:
            if i - run_start >= min_run:
                cuts.append((run_start, i))
            run_start = None
    # speech spans between pauses; sounds too short to be speech are left out
    spans = []
    pos = 0
    for a, b in cuts:
        if a > pos:
            spans.append((pos, a))
        pos = b
    if pos < n_frames:
        spans.append((pos, n_frames))
    min_speech = max(1, int(round(MIN_SPEECH_S / FRAME_S)))
    spans = [(a, b) for a, b in spans if b - a >= min_speech and not quiet[a:b].all()]
    max_frames = max(1, int(max_piece_s / FRAME_S))
    # (first frame, one past the last, cut inside speech before it, cut inside speech after it)
    pieces: list[tuple[int, int, bool, bool]] = []
    for a, b in spans:
        forced = False
        while b - a > max_frames:  # no pause long enough: cut at the quietest frame of the allowed stretch
            window = db[a + max_frames // 2: a + max_frames]
            cut = a + max_frames // 2 + int(np.argmin(window))
            pieces.append((a, cut, forced, True))
            a, forced = cut, True
        # every pause is a cut, however short the speech between: a recogniser trained on sentences decodes
        # one sentence at a time best (the demo model turns two sentences in one request into nonsense: words
        # of the first repeated in the second), and more pieces run more in parallel
        pieces.append((a, b, forced, False))
    before, after = int(round(PAD_BEFORE_S / FRAME_S)), int(round(PAD_AFTER_S / FRAME_S))
    context = int(round(CUT_CONTEXT_S / FRAME_S))
    out = []
    for i, (a, b, cut_before, cut_after) in enumerate(pieces):
        # a pause is shared: the piece after it takes up to PAD_BEFORE (at most half), the one before the rest
        # up to PAD_AFTER, so pieces never overlap at a pause
        if cut_before:
            first, keep_start = a - context, a * frame
        elif i == 0:
            first, keep_start = a - before, -1
        else:
            gap = a - pieces[i - 1][1]
            first, keep_start = a - min(before, gap // 2), -1
        if cut_after:
            last, keep_end = b + context, b * frame
        elif i + 1 == len(pieces):
            last, keep_end = b + after, -1
        else:
            gap = pieces[i + 1][0] - b
            last, keep_end = b + min(after, gap - min(before, gap // 2)), -1
        out.append(Piece(max(0, first * frame), min(len(samples), last * frame), keep_start, keep_end))
    if out and pieces[-1][1] == n_frames:  # the samples after the last whole frame
        out[-1] = Piece(out[-1].start, len(samples), out[-1].keep_start, out[-1].keep_end)
    return out


@dataclass(frozen=True)
class Word:
    word: str
    start: float  # seconds from the start of the file
    end: float
    confidence: Optional[float] = None


@dataclass(frozen=True)
class LongResult:
    text: str
    words: tuple[Word, ...]
    pieces: tuple[tuple[float, float, str], ...]  # (start s, end s, text) of every piece sent
    latency_s: float  # wall time of the whole file
    errors: tuple[str, ...] = field(default=())  # pieces the server refused (their audio is missing)
    # (start s, end s, why) of every stretch of speech with no words in the result: refused pieces, and
    # pieces the VAD or energy heard speech in that came back without words
    untranscribed: tuple[tuple[float, float, str], ...] = field(default=())


# on_progress(pieces done, pieces in all): called once the pieces are known and as each one finishes
Progress = Callable[[int, int], None]


async def transcribe_long(grpc_client: grpcclient.InferenceServerClient, samples: np.ndarray,
                          model: str = offline.DEFAULT_OFFLINE_MODEL, concurrency: int = 4,
                          parameters: Optional[dict] = None, max_piece_s: float = MAX_PIECE_S,
                          timeout_s: Optional[float] = None, on_progress: Optional[Progress] = None,
                          use_vad: bool = True) -> LongResult:
    """samples: (n,) float32 at 16 kHz. Pieces run ``concurrency`` at a time; words come back stitched."""

    async def recognize(piece: np.ndarray, request_id: str, request_parameters: dict):
        try:
            return await offline.recognize(grpc_client, piece, model, request_id=request_id, timeout_s=timeout_s,
                                           parameters=request_parameters, details=True)
        except offline.OfflineError as error:
            return error

    return await transcribe_pieces(recognize, samples, concurrency, parameters, max_piece_s, on_progress, use_vad)


# recognize(samples of a piece, request id, request parameters) -> an object with .text and .details (the
# DETAILS dict), or the exception that failed the piece
Recognize = Callable[[np.ndarray, str, dict], Awaitable[Any]]


def speech_frames(samples: np.ndarray, use_vad: bool = True) -> Optional[np.ndarray]:
    """The VAD's speech per FRAME_S frame, or None without silero-vad (or with use_vad off)."""
    vad = default_vad() if use_vad else None
    return None if vad is None else vad.speech_frames(samples, FRAME_S)


def heard_speech(speech: Optional[np.ndarray], piece: Piece) -> bool:
    """Whether the VAD heard at least MIN_SPEECH_S of speech in the piece (without a VAD: any piece was cut
    because it was louder than its surroundings, so yes)."""
    if speech is None:
        return True
    frame = int(FRAME_S * SAMPLE_RATE)
    return int(speech[piece.start // frame: piece.end // frame].sum()) * FRAME_S >= MIN_SPEECH_S


async def transcribe_pieces(recognize: Recognize, samples: np.ndarray, concurrency: int = 4,
                            parameters: Optional[dict] = None, max_piece_s: float = MAX_PIECE_S,
                            on_progress: Optional[Progress] = None, use_vad: bool = True) -> LongResult:
    """The long-audio path over any way of recognising one piece (a gRPC client above; the server's own core
    for its OpenAI-style endpoint)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    speech = await asyncio.to_thread(speech_frames, samples, use_vad)
    pieces = await asyncio.to_thread(find_pieces, samples, max_piece_s, MIN_PAUSE_S, SAMPLE_RATE, speech)
    gate = asyncio.Semaphore(max(1, concurrency))
    request_parameters = {**(parameters or {}), "details": True}
    done = 0
    if on_progress is not None:
        on_progress(0, len(pieces))

    async def one(index: int, piece: Piece):
        nonlocal done
        async with gate:
            answer = await recognize(samples[piece.start:piece.end], f"piece-{index}", request_parameters)
        done += 1
        if on_progress is not None:
            on_progress(done, len(pieces))
        return answer

    # longest first: requests in flight together have similar lengths, so the server's dynamic batcher pads
    # a batch little (a batch costs as much as its longest piece); the answers go back into file order
    order = sorted(range(len(pieces)), key=lambda i: pieces[i].start - pieces[i].end)
    answers = [None] * len(pieces)
    for i, answer in zip(order, await asyncio.gather(*(one(i, pieces[i]) for i in order))):
        answers[i] = answer
    words, texts, spans, errors, untranscribed = [], [], [], [], []
    for piece, answer in zip(pieces, answers):
        offset, end = piece.start / SAMPLE_RATE, piece.end / SAMPLE_RATE
        if isinstance(answer, Exception):
            errors.append(f"{offset:.2f}-{end:.2f} s: {answer}")
            untranscribed.append((round(offset, 3), round(end, 3), f"refused: {answer}"))
            continue
        kept = [w for w in (answer.details or {}).get("words", [])
                if piece.keeps(piece.start + round(SAMPLE_RATE * (w["start"] + w["end"]) / 2))]
        # a piece cut inside speech reports only the words on its side of the cut (its neighbour heard the
        # rest too): its text is those words; any other piece's text is the server's transcript
        cut = piece.keep_start >= 0 or piece.keep_end >= 0
        text = " ".join(w["word"] for w in kept) if cut and answer.details is not None else answer.text
        spans.append((round(offset, 3), round(piece.end / SAMPLE_RATE, 3), text))
        if text:
            texts.append(text)
        elif heard_speech(speech, piece):
            untranscribed.append((round(offset, 3), round(end, 3), "no words recognised"))
        words += [Word(w["word"], round(offset + w["start"], 3), round(offset + w["end"], 3), w.get("confidence"))
                  for w in kept]
    return LongResult(" ".join(texts), tuple(words), tuple(spans), loop.time() - started, tuple(errors),
                      tuple(untranscribed))
