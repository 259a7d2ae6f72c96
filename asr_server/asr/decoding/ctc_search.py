"""CTC search: batched greedy decoding and a resumable CTC prefix beam search.

Two strategies sit behind one small per-utterance interface, ``CtcSearch``:

- ``CtcGreedySearch``: best token per frame, repeats collapsed, blanks dropped.
- ``CtcPrefixBeamSearch``: WeNet-style prefix beam search, keeping for every prefix the
  log-probability of the paths that end in blank (``pb``) and in its last token (``pnb``).

Both accept a chunk of frames either as the streaming encoder emits it, top-k already
applied (``log_probs``/``log_probs_idx``: (T, K) values and token ids), or as full
(T, V) log-probabilities (top-k is then done here). Feeding frames chunk by chunk gives
exactly the result of feeding them at once: the state after a frame depends only on the
state before it and that frame.

Speed: the beam search runs in numba-compiled kernels (``_ctc_kernels``), with no Python
per frame, per token or per prefix, and with the GIL released. ``advance_streams`` decodes
many streams per call (one shared top-k over the batch, one kernel call per stream).
``reference_search.reference_prefix_beam_search`` is the plain-Python version kept for parity tests and the
benchmark; it applies the same recursion in the same order, so the two agree bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, Sequence, runtime_checkable

import numpy as np

from . import _ctc_kernels as _k
from . import token_lm
from .hotwords import EMPTY, ContextGraph
from .token_lm import TokenLm

# "numba" when the kernels are compiled, "python" when numba is missing (same results, slower).
IMPLEMENTATION = "numba" if _k.HAVE_NUMBA else "python"

GREEDY = "greedy"
PREFIX_BEAM = "prefix_beam"


@dataclass(frozen=True)
class SearchOptions:
    """How CTC posteriors are searched. Validated once, in ``__post_init__``."""

    # "prefix_beam" (CTC prefix beam search) or "greedy" (best path, collapsed).
    method: str = PREFIX_BEAM
    # Prefixes kept after every frame. 10 is WeNet's Triton default and the decoder.onnx
    # beam dimension, so the n-best feeds attention rescoring without re-padding.
    beam_size: int = 10
    # Tokens per frame that may extend a prefix; None = beam_size, which is what WeNet's
    # encoder export applies (topk(beam_size)) before the scorer ever sees the frame.
    top_k: int | None = None
    # Id of the CTC blank in the vocabulary (WeNet's units.txt puts <blank> at 0).
    blank_id: int = 0
    # Of each frame's top-k tokens (best first) keep the fewest whose probabilities sum
    # to >= cutoff_prob; 1.0 keeps all top-k. WeNet's Triton scorer uses 0.9999: on peaky
    # CTC posteriors most frames then try only one or two tokens.
    cutoff_prob: float = 1.0
    # A token n-gram (token_lm.TokenLm, with its weight and bonus) fused into the prefix beam search; None: none.
    lm: TokenLm | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        _verify_options(self)

    @property
    def tokens_per_frame(self) -> int:
        return self.beam_size if self.top_k is None else self.top_k


def _verify_options(options: SearchOptions) -> None:
    if options.method not in (GREEDY, PREFIX_BEAM):
        raise ValueError(f"method must be {GREEDY!r} or {PREFIX_BEAM!r}, got {options.method!r}")
    if not isinstance(options.beam_size, int) or options.beam_size < 1:
        raise ValueError(f"beam_size must be a positive int, got {options.beam_size!r}")
    if options.top_k is not None and (not isinstance(options.top_k, int) or options.top_k < 1):
        raise ValueError(f"top_k must be None or a positive int, got {options.top_k!r}")
    if not isinstance(options.blank_id, int) or options.blank_id < 0:
        raise ValueError(f"blank_id must be a non-negative int, got {options.blank_id!r}")
    if not 0.0 < options.cutoff_prob <= 1.0:
        raise ValueError(f"cutoff_prob must be in (0, 1], got {options.cutoff_prob!r}")
    if options.lm is not None and not isinstance(options.lm, TokenLm):
        raise ValueError(f"lm must be None or a token_lm.TokenLm, got {type(options.lm).__name__}")


class Hypothesis(NamedTuple):
    """One decoded prefix; unpacks as ``(tokens, score)``."""

    tokens: tuple[int, ...]  # token ids, blanks removed, repeats collapsed
    score: float  # CTC log-probability (natural log); greedy: log-prob of the best path


@runtime_checkable
class CtcSearch(Protocol):
    """Per-utterance, resumable CTC search state."""

    options: SearchOptions

    def advance(self, log_probs: np.ndarray, ids: np.ndarray | None = None) -> None:
        """Consume a chunk of frames.

        log_probs: (T, K) top-k log-probs with ``ids`` (T, K) their token ids, or
                   (T, V) full log-probs with ``ids=None``.
        """

    def nbest(self) -> list[Hypothesis]:
        """Hypotheses so far, best first."""

    def best(self) -> Hypothesis:
        """The best hypothesis so far."""

    def reset(self) -> None:
        """Forget everything: back to the state before the first frame."""


def make_search(options: SearchOptions | None = None, context: "ContextGraph | None" = None) -> CtcSearch:
    """A fresh per-utterance search for ``options.method``; ``context``: hotwords (prefix beam search only, as
    is ``options.lm``: greedy search has no beam to bias)."""
    options = options or SearchOptions()
    if options.method == GREEDY:
        return CtcGreedySearch(options)
    return CtcPrefixBeamSearch(options, context)


# --------------------------------------------------------------------------- input checks


def _frames(log_probs: np.ndarray, ids: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    log_probs = np.asarray(log_probs)
    if log_probs.ndim != 2:
        raise ValueError(f"log_probs must be (T, K) or (T, V), got shape {log_probs.shape}")
    if ids is not None:
        ids = np.asarray(ids)
        if ids.shape != log_probs.shape:
            raise ValueError(f"ids shape {ids.shape} != log_probs shape {log_probs.shape}")
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"ids must be integers, got {ids.dtype}")
    return log_probs, ids


def topk_log_probs(log_probs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of the last axis, best first (ties: lower id first).

    log_probs: (..., V) -> values (..., k) float64, ids (..., k) int64.
    """
    log_probs = np.asarray(log_probs)
    vocab = log_probs.shape[-1]
    k = min(k, vocab)
    rows = np.ascontiguousarray(log_probs.reshape(-1, vocab))
    if rows.dtype not in (np.float32, np.float64):
        rows = rows.astype(np.float64)
    vals = np.empty((rows.shape[0], k), np.float64)
    ids = np.empty((rows.shape[0], k), np.int64)
    if k > 0 and rows.shape[0] > 0:
        _k.topk_rows(rows, k, vals, ids)
    lead = log_probs.shape[:-1]
    return vals.reshape(*lead, k), ids.reshape(*lead, k)


