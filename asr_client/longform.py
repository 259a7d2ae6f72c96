"""Audio of any length, offline: cut at pauses, transcribe the pieces in parallel, stitch words and times.

The offline model refuses audio past its ``max_audio_seconds`` (its encoder attends over the whole input, so
memory grows with the square of the length), and a whole lecture in one request would leave every other core
idle. So the audio is cut where it is quietest, into pieces of at most ``max_piece_s``, the pieces go to the
server ``concurrency`` at a time, and each piece's words (its DETAILS, asked for with ``details=true``) are
shifted by the piece's start.

The cutter is an energy splitter: silero-vad would need its ONNX weights, which no package the project
installs carries, and nothing may be downloaded at run time. On speech with pauses (what a file of sentences
has) a frame-energy floor finds the pauses; a piece with no pause at all is cut at its quietest frame.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import tritonclient.grpc.aio as grpcclient

from asr_client import offline
from asr_client.audio import SAMPLE_RATE

FRAME_S = 0.02  # energy frame, seconds
MAX_PIECE_S = 20.0  # longest piece sent in one request (well under the built repository's 60 s limit)
MIN_PAUSE_S = 0.3  # a quiet stretch at least this long is a place to cut
PAD_S = 0.3  # pause kept on each side of a piece (the model saw sentences with some silence around them)
MIN_PIECE_S = 1.0  # speech shorter than this between pauses is joined to its neighbour
ABOVE_FLOOR_DB = 12.0  # a frame at most this far above the noise floor (10th percentile) counts as quiet
SILENT_DB = -90.0  # a frame below this mean power (dB re full scale) is digital silence


@dataclass(frozen=True)
class Piece:
    start: int  # first sample
    end: int  # one past the last sample


def find_pieces(samples: np.ndarray, max_piece_s: float = MAX_PIECE_S, min_pause_s: float = MIN_PAUSE_S,
                sample_rate: int = SAMPLE_RATE) -> list[Piece]:
    """Pieces of speech between pauses (at least ``min_pause_s`` quiet), none longer than ``max_piece_s``;
    silence between them is left out."""
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
    if quiet.all():
        return []
    # quiet runs at least min_pause long: their middles are candidate cuts
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
    # speech spans between pauses, then merged greedily up to the longest piece
    spans = []
    pos = 0
    for a, b in cuts:
        if a > pos:
            spans.append((pos, a))
        pos = b
    if pos < n_frames:
        spans.append((pos, n_frames))
    spans = [(a, b) for a, b in spans if not quiet[a:b].all()]
    max_frames = max(1, int(max_piece_s / FRAME_S))
    min_frames = int(MIN_PIECE_S / FRAME_S)
    pieces: list[tuple[int, int]] = []
    for a, b in spans:
        while b - a > max_frames:  # no pause long enough: cut at the quietest frame of the allowed stretch
            window = db[a + max_frames // 2: a + max_frames]
            cut = a + max_frames // 2 + int(np.argmin(window))
            pieces.append((a, cut))
            a = cut
        # a very short span (a word on its own) joins the piece before it; otherwise every pause is a cut:
        # recognisers trained on sentences decode sentences best, and more pieces run more in parallel
        if pieces and (b - a < min_frames or pieces[-1][1] - pieces[-1][0] < min_frames) \
                and b - pieces[-1][0] <= max_frames:
            pieces[-1] = (pieces[-1][0], b)
        else:
            pieces.append((a, b))
    pad = int(PAD_S / FRAME_S)
    return [Piece(max(0, (a - pad) * frame), min(len(samples), (b + pad) * frame)) for a, b in pieces]


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


async def transcribe_long(grpc_client: grpcclient.InferenceServerClient, samples: np.ndarray,
                          model: str = offline.DEFAULT_OFFLINE_MODEL, concurrency: int = 4,
                          parameters: Optional[dict] = None, max_piece_s: float = MAX_PIECE_S,
                          timeout_s: Optional[float] = None) -> LongResult:
    """samples: (n,) float32 at 16 kHz. Pieces run ``concurrency`` at a time; words come back stitched."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    pieces = await asyncio.to_thread(find_pieces, samples, max_piece_s)
    gate = asyncio.Semaphore(max(1, concurrency))
    request_parameters = {**(parameters or {}), "details": True}

    async def one(index: int, piece: Piece):
        async with gate:
            try:
                return await offline.recognize(grpc_client, samples[piece.start:piece.end], model,
                                               request_id=f"piece-{index}", timeout_s=timeout_s,
                                               parameters=request_parameters, details=True)
            except offline.OfflineError as error:
                return error

    answers = await asyncio.gather(*(one(i, p) for i, p in enumerate(pieces)))
    words, texts, spans, errors = [], [], [], []
    for piece, answer in zip(pieces, answers):
        offset = piece.start / SAMPLE_RATE
        if isinstance(answer, Exception):
            errors.append(f"{offset:.2f}-{piece.end / SAMPLE_RATE:.2f} s: {answer}")
            continue
        spans.append((round(offset, 3), round(piece.end / SAMPLE_RATE, 3), answer.text))
        if answer.text:
            texts.append(answer.text)
        for w in (answer.details or {}).get("words", []):
            words.append(Word(w["word"], round(offset + w["start"], 3), round(offset + w["end"], 3),
                              w.get("confidence")))
    return LongResult(" ".join(texts), tuple(words), tuple(spans), loop.time() - started, tuple(errors))
