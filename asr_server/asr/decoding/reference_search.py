"""The plain-Python CTC prefix beam search (a dict of tuple prefixes), for parity tests and the search benchmark.

It applies the recursion of ``ctc_search.CtcPrefixBeamSearch`` in the same order, so the compiled search and
this one agree bit for bit; it is slow (no kernels) and never serves.
"""

from __future__ import annotations

import heapq
import math
from typing import Sequence

import numpy as np

from .ctc_search import Hypothesis, SearchOptions
from .token_lm import TokenLm


def _log_add(args: Sequence[float]) -> float:
    m = max(args)
    if m == -math.inf:
        return -math.inf
    return m + math.log(sum(math.exp(a - m) for a in args))


def reference_prefix_beam_search(
    log_probs: np.ndarray | Sequence[Sequence[float]],
    ids: np.ndarray | Sequence[Sequence[int]] | None = None,
    options: SearchOptions | None = None,
    state: list | None = None,
) -> tuple[list[Hypothesis], list]:
    """Plain-Python CTC prefix beam search (dict of tuple prefixes), for parity and timing.

    log_probs: (T, K) with ``ids`` (T, K), or (T, V) with ``ids=None`` (top-k done here).
    state:     what a previous call returned, to resume; None starts fresh.
    With ``options.lm`` (a token n-gram) prefixes are ranked by CTC + weight * LM + bonus * length.
    Returns (n-best best first, state).
    """
    options = options or SearchOptions()
    lm: TokenLm | None = options.lm
    fused = lm is not None and not lm.empty

    def rank(prefix: tuple[int, ...], pb: float, pnb: float) -> float:
        score = _log_add([pb, pnb])
        if fused:
            score += lm.weight * lm.score_tokens(prefix)[0] + lm.bonus * len(prefix)
        return score

    k = options.tokens_per_frame
    blank = options.blank_id
    rows = log_probs.tolist() if isinstance(log_probs, np.ndarray) else [list(r) for r in log_probs]
    id_rows = None
    if ids is not None:
        id_rows = ids.tolist() if isinstance(ids, np.ndarray) else [list(r) for r in ids]
    # Each hyp: (prefix tuple, (log p ending in blank, log p ending in its last token)).
    hyps = state if state is not None else [((), (0.0, -math.inf))]
    for t, row in enumerate(rows):
        if id_rows is None:
            cand = heapq.nlargest(k, range(len(row)), key=row.__getitem__)
            frame = [(row[c], c) for c in cand]
        else:
            cols = sorted(range(len(row)), key=lambda c: -row[c])[:k]
            frame = [(row[c], id_rows[t][c]) for c in cols]
        if options.cutoff_prob < 1.0:
            mass, kept = 0.0, 0
            while kept < len(frame):
                mass += math.exp(frame[kept][0])
                kept += 1
                if mass >= options.cutoff_prob:
                    break
            frame = frame[:kept]
        merged: dict[tuple[int, ...], tuple[float, float]] = {}
        for ps, s in frame:
            for prefix, (pb, pnb) in hyps:
                last = prefix[-1] if prefix else None
                if s == blank:
                    n_pb, n_pnb = merged.get(prefix, (-math.inf, -math.inf))
                    merged[prefix] = (_log_add([n_pb, pb + ps, pnb + ps]), n_pnb)
                    continue
                if s == last:
                    n_pb, n_pnb = merged.get(prefix, (-math.inf, -math.inf))
                    merged[prefix] = (n_pb, _log_add([n_pnb, pnb + ps]))
                    grown = prefix + (s,)
                    n_pb, n_pnb = merged.get(grown, (-math.inf, -math.inf))
                    merged[grown] = (n_pb, _log_add([n_pnb, pb + ps]))
                else:
                    grown = prefix + (s,)
                    n_pb, n_pnb = merged.get(grown, (-math.inf, -math.inf))
                    merged[grown] = (n_pb, _log_add([n_pnb, pb + ps, pnb + ps]))
        if merged:
            ranked = sorted(merged.items(), key=lambda kv: rank(kv[0], *kv[1]), reverse=True)
            # Unlike WeNet's Python search, zero-probability prefixes are dropped (unless
            # nothing else is left): they would only take beam places from real ones.
            alive = [kv for kv in ranked if rank(kv[0], *kv[1]) > -math.inf]
            hyps = (alive or ranked)[: options.beam_size]
    nbest = [Hypothesis(prefix, _log_add([pb, pnb])) for prefix, (pb, pnb) in hyps]
    if fused:
        nbest = [Hypothesis(h.tokens, h.score + lm.fused(h.tokens, *lm.score_tokens(h.tokens))) for h in nbest]
        nbest.sort(key=lambda h: -h.score)
    return nbest, hyps