# --------------------------------------------------------------------------- greedy


def greedy_emissions(best: np.ndarray, blank_id: int = 0) -> np.ndarray:
    """(B, T) best token per frame -> (B, T) bool, the frames where the collapsed best path emits a token:
    not blank and different from the frame before (a blank in between makes a repeat count again)."""
    prev = np.concatenate([np.full((best.shape[0], 1), -1, best.dtype), best[:, :-1]], axis=1)
    return (best != blank_id) & (best != prev)


def ctc_greedy(
    log_probs: np.ndarray,
    lengths: np.ndarray | Sequence[int] | None = None,
    *,
    ids: np.ndarray | None = None,
    blank_id: int = 0,
) -> list[tuple[int, ...]]:
    """Batched best-path decoding, fully vectorised.

    log_probs: (B, T, V) log-probs, or (B, T, K) top-k values with ``ids`` (B, T, K).
    lengths:   (B,) valid frames per row (default: all T).
    Returns one token tuple per row.
    """
    log_probs = np.asarray(log_probs)
    if log_probs.ndim != 3:
        raise ValueError(f"log_probs must be (B, T, V), got shape {log_probs.shape}")
    batch, frames = log_probs.shape[:2]
    best = np.argmax(log_probs, axis=-1)  # (B, T)
    if ids is not None:
        best = np.take_along_axis(np.asarray(ids), best[..., None], axis=-1)[..., 0]
    lengths = np.full(batch, frames) if lengths is None else np.asarray(lengths).reshape(batch)
    valid = np.arange(frames)[None, :] < lengths[:, None]
    emit = valid & greedy_emissions(best, blank_id)
    rows, cols = np.nonzero(emit)
    tokens = best[rows, cols].tolist()
    bounds = np.searchsorted(rows, np.arange(batch + 1)).tolist()
    return [tuple(tokens[bounds[b] : bounds[b + 1]]) for b in range(batch)]


class CtcGreedySearch:
    """Resumable greedy search: the collapsed best path and its log-probability."""

    def __init__(self, options: SearchOptions | None = None) -> None:
        self.options = options or SearchOptions(method=GREEDY)
        self.reset()

    def reset(self) -> None:
        self._tokens: list[int] = []
        self._last = -1  # best token of the previous frame (-1 before the first)
        self._score = 0.0

    def advance(self, log_probs: np.ndarray, ids: np.ndarray | None = None) -> None:
        log_probs, ids = _frames(log_probs, ids)
        if log_probs.shape[0] == 0:
            return
        col = np.argmax(log_probs, axis=-1)
        rows = np.arange(log_probs.shape[0])
        best = col if ids is None else ids[rows, col]
        self._score += float(np.sum(log_probs[rows, col], dtype=np.float64))
        prev = np.concatenate([[self._last], best[:-1]])
        emit = (best != self.options.blank_id) & (best != prev)
        self._tokens.extend(best[emit].tolist())
        self._last = int(best[-1])

    def nbest(self) -> list[Hypothesis]:
        return [self.best()]

    def best(self) -> Hypothesis:
        return Hypothesis(tuple(self._tokens), self._score)


