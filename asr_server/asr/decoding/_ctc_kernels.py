"""Compiled inner loops of the CTC searches (numba, nopython, GIL released).

Kept apart from ``ctc_search.py`` so that the public module stays readable and the
kernels can be reasoned about alone. Every kernel takes and returns plain numpy
arrays, so callers never see numba types.

Without numba the same functions run as interpreted Python: results are identical,
only slower. ``HAVE_NUMBA`` tells which one is live.

Prefix identity without a trie or a dict: each live prefix carries a polynomial hash
(mod a Mersenne prime, so products stay inside int64 and the interpreted fallback never
overflows) plus the hash of its parent. Two prefixes are only declared equal after their
tokens compare equal, so a hash collision costs time, never correctness.

One module of about 490 lines on purpose: the kernels share the small compiled helpers and the hashing
scheme above, and the one numba-or-Python switch; split, each part would need all three.
"""

from __future__ import annotations

import math

import numpy as np

try:  # numba is the fast path; its absence is a speed problem, not a correctness one.
    from numba import njit as _njit

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - exercised only where numba is missing
    HAVE_NUMBA = False

    def _njit(*_args, **_kwargs):
        def wrap(fn):
            return fn

        return wrap


def _jit(fn):
    # cache=True: compiled code is reused across processes (a Triton python backend
    # starts one process per instance; recompiling costs about a second each).
    # nogil=True: the server may decode streams from several model instance threads at once.
    return _njit(cache=True, nogil=True)(fn)


_HASH_MOD = 2147483647  # 2**31 - 1: h * _HASH_MUL + token fits in int64
_HASH_MUL = 1000003
NEG_INF = -math.inf


@_jit
def _exp_shifted(a, m):
    # exp(a - m), skipping the call where the answer is exact anyway: the maximum itself
    # gives exp(0) = 1 and a -inf term gives 0. Bit-identical to always calling exp.
    if a == m:
        return 1.0
    if a == NEG_INF:
        return 0.0
    return math.exp(a - m)


@_jit
def _log_shifted(m, total):
    # m + log(total) with log(1) = 0 taken for free (one live term: the common case).
    if total == 1.0:
        return m
    return m + math.log(total)


@_jit
def _log_add2(a, b):
    # Same formula and summation order as the reference's log_add([a, b]), so the
    # fast and plain implementations agree to the last bit.
    m = a if a > b else b
    if m == NEG_INF:
        return NEG_INF
    return _log_shifted(m, _exp_shifted(a, m) + _exp_shifted(b, m))


@_jit
def _log_add3(a, b, c):
    m = a if a > b else b
    m = m if m > c else c
    if m == NEG_INF:
        return NEG_INF
    return _log_shifted(m, _exp_shifted(a, m) + _exp_shifted(b, m) + _exp_shifted(c, m))


@_jit
def topk_rows(x, k, out_vals, out_ids):
    """Top-k of every row, sorted by value descending, ties to the lower index.

    x: (N, V) float; k <= V; out_vals: (N, k) float64; out_ids: (N, k) int64.
    One pass per row with a small insertion buffer: on typical posteriors almost every
    element fails the single compare against the current k-th value, so this is about V
    compares per row instead of a partition plus a sort.
    """
    n_rows = x.shape[0]
    n_cols = x.shape[1]
    for r in range(n_rows):
        filled = 0
        for v_id in range(n_cols):
            v = np.float64(x[r, v_id])
            if filled == k and not v > out_vals[r, k - 1]:
                continue
            # Insert after every value >= v, which keeps ties in index order.
            pos = filled if filled < k else k - 1
            while pos > 0 and v > out_vals[r, pos - 1]:
                pos -= 1
            last = filled if filled < k else k - 1
            j = last
            while j > pos:
                out_vals[r, j] = out_vals[r, j - 1]
                out_ids[r, j] = out_ids[r, j - 1]
                j -= 1
            out_vals[r, pos] = v
            out_ids[r, pos] = v_id
            if filled < k:
                filled += 1


@_jit
def _same_prefix(tokens, a, b, length):
    # Compare from the end: live prefixes usually share their beginning.
    for p in range(length - 1, -1, -1):
        if tokens[a, p] != tokens[b, p]:
            return False
    return True


@_jit
def context_step(node, token, child_start, child_token, child_node, fail):
    """The hotword prefix tree's state after ``token`` from ``node`` (Aho-Corasick: follow failure links
    until a child matches; the root (0) when none does)."""
    while True:
        for e in range(child_start[node], child_start[node + 1]):
            if child_token[e] == token:
                return child_node[e]
        if node == 0:
            return 0
        node = fail[node]


