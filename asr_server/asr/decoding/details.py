"""The optional ``DETAILS`` output: one JSON object per request with what a transcript string cannot carry.

    {"text": str, "segment": int, "final": bool, "start": s, "end": s,
     "words": [{"word": str, "start": s, "end": s, "confidence": p}],
     "tokens": [{"token": str, "start": s, "end": s, "confidence": p}],
     "nbest": [{"text": str, "score": x}]}

Seconds count from the start of the audio (a stream's first sample). Fields a model cannot fill are left
out. Word and token times come from the CTC alignment of the chosen hypothesis (``alignment``).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from .alignment import align_tokens, word_times
from ..units import Tokenizer
from asr_server.truthy import truthy

DETAILS = "DETAILS"  # the optional output's name on every ASR model
DETAILS_PARAMETER = "details"  # request parameter: true -> words, tokens and n-best in DETAILS


def wants_details(parameters: Mapping[str, Any]) -> bool:
    """The request parameter ``details`` (bool, or a string such as "1"/"true")."""
    return truthy(parameters.get(DETAILS_PARAMETER, False))


def _r(x: float) -> float:
    return round(float(x), 3)


def hypothesis_details(tokenizer: Tokenizer, tokens: Sequence[int], log_probs: Optional[np.ndarray],
                       ids: Optional[np.ndarray], frame_seconds: float, offset_seconds: float = 0.0,
                       nbest: Sequence[tuple[Sequence[int], float]] = (),
                       shift: tuple[float, ...] = (0.0, 0.0),
                       full_log_probs: Optional[np.ndarray] = None) -> dict:
    """Words, tokens and n-best of one hypothesis decoded from ``log_probs``/``ids`` (T, K) top-k frames;
    ``full_log_probs`` (T, V), when known, align it instead (a hotword token may lie outside the top-k)."""
    out: dict[str, Any] = {"text": tokenizer.decode(tokens)}
    if log_probs is not None and full_log_probs is not None:
        log_probs = full_log_probs
        ids = np.broadcast_to(np.arange(full_log_probs.shape[1], dtype=np.int64), full_log_probs.shape)
    if log_probs is not None and ids is not None:
        # shift: the model's emission lags (start, end[, onset]) in seconds (alignment.word_times)
        times = align_tokens(log_probs, ids, tokens, tokenizer.symbols, frame_seconds, offset_seconds, shift[:2])
        onset = shift[2] if len(shift) > 2 else 0.0
        out["words"] = [{"word": w.word, "start": _r(w.start), "end": _r(w.end), "confidence": _r(w.confidence)}
                        for w in word_times(times, onset, floor=offset_seconds)]
        out["tokens"] = [{"token": t.symbol, "start": _r(t.start), "end": _r(t.end), "confidence": _r(t.confidence)}
                         for t in times]
    if nbest:
        out["nbest"] = [{"text": tokenizer.decode(t), "score": _r(s)} for t, s in nbest]
    return out


def to_json_bytes(details: Mapping[str, Any]) -> bytes:
    """A DETAILS dict as the compact UTF-8 JSON its output tensor carries."""
    return json.dumps(details, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