# --------------------------------------------------------------------------- prefix beam

_NO_FULL = np.zeros((0, 0), np.float64)  # "only the top-k is known"


class CtcPrefixBeamSearch:
    """Resumable CTC prefix beam search for one utterance (compiled kernel).

    State (all numpy, double-buffered so a frame never reads what it writes):
    tokens (2, beam, cap) int32, lens/hashes/parent_hashes (2, beam) int64,
    pb/pnb (2, beam) float64; ``_parity`` selects the current half.
    """

    _INITIAL_CAPACITY = 64  # tokens per prefix; grows by doubling

    def __init__(self, options: SearchOptions | None = None, context: ContextGraph | None = None) -> None:
        self.options = options or SearchOptions()
        self.context = EMPTY if context is None else context  # hotwords (hotwords.ContextGraph)
        self.lm = token_lm.EMPTY if self.options.lm is None else self.options.lm  # shallow fusion
        self._kernel = _k.prefix_beam_advance  # its .py_func in the test that runs the kernel interpreted
        if self.options.method != PREFIX_BEAM:
            raise ValueError(f"CtcPrefixBeamSearch needs method={PREFIX_BEAM!r}")
        self.reset()

    def reset(self) -> None:
        beam = self.options.beam_size
        self._tokens = np.zeros((2, beam, self._INITIAL_CAPACITY), np.int32)
        self._lens = np.zeros((2, beam), np.int64)
        self._hashes = np.zeros((2, beam), np.int64)
        self._parent_hashes = np.zeros((2, beam), np.int64)
        self._pb = np.full((2, beam), -np.inf)
        self._pnb = np.full((2, beam), -np.inf)
        self._pb[0, 0] = 0.0  # the empty prefix, reached by "no frames yet" with certainty
        self._ctx_node = np.zeros((2, beam), np.int64)  # each prefix's state in the hotword tree
        self._ctx_locked = np.zeros((2, beam), np.float64)  # bonus of the hotwords it completed
        self._lm_state = np.full((2, beam), self.lm.start, np.int64)  # each prefix's state in the LM
        self._lm_score = np.zeros((2, beam), np.float64)  # its summed LM log-probability
        self._n_live = 1
        self._parity = 0
        self.frames = 0  # frames consumed so far

    def advance(self, log_probs: np.ndarray, ids: np.ndarray | None = None,
                full_log_probs: np.ndarray | None = None) -> None:
        """full_log_probs: (T, V) log-probs of every token, when the caller has them beside the top-k (the
        offline encoder's ``ctc_log_probs``): hotword tokens outside a frame's top-k are then tried too."""
        log_probs, ids = _frames(log_probs, ids)
        if ids is None:
            full_log_probs = log_probs if full_log_probs is None else full_log_probs
            log_probs, ids = topk_log_probs(log_probs, self.options.tokens_per_frame)
        self._advance_topk(log_probs, ids, full_log_probs)

    def _advance_topk(self, log_probs: np.ndarray, ids: np.ndarray, full_log_probs: np.ndarray | None = None) -> None:
        """log_probs, ids: (T, K) candidate tokens of each frame; full_log_probs: (T, V) or None."""
        frames = log_probs.shape[0]
        if frames == 0:
            return
        if full_log_probs is None or self.context.empty:
            full = _NO_FULL  # nothing to expand: the kernel never reads it
        else:
            full = np.ascontiguousarray(full_log_probs, dtype=np.float64)
            if full.ndim != 2 or full.shape[0] != frames:
                raise ValueError(f"full_log_probs must be ({frames}, V), got shape {full.shape}")
        self._reserve(frames)
        lm = self.lm
        self._n_live, self._parity = self._kernel(
            np.ascontiguousarray(log_probs, dtype=np.float64),
            np.ascontiguousarray(ids, dtype=np.int64),
            frames,
            self.options.tokens_per_frame,
            self.options.blank_id,
            float(self.options.cutoff_prob),
            self._tokens,
            self._lens,
            self._hashes,
            self._parent_hashes,
            self._pb,
            self._pnb,
            self._n_live,
            self._parity,
            self._ctx_node,
            self._ctx_locked,
            self.context.child_start,
            self.context.child_token,
            self.context.child_node,
            self.context.fail,
            self.context.node_score,
            self.context.is_end,
            full,
            lm.arc_start,
            lm.arc_token,
            lm.arc_next,
            lm.arc_logp,
            lm.backoff,
            lm.backoff_logw,
            float(lm.unk_logp),
            float(lm.weight),
            float(lm.bonus),
            self._lm_state,
            self._lm_score,
        )
        self.frames += frames

    def _reserve(self, frames: int) -> None:
        # A prefix grows by at most one token per frame.
        need = int(self._lens[self._parity, : self._n_live].max()) + frames
        cap = self._tokens.shape[2]
        if need > cap:
            grown = np.zeros((2, self._tokens.shape[1], max(need, 2 * cap)), np.int32)
            grown[:, :, :cap] = self._tokens
            self._tokens = grown

    def nbest(self) -> list[Hypothesis]:
        """Best first. With hotwords a score includes the bonus of the phrases a hypothesis completed (not of
        a phrase it is part-way through), with an LM its fusion term (end of sentence included), and the list
        is re-ranked by it."""
        p = self._parity
        out = []
        for r in range(self._n_live):
            length = int(self._lens[p, r])
            tokens = tuple(self._tokens[p, r, :length].tolist())
            score = _k._log_add2(float(self._pb[p, r]), float(self._pnb[p, r]))
            if not self.context.empty:
                score += float(self._ctx_locked[p, r])
            if not self.lm.empty:
                score += self.lm.fused(tokens, float(self._lm_score[p, r]), int(self._lm_state[p, r]))
            out.append(Hypothesis(tokens, score))
        if not (self.context.empty and self.lm.empty):
            out.sort(key=lambda h: -h.score)  # stable: equal scores keep the beam's order
        return out

    def best(self) -> Hypothesis:
        return self.nbest()[0]


