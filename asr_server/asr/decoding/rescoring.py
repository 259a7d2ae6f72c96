"""Attention rescoring of CTC n-best lists, as pure functions over numpy arrays.

The U2/U2++ recipe: CTC prefix beam search proposes ``beam`` hypotheses per utterance,
the attention decoder scores each left to right (and, when bidirectional, right to left),
and the final pick maximises

    score = (1 - reverse_weight) * l2r + reverse_weight * r2l + ctc_weight * ctc_score

where l2r / r2l are the decoder log-probabilities of the hypothesis tokens followed by
<eos>. This module builds the decoder inputs with the layout WeNet's exported
``decoder.onnx`` takes, turns decoder log-prob outputs into per-hypothesis scores, and
combines the scores. It runs no model itself.

Decoder input layout (what WeNet's Triton scorers feed decoder.onnx):
    hyps_pad_sos_eos   (B, beam, L+2) int64  row = [sos, y_1..y_n, eos, pad...]
    hyps_lens_sos      (B, beam)      int32  n + 1 (the tokens after sos that are scored,
                                             eos included)
    r_hyps_pad_sos_eos (B, beam, L+2) int64  row = [sos, y_n..y_1, eos, pad...]
    ctc_score          (B, beam)      float
with L the longest hypothesis of the batch and pad = eos (WeNet fills with eos; the
decoder masks every position >= hyps_lens_sos, so the value only has to be a valid id).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

# CTC score given to the rows that pad an n-best list up to the beam. Finite, like WeNet's
# streaming scorer, so that ctc_weight * score never makes 0 * -inf = nan inside a decoder
# graph that argmaxes over the beam; low enough that a padding row never wins with ctc_weight > 0.
PAD_CTC_SCORE = -10000.0


@dataclass(frozen=True)
class RescoringOptions:
    """Weights of the final score. Validated once, in ``__post_init__``."""

    # Weight of the CTC prefix score next to the decoder score. 0.5 is the WeNet runtime
    # default; a model's train.yaml (model_conf.ctc_weight) usually overrides it.
    ctc_weight: float = 0.5
    # Share of the right-to-left decoder in the decoder score; 0 for unidirectional
    # decoders (U2), typically 0.3 for U2++ (model_conf.reverse_weight).
    reverse_weight: float = 0.0

    def __post_init__(self) -> None:
        _verify_options(self)


def _verify_options(options: RescoringOptions) -> None:
    if not np.isfinite(options.ctc_weight) or options.ctc_weight < 0:
        raise ValueError(f"ctc_weight must be finite and >= 0, got {options.ctc_weight!r}")
    if not 0.0 <= options.reverse_weight <= 1.0:
        raise ValueError(f"reverse_weight must be in [0, 1], got {options.reverse_weight!r}")


@dataclass(frozen=True)
class DecoderInputs:
    """Padded decoder inputs for a batch of n-best lists (names as in WeNet's decoder.onnx)."""

    hyps_pad_sos_eos: np.ndarray  # (B, beam, L+2) [sos] + hyp + [eos], padded
    hyps_lens_sos: np.ndarray  # (B, beam) int32, len(hyp) + 1
    r_hyps_pad_sos_eos: np.ndarray | None  # (B, beam, L+2) [sos] + reversed hyp + [eos]; None if not bidirectional
    ctc_score: np.ndarray  # (B, beam) CTC log-prob of each hyp; PAD_CTC_SCORE for padding rows
    num_hyps: np.ndarray  # (B,) int64, real hypotheses per utterance; rows >= num_hyps are padding

    @property
    def valid(self) -> np.ndarray:
        """(B, beam) bool, True where a row holds a real hypothesis."""
        beam = self.hyps_lens_sos.shape[1]
        return np.arange(beam)[None, :] < self.num_hyps[:, None]

    def feeds(self) -> dict[str, np.ndarray]:
        """Hypothesis inputs by decoder input name (add encoder_out / encoder_out_lens)."""
        out = {"hyps_pad_sos_eos": self.hyps_pad_sos_eos, "hyps_lens_sos": self.hyps_lens_sos}
        if self.r_hyps_pad_sos_eos is not None:
            out["r_hyps_pad_sos_eos"] = self.r_hyps_pad_sos_eos
        out["ctc_score"] = self.ctc_score
        return out


class Rescored(NamedTuple):
    """The chosen hypothesis of one utterance."""

    tokens: tuple[int, ...]
    score: float  # combined score (decoder and CTC log-probs, weighted)
    index: int  # its row in the n-best list


def build_decoder_inputs(
    nbests: Sequence[Sequence[tuple[Sequence[int], float]]],
    beam_size: int,
    sos: int,
    eos: int,
    *,
    bidirectional: bool = True,
    pad_id: int | None = None,
    pad_score: float = PAD_CTC_SCORE,
    ids_dtype: np.dtype = np.int64,
    score_dtype: np.dtype = np.float32,
) -> DecoderInputs:
    """Pad per-utterance n-best lists ((tokens, ctc_score) pairs, best first) to the beam.

    pad_id:    value after eos (default eos, as WeNet's runtime does; any id is masked).
    ids_dtype: int64 for decoder.onnx; int32 for TensorRT engines built with int32 ids.
    score_dtype: match the decoder's ctc_score input (float32, or float16 for fp16 models).
    Utterances with fewer than ``beam_size`` hypotheses get empty-hypothesis rows scored
    ``pad_score`` (rows = [sos, eos, pad...], length 1).
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    pad = eos if pad_id is None else pad_id
    batch = len(nbests)
    hyps = [[tuple(int(t) for t in tokens) for tokens, _ in nbest] for nbest in nbests]
    for b, rows in enumerate(hyps):
        if len(rows) > beam_size:
            raise ValueError(f"utterance {b} has {len(rows)} hypotheses > beam_size {beam_size}")
    longest = max((len(h) for rows in hyps for h in rows), default=0)
    width = longest + 2
    fwd = np.full((batch, beam_size, width), pad, dtype=ids_dtype)
    fwd[:, :, 0] = sos
    fwd[:, :, 1] = eos  # padding rows: the empty hypothesis
    rev = fwd.copy() if bidirectional else None
    lens = np.ones((batch, beam_size), dtype=np.int32)
    scores = np.full((batch, beam_size), pad_score, dtype=np.float64)
    num = np.zeros(batch, dtype=np.int64)
    for b, nbest in enumerate(nbests):
        num[b] = len(nbest)
        for j, (tokens, score) in enumerate(nbest):
            h = hyps[b][j]
            n = len(h)
            fwd[b, j, 1 : n + 1] = h
            fwd[b, j, n + 1] = eos
            if rev is not None:
                rev[b, j, 1 : n + 1] = h[::-1]
                rev[b, j, n + 1] = eos
            lens[b, j] = n + 1
            scores[b, j] = score
    return DecoderInputs(fwd, lens, rev, scores.astype(score_dtype), num)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64, copy=False)
    m = np.max(x, axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def decoder_scores_from_log_probs(
    log_probs: np.ndarray,
    hyps_pad_sos_eos: np.ndarray,
    hyps_lens_sos: np.ndarray,
    *,
    normalize: bool = False,
) -> np.ndarray:
    """Per-hypothesis decoder score: sum of the log-probs of its tokens plus eos.

    log_probs:        (B*beam, L+1, V) or (B, beam, L+1, V): decoder output at every
                      position after sos (log-softmax applied, or logits with normalize=True).
    hyps_pad_sos_eos: (B, beam, L+2) the decoder's input rows (use r_hyps_pad_sos_eos with
                      the right-to-left output).
    hyps_lens_sos:    (B, beam) scored positions per row (len(hyp) + 1).
    Returns (B, beam) float64.
    """
    hyps = np.asarray(hyps_pad_sos_eos)
    lens = np.asarray(hyps_lens_sos)
    batch, beam, width = hyps.shape
    log_probs = np.asarray(log_probs)
    if log_probs.ndim == 3:
        log_probs = log_probs.reshape(batch, beam, *log_probs.shape[1:])
    if log_probs.shape[:3] != (batch, beam, width - 1):
        raise ValueError(
            f"decoder output {log_probs.shape} does not fit hyps {hyps.shape}: "
            f"expected (B*beam or B, beam, {width - 1}, V)"
        )
    if normalize:
        log_probs = _log_softmax(log_probs)
    targets = hyps[:, :, 1:]  # the token each position predicts: y_1..y_n, eos, pad
    mask = np.arange(width - 1)[None, None, :] < lens[:, :, None]
    # Masked positions may hold an ignore id (-1); gather a harmless 0 there instead.
    safe = np.where(mask, targets, 0).astype(np.int64)
    picked = np.take_along_axis(log_probs, safe[..., None], axis=-1)[..., 0]
    return np.sum(np.where(mask, picked.astype(np.float64), 0.0), axis=-1)


def combine_scores(
    ctc_score: np.ndarray,
    decoder_score: np.ndarray,
    r_decoder_score: np.ndarray | None = None,
    options: RescoringOptions | None = None,
) -> np.ndarray:
    """(B, beam) final scores: decoder*(1-rw) + r_decoder*rw + ctc_weight*ctc (float64)."""
    options = options or RescoringOptions()
    score = np.asarray(decoder_score, dtype=np.float64)
    if options.reverse_weight > 0.0:
        if r_decoder_score is None:
            raise ValueError("reverse_weight > 0 needs the right-to-left decoder scores")
        rw = options.reverse_weight
        score = score * (1.0 - rw) + np.asarray(r_decoder_score, dtype=np.float64) * rw
    return score + options.ctc_weight * np.asarray(ctc_score, dtype=np.float64)


def attention_rescoring(
    nbests: Sequence[Sequence[tuple[Sequence[int], float]]],
    decoder_score: np.ndarray,
    r_decoder_score: np.ndarray | None = None,
    options: RescoringOptions | None = None,
) -> list[Rescored]:
    """Pick the best hypothesis of every utterance.

    nbests:          B lists of (tokens, ctc_score), best first, at most beam each.
    decoder_score:   (B, beam) left-to-right decoder log-probs (tokens + eos), rows past
                     an utterance's list are padding and ignored.
    r_decoder_score: (B, beam) right-to-left ones; needed when reverse_weight > 0.
    """
    decoder_score = np.asarray(decoder_score, dtype=np.float64)
    batch, beam = decoder_score.shape
    if len(nbests) != batch:
        raise ValueError(f"{len(nbests)} n-best lists for decoder scores of batch {batch}")
    ctc = np.full((batch, beam), -np.inf)
    for b, nbest in enumerate(nbests):
        if len(nbest) > beam:
            raise ValueError(f"utterance {b} has {len(nbest)} hypotheses > beam {beam}")
        for j, (_, score) in enumerate(nbest):
            ctc[b, j] = score
    total = combine_scores(ctc, decoder_score, r_decoder_score, options)
    counts = np.array([len(n) for n in nbests], dtype=np.int64)
    total = np.where(np.arange(beam)[None, :] < counts[:, None], total, -np.inf)
    out = []
    for b, nbest in enumerate(nbests):
        if not nbest:
            out.append(Rescored((), -np.inf, -1))
            continue
        # The first maximum wins, so equal scores keep the CTC order.
        j = int(np.argmax(total[b]))
        out.append(Rescored(tuple(int(t) for t in nbest[j][0]), float(total[b, j]), j))
    return out


def hyps_from_best_index(
    nbests: Sequence[Sequence[tuple[Sequence[int], float]]],
    best_index: np.ndarray,
) -> list[tuple[int, ...]]:
    """Map a decoder graph's ``best_index`` (B,) back to token tuples.

    A padding row can win inside decoder.onnx when ctc_weight is 0 (its decoder score is
    just log p(eos | sos)); such a pick falls back to the CTC best hypothesis.
    """
    best_index = np.asarray(best_index).reshape(-1)
    if best_index.shape[0] != len(nbests):
        raise ValueError(f"{best_index.shape[0]} indices for {len(nbests)} n-best lists")
    out = []
    for nbest, j in zip(nbests, best_index.tolist()):
        if not nbest:
            out.append(())
            continue
        j = j if 0 <= j < len(nbest) else 0
        out.append(tuple(int(t) for t in nbest[j][0]))
    return out
