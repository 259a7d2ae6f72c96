"""Token and word timestamps from the CTC alignment of a decoded hypothesis, with a confidence per token.

Why a forced alignment after the search rather than times tracked inside it: the search's hot loop stays as
it is (no per-prefix time arrays copied every frame), nothing is paid when nobody asks for timestamps, and
any hypothesis can be aligned, including the one attention rescoring picked from the n-best.

The alignment is the Viterbi path of the hypothesis through the CTC topology (blank, y1, blank, y2, ...,
blank) over the frames' top-k posteriors, which is all the scorers keep: a token outside a frame's top-k gets
``OUTSIDE_TOP_K`` there, a finite floor, so a path always exists. Every hypothesis of the prefix beam search
was built from top-k entries only, so its best path never needs the floor.

No library does Viterbi CTC alignment over top-k lists in numpy (torchaudio's ``forced_align`` wants full
(T, V) log-probs and torch), so the recursion is written here and compiled with numba like the search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ._ctc_kernels import _jit
from ..units import WORD_START, SymbolTable, tokens_to_text

OUTSIDE_TOP_K = -1.0e4  # log-prob of a token that is not among a frame's top-k (finite: a path always exists)
# Two words whose estimated times leave less than this between them are taken to be spoken one after the other
# with no pause, so they share one boundary (sherpa-onnx's VAD calls a shorter silence no pause either).
JOIN_GAP_S = 0.5


@_jit
def _viterbi_align(log_probs, ids, n_frames, tokens, blank_id, vocab):
    """Best CTC path of ``tokens`` through ``n_frames`` frames.

    log_probs, ids: (T, K) top-k values and token ids; tokens: (L,) int64, L >= 1.
    Returns (first, last, peak) (L,) int64 frames and best (L,) float64: for every token the first and last
    frame its label state holds on the path, the frame of its highest posterior there, and that posterior.
    """
    n_tok = tokens.shape[0]
    n_states = 2 * n_tok + 1
    neg = -1.0e30
    emit_of = np.full(vocab, OUTSIDE_TOP_K)  # scratch: this frame's log-prob per vocabulary id
    emit = np.empty((n_frames, n_tok + 1))  # column n_tok: blank
    for t in range(n_frames):
        for c in range(ids.shape[1]):
            v = ids[t, c]
            if 0 <= v < vocab:
                emit_of[v] = log_probs[t, c]
        for j in range(n_tok):
            emit[t, j] = emit_of[tokens[j]]
        emit[t, n_tok] = emit_of[blank_id]
        for c in range(ids.shape[1]):
            v = ids[t, c]
            if 0 <= v < vocab:
                emit_of[v] = OUTSIDE_TOP_K
    back = np.zeros((n_frames, n_states), np.int8)  # 0 stay, 1 from s-1, 2 from s-2
    alpha = np.full(n_states, neg)
    new = np.empty(n_states)
    alpha[0] = emit[0, n_tok]
    alpha[1] = emit[0, 0]
    for t in range(1, n_frames):
        for s in range(n_states):
            best = alpha[s]
            arg = 0
            if s >= 1 and alpha[s - 1] > best:
                best = alpha[s - 1]
                arg = 1
            if s >= 3 and s % 2 == 1 and tokens[(s - 1) // 2] != tokens[(s - 3) // 2] and alpha[s - 2] > best:
                best = alpha[s - 2]
                arg = 2
            e = emit[t, n_tok] if s % 2 == 0 else emit[t, (s - 1) // 2]
            new[s] = best + e
            back[t, s] = arg
        for s in range(n_states):
            alpha[s] = new[s]
    s = n_states - 1 if alpha[n_states - 1] >= alpha[n_states - 2] else n_states - 2
    first = np.full(n_tok, -1, np.int64)
    last = np.full(n_tok, -1, np.int64)
    peak = np.full(n_tok, -1, np.int64)
    best_lp = np.full(n_tok, neg)
    for t in range(n_frames - 1, -1, -1):
        if s % 2 == 1:
            j = (s - 1) // 2
            if last[j] < 0:
                last[j] = t
            first[j] = t
            if emit[t, j] >= best_lp[j]:
                best_lp[j] = emit[t, j]
                peak[j] = t
        step = back[t, s]
        s -= step
    return first, last, peak, best_lp


@dataclass(frozen=True)
class TokenTime:
    token: int  # unit id
    symbol: str  # its unit
    start: float  # seconds (first frame of the token on the best path)
    end: float  # seconds (end of the last frame of the token on the best path)
    confidence: float  # highest posterior of the token on its frames, in [0, 1]


@dataclass(frozen=True)
class WordTime:
    word: str
    start: float  # seconds
    end: float  # seconds
    confidence: float  # the lowest confidence of its tokens


def align_tokens(log_probs: np.ndarray, ids: np.ndarray, tokens: Sequence[int], symbols: SymbolTable,
                 frame_seconds: float, offset_seconds: float = 0.0, shift: tuple[float, float] = (0.0, 0.0)
                 ) -> list[TokenTime]:
    """Timestamps of ``tokens`` (a decoded hypothesis, blanks removed) on the frames they were decoded from.

    log_probs, ids: (T, K) top-k log-posteriors and their ids; frame_seconds: one encoder frame (frame shift x
    subsampling, 0.04 s for WeNet's 10 ms x 4); offset_seconds: the time of frame 0 (a stream's segment start);
    shift: (start, end) seconds to move the times earlier by: a CTC model emits its tokens some time after they
    are spoken, by an amount that is a property of the model (measured with bench/asr_extras.py).
    """
    tokens = [int(t) for t in tokens]
    n_frames = int(log_probs.shape[0])
    if not tokens or n_frames == 0:
        return []
    if n_frames < len(tokens):
        raise ValueError(f"{len(tokens)} tokens cannot be aligned to {n_frames} frames")
    first, last, peak, best = _viterbi_align(
        np.ascontiguousarray(log_probs, dtype=np.float64), np.ascontiguousarray(ids, dtype=np.int64),
        n_frames, np.asarray(tokens, dtype=np.int64), symbols.blank_id, len(symbols))
    out = []
    for j, token in enumerate(tokens):
        start = max(offset_seconds, offset_seconds + float(first[j]) * frame_seconds - shift[0])
        end = max(start, offset_seconds + float(last[j] + 1) * frame_seconds - shift[1])
        out.append(TokenTime(token, symbols.id_to_symbol[token], start, end, float(np.exp(min(best[j], 0.0)))))
    return out


def group_words(token_times: Sequence[TokenTime]) -> list[WordTime]:
    """Tokens -> words: a unit starting with the word mark (BPE "▁the") opens a word; a bare "▁" (character
    units) only separates words."""
    words: list[list[TokenTime]] = []
    for tt in token_times:
        if tt.symbol == WORD_START:
            words.append([])
            continue
        if tt.symbol.startswith(WORD_START) or not words:
            words.append([tt])
        else:
            words[-1].append(tt)
    out = []
    for group in words:
        if not group:
            continue
        text = tokens_to_text(t.symbol for t in group)
        if text:
            out.append(WordTime(text, group[0].start, group[-1].end, min(t.confidence for t in group)))
    return out


def word_times(token_times: Sequence[TokenTime], onset_shift: float = 0.0, floor: float = 0.0,
               join_gap: float = JOIN_GAP_S) -> list[WordTime]:
    """Words with their times estimated from the tokens' CTC spikes, where the spikes say least.

    A word's start comes from its first token's spike and its end from its last token's; each is off by the
    token's own lag around the model's mean (~100 ms on the demo model). Between two words spoken without a
    pause there is one boundary, estimated twice (the end of one, the start of the next): it is put at the
    middle of the two, which halves the error the two estimates do not share. A word after a pause (the
    first of a segment, or one whose estimated start lies ``join_gap`` or more after the previous end) starts
    ``onset_shift`` seconds earlier still: the model emits the first token after silence later than the others
    (a property of the model, measured with bench/asr_extras.py --calibrate). Times never go before ``floor``
    (the segment's start) nor before the previous word's end.
    """
    words = group_words(token_times)
    out: list[WordTime] = []
    for word in words:
        prev = out[-1] if out else None
        if prev is not None and word.start - prev.end < join_gap:
            boundary = min(max((prev.end + word.start) / 2, prev.start), word.end)
            out[-1] = WordTime(prev.word, prev.start, boundary, prev.confidence)
            out.append(WordTime(word.word, boundary, word.end, word.confidence))
        else:
            start = max(word.start - onset_shift, floor, prev.end if prev is not None else floor)
            out.append(WordTime(word.word, min(start, word.end), word.end, word.confidence))
    return out