def advance_streams(
    streams: Sequence[CtcSearch],
    log_probs: np.ndarray,
    ids: np.ndarray | None = None,
    lengths: np.ndarray | Sequence[int] | None = None,
) -> None:
    """Advance many streams by one batched chunk (what the server gets per model call).

    log_probs: (B, T, K) top-k values with ``ids`` (B, T, K), or (B, T, V) full log-probs.
    lengths:   (B,) valid frames of each row (default T); padding frames are ignored.
    Rows map to ``streams`` in order. With full log-probs the top-k of the whole batch is
    taken in one kernel call, then each beam stream runs its compiled kernel.
    """
    log_probs = np.asarray(log_probs)
    if log_probs.ndim != 3 or log_probs.shape[0] != len(streams):
        raise ValueError(
            f"log_probs must be (B={len(streams)}, T, K|V), got shape {log_probs.shape}"
        )
    batch, frames = log_probs.shape[:2]
    lengths = np.full(batch, frames) if lengths is None else np.asarray(lengths).reshape(batch)
    if np.any(lengths < 0) or np.any(lengths > frames):
        raise ValueError(f"lengths must be in [0, {frames}], got {lengths.tolist()}")
    if ids is None and any(isinstance(s, CtcPrefixBeamSearch) for s in streams):
        k = max(s.options.tokens_per_frame for s in streams if isinstance(s, CtcPrefixBeamSearch))
        top_vals, top_ids = topk_log_probs(log_probs, k)
    else:
        top_vals, top_ids = log_probs, ids
    for b, stream in enumerate(streams):
        n = int(lengths[b])
        if isinstance(stream, CtcPrefixBeamSearch):
            stream._advance_topk(top_vals[b, :n], top_ids[b, :n], log_probs[b, :n] if ids is None else None)
        else:
            stream.advance(log_probs[b, :n], None if ids is None else ids[b, :n])


def warm_up(options: SearchOptions | None = None, vocab: int = 8) -> None:
    """Compile the search kernels now (with and without hotwords, top-k and full log-probs), at model load: on a
    cold cache the first compile takes seconds, which a first request would otherwise wait for (and streams
    whose other state ages meanwhile would lose it)."""
    from .hotwords import build_graph

    options = options or SearchOptions()
    rng = np.random.default_rng(0)
    full = np.log(rng.dirichlet(np.ones(vocab), size=6)).astype(np.float32)
    values, ids = topk_log_probs(full, min(options.tokens_per_frame, vocab))
    for context in (None, build_graph([([1, 2], 1.0)])):
        for with_full in (False, True):
            search = make_search(options, context)
            if with_full and isinstance(search, CtcPrefixBeamSearch):
                search.advance(values, ids, full)
            else:
                search.advance(values, ids)
            search.nbest()
    token_lm.EMPTY.step(0, 1)  # the LM's step, called from Python by nbest() when an LM is loaded