@_jit
def lm_step(state, token, arc_start, arc_token, arc_next, arc_logp, backoff, backoff_logw, unk_logp):
    """A back-off n-gram's (log p(token | state), next state): the arc of the state's history if it has one,
    else its back-off weight plus the same question for its back-off state; ``unk_logp`` at the empty history
    (state 0) when no state lists the token. Arcs are sorted by token within a state (binary search)."""
    acc = 0.0
    s = state
    while True:
        lo = arc_start[s]
        hi = arc_start[s + 1]
        end = hi
        while lo < hi:
            mid = (lo + hi) // 2
            if arc_token[mid] < token:
                lo = mid + 1
            else:
                hi = mid
        if lo < end and arc_token[lo] == token:
            return acc + arc_logp[lo], np.int64(arc_next[lo])
        if backoff[s] < 0:
            return acc + unk_logp, np.int64(0)
        acc += backoff_logw[s]
        s = backoff[s]


@_jit
def prefix_beam_advance(
    log_probs,
    ids,
    n_frames,
    top_k,
    blank_id,
    cutoff_prob,
    tokens,
    lens,
    hashes,
    parent_hashes,
    pb,
    pnb,
    n_live,
    parity,
    ctx_node,
    ctx_locked,
    child_start,
    child_token,
    child_node,
    fail,
    node_score,
    is_end,
    full_log_probs,
    lm_start,
    lm_token,
    lm_next,
    lm_logp,
    lm_backoff,
    lm_backoff_logw,
    lm_unk_logp,
    lm_weight,
    lm_bonus,
    lm_state,
    lm_score,
):
    """Advance a CTC prefix beam by ``n_frames`` frames; returns (n_live, parity).

    log_probs: (T, K) float64 log-probabilities of the candidate tokens of each frame.
    ids:       (T, K) int64 their token ids, unique within a frame.
    tokens:    (2, beam, cap) int32 prefixes, double-buffered; cap >= max len + n_frames.
    lens, hashes, parent_hashes: (2, beam) int64; pb, pnb: (2, beam) float64 log-probs of
               the prefix ending in blank / in its last token. Slot [parity] is current.

    Per frame, per candidate token (best first), per live prefix (best first), the
    blank / repeat / new-token cases of the CTC prefix recursion are applied; the merged
    prefixes are ranked by log_add(pb, pnb) with ties kept in first-touch order, which is
    exactly what a dict-based reference with a stable sort does.

    Contextual biasing (hotwords): ctx_node (2, beam) int64 is each prefix's state in the hotword prefix tree
    (child_start (N+1,), child_token / child_node (E,) its edges in CSR form, fail (N,) failure links,
    node_score (N,) the bonus of the matched part, is_end (N,) a phrase ends there), ctx_locked (2, beam)
    float64 the bonus of the phrases it completed. Prefixes are ranked by log_add(pb, pnb) + locked +
    node_score[node]: a partial match is boosted while it lasts and loses its bonus when it breaks off. With a
    tree of only a root every bonus is 0.0, so the ranking is exactly the unbiased one.

    full_log_probs: (T, V) float64 log-probabilities of every token, or (0, 0) when only the top-k is known.
    With them and hotwords, each live prefix also tries, whatever their rank, the tokens that continue its
    match in the tree or start a phrase (the children of its node and of the nodes on its failure chain, down
    to the root) that are not among the frame's candidates: a rare word the encoder never ranks in its top-k
    can then be found, with the bonus, as contextual biasing does (icefall's and sherpa-onnx's searches score
    the whole vocabulary). Without hotwords the search is the same as without ``full_log_probs``.

    Shallow fusion with a token n-gram LM (``token_lm.TokenLm``: lm_start .. lm_unk_logp its arrays, walked by
    ``lm_step``): lm_state (2, beam) int64 is each prefix's LM state, lm_score (2, beam) float64 its summed LM
    log-probability; prefixes are then also ranked by lm_weight * lm_score + lm_bonus * length. An LM without
    arcs (lm_start[-1] == 0) leaves the ranking exactly as without one.
    """
    beam = tokens.shape[1]
    k_max = min(top_k, log_probs.shape[1])
    biased = child_start[1] > 0  # the root has children: some hotword is loaded
    fused = lm_start[lm_start.shape[0] - 1] > 0  # an LM with arcs is loaded
    expand = biased and full_log_probs.shape[0] > 0
    n_edges = child_token.shape[0]
    # per prefix: the frame's candidates, the hotword tokens it may take next (at most one per edge), a stay
    n_slots = beam * (k_max + (min(n_edges, full_log_probs.shape[1]) if expand else 0) + 1)
    slot_src = np.empty(n_slots, np.int64)  # live prefix the candidate grows from
    slot_tok = np.empty(n_slots, np.int64)  # appended token, -1 = same prefix
    slot_pb = np.empty(n_slots, np.float64)
    slot_pnb = np.empty(n_slots, np.float64)
    slot_score = np.empty(n_slots, np.float64)
    slot_node = np.empty(n_slots, np.int64)
    slot_locked = np.empty(n_slots, np.float64)
    slot_taken = np.empty(n_slots, np.bool_)
    slot_lm_state = np.empty(n_slots, np.int64)
    slot_lm_score = np.empty(n_slots, np.float64)
    stay_slot = np.empty(beam, np.int64)  # slot holding live prefix j unchanged
    parent = np.empty(beam, np.int64)  # live prefix equal to prefix j minus its last token
    order = np.empty(k_max, np.int64)
    chosen = np.empty(beam, np.int64)
    vocab = full_log_probs.shape[1]
    n_extra_max = min(n_edges, vocab) if expand else 0
    extra_tok = np.empty(n_extra_max, np.int64)  # this frame's hotword tokens outside its candidates
    extra_for = np.zeros((n_extra_max, beam), np.bool_)  # which live prefixes each of them may extend
    extra_at = np.full(vocab if expand else 0, -1, np.int64)  # token -> its index in extra_tok this frame
    candidate_at = np.full(vocab if expand else 0, -1, np.int64)  # token -> last frame it was a candidate

    for t in range(n_frames):
        cur = parity
        nxt = 1 - parity

        # Candidate tokens best first (stable), then the cumulative-probability cutoff.
        n_tok = 0
        for c in range(log_probs.shape[1]):
            v = log_probs[t, c]
            if n_tok == k_max and not v > log_probs[t, order[k_max - 1]]:
                continue
            pos = n_tok if n_tok < k_max else k_max - 1
            while pos > 0 and v > log_probs[t, order[pos - 1]]:
                pos -= 1
            j = n_tok if n_tok < k_max else k_max - 1
            while j > pos:
                order[j] = order[j - 1]
                j -= 1
            order[pos] = c
            if n_tok < k_max:
                n_tok += 1
        if cutoff_prob < 1.0:
            mass = 0.0
            kept = 0
            while kept < n_tok:
                mass += math.exp(log_probs[t, order[kept]])
                kept += 1
                if mass >= cutoff_prob:
                    break
            n_tok = kept

        # Which live prefix is the parent of which: a new token appended to prefix i may
        # produce a prefix that is already live, and the two must be merged.
        for j in range(n_live):
            stay_slot[j] = -1
            parent[j] = -1
            length = lens[cur, j]
            if length == 0:
                continue
            for i in range(n_live):
                if (
                    lens[cur, i] == length - 1
                    and hashes[cur, i] == parent_hashes[cur, j]
                    and _same_prefix(tokens[cur], i, j, length - 1)
                ):
                    parent[j] = i
                    break

        # Hotword tokens outside the frame's candidates that some live prefix's match may take next (the
        # children of its node and of the nodes on its failure chain, the root's: phrase starts).
        n_extra = 0
        if expand:
            for oi in range(n_tok):
                s = ids[t, order[oi]]
                if 0 <= s < vocab:
                    candidate_at[s] = t
            for i in range(n_live):
                node = ctx_node[cur, i]
                while True:
                    for e in range(child_start[node], child_start[node + 1]):
                        s = child_token[e]
                        if s < 0 or s >= vocab or s == blank_id or candidate_at[s] == t:
                            continue
                        x = extra_at[s]
                        if x < 0 or x >= n_extra or extra_tok[x] != s:  # first seen this frame
                            x = n_extra
                            n_extra += 1
                            extra_tok[x] = s
                            extra_at[s] = x
                            for j in range(n_live):
                                extra_for[x, j] = False
                        extra_for[x, i] = True
                    if node == 0:
                        break
                    node = fail[node]

        n_used = 0
        for oi in range(n_tok + n_extra):
            if oi < n_tok:
                c = order[oi]
                s = ids[t, c]
                ps = log_probs[t, c]
            else:
                s = extra_tok[oi - n_tok]
                ps = full_log_probs[t, s]
            for i in range(n_live):
                if oi >= n_tok and not extra_for[oi - n_tok, i]:
                    continue
                length = lens[cur, i]
                last = tokens[cur, i, length - 1] if length > 0 else -1
                if s == blank_id:
                    slot = stay_slot[i]
                    if slot < 0:
                        slot = n_used
                        n_used += 1
                        stay_slot[i] = slot
                        slot_src[slot] = i
                        slot_tok[slot] = -1
                        slot_pb[slot] = NEG_INF
                        slot_pnb[slot] = NEG_INF
                    slot_pb[slot] = _log_add3(slot_pb[slot], pb[cur, i] + ps, pnb[cur, i] + ps)
                    continue
                if s == last:
                    # Repeat without a blank in between stays the same prefix ...
                    slot = stay_slot[i]
                    if slot < 0:
                        slot = n_used
                        n_used += 1
                        stay_slot[i] = slot
                        slot_src[slot] = i
                        slot_tok[slot] = -1
                        slot_pb[slot] = NEG_INF
                        slot_pnb[slot] = NEG_INF
                    slot_pnb[slot] = _log_add2(slot_pnb[slot], pnb[cur, i] + ps)
                # ... and a new token (or a repeat after a blank) extends it.
                slot = -1
                for j in range(n_live):
                    if parent[j] == i and tokens[cur, j, lens[cur, j] - 1] == s:
                        slot = stay_slot[j]
                        if slot < 0:
                            slot = n_used
                            n_used += 1
                            stay_slot[j] = slot
                            slot_src[slot] = j
                            slot_tok[slot] = -1
                            slot_pb[slot] = NEG_INF
                            slot_pnb[slot] = NEG_INF
                        break
                if slot < 0:
                    slot = n_used
                    n_used += 1
                    slot_src[slot] = i
                    slot_tok[slot] = s
                    slot_pb[slot] = NEG_INF
                    slot_pnb[slot] = NEG_INF
                if s == last:
                    slot_pnb[slot] = _log_add2(slot_pnb[slot], pb[cur, i] + ps)
                else:
                    slot_pnb[slot] = _log_add3(slot_pnb[slot], pb[cur, i] + ps, pnb[cur, i] + ps)

        if n_used == 0:
            # Every candidate was pruned away (only possible with no candidates at all):
            # the beam is left as it was.
            continue

        # Keep the best `beam` slots; strict '>' keeps ties in first-touch order.
        # Zero-probability prefixes (e.g. "aa" grown from an "a" that has no path ending
        # in blank) are dropped unless nothing else is left, so they never take a place
        # in the beam from a real hypothesis.
        n_finite = 0
        for slot in range(n_used):
            slot_score[slot] = _log_add2(slot_pb[slot], slot_pnb[slot])
            src = slot_src[slot]
            node = ctx_node[cur, src]
            locked = ctx_locked[cur, src]
            if biased:
                if slot_tok[slot] >= 0:
                    node = context_step(node, slot_tok[slot], child_start, child_token, child_node, fail)
                    if is_end[node]:
                        locked += node_score[node]
                        node = 0
                slot_score[slot] += locked + node_score[node]
            slot_node[slot] = node
            slot_locked[slot] = locked
            if fused:
                lm_s = lm_state[cur, src]
                lm_total = lm_score[cur, src]
                length = lens[cur, src]
                if slot_tok[slot] >= 0:
                    lm_p, lm_s = lm_step(lm_s, slot_tok[slot], lm_start, lm_token, lm_next, lm_logp, lm_backoff,
                                         lm_backoff_logw, lm_unk_logp)
                    lm_total += lm_p
                    length += 1
                slot_score[slot] += lm_weight * lm_total + lm_bonus * length
                slot_lm_state[slot] = lm_s
                slot_lm_score[slot] = lm_total
            # counted after the bonus: a NaN score (no '>' holds for it) never counts as a hypothesis
            if slot_score[slot] > NEG_INF:
                n_finite += 1
        for slot in range(n_used):
            slot_taken[slot] = n_finite > 0 and not slot_score[slot] > NEG_INF
        n_keep = min(beam, n_finite if n_finite > 0 else n_used)
        for r in range(n_keep):
            best = -1
            for slot in range(n_used):
                if slot_taken[slot]:
                    continue
                if best < 0 or slot_score[slot] > slot_score[best]:
                    best = slot
            if best < 0:  # nothing left to choose: keep what was chosen, never index with -1
                n_keep = r
                break
            slot_taken[best] = True
            chosen[r] = best
        if n_keep == 0:
            continue

        for r in range(n_keep):
            slot = chosen[r]
            src = slot_src[slot]
            length = lens[cur, src]
            for p in range(length):
                tokens[nxt, r, p] = tokens[cur, src, p]
            if slot_tok[slot] >= 0:
                tokens[nxt, r, length] = slot_tok[slot]
                lens[nxt, r] = length + 1
                parent_hashes[nxt, r] = hashes[cur, src]
                hashes[nxt, r] = (hashes[cur, src] * _HASH_MUL + slot_tok[slot] + 1) % _HASH_MOD
            else:
                lens[nxt, r] = length
                parent_hashes[nxt, r] = parent_hashes[cur, src]
                hashes[nxt, r] = hashes[cur, src]
            pb[nxt, r] = slot_pb[slot]
            pnb[nxt, r] = slot_pnb[slot]
            ctx_node[nxt, r] = slot_node[slot]
            ctx_locked[nxt, r] = slot_locked[slot]
            if fused:
                lm_state[nxt, r] = slot_lm_state[slot]
                lm_score[nxt, r] = slot_lm_score[slot]
        n_live = n_keep
        parity = nxt
    return n_live, parity
