"""CTC search: compiled beam search vs the plain-Python reference vs brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from asr_server.asr.decoding import _ctc_kernels
from asr_server.asr.decoding.ctc_search import (
    CtcGreedySearch,
    CtcPrefixBeamSearch,
    CtcSearch,
    Hypothesis,
    SearchOptions,
    advance_streams,
    ctc_greedy,
    make_search,
    topk_log_probs,
)
from asr_server.asr.decoding.reference_search import reference_prefix_beam_search


def random_log_probs(rng: np.random.Generator, frames: int, vocab: int, peak: float = 3.0) -> np.ndarray:
    """(T, V) float32 log-softmax of scaled normal logits; larger peak = peakier frames."""
    logits = rng.standard_normal((frames, vocab)) * peak
    logits -= logits.max(axis=-1, keepdims=True)
    return (logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))).astype(np.float32)


def assert_same_nbest(got: list[Hypothesis], want: list[Hypothesis]) -> None:
    assert [h.tokens for h in got] == [h.tokens for h in want]
    np.testing.assert_allclose([h.score for h in got], [h.score for h in want], rtol=0, atol=1e-9)


# --------------------------------------------------------------------------- options


def test_options_defaults_and_validation() -> None:
    opts = SearchOptions()
    assert (opts.beam_size, opts.tokens_per_frame, opts.blank_id, opts.cutoff_prob) == (10, 10, 0, 1.0)
    assert SearchOptions(top_k=4).tokens_per_frame == 4
    for bad in (
        dict(beam_size=0),
        dict(top_k=0),
        dict(blank_id=-1),
        dict(cutoff_prob=0.0),
        dict(cutoff_prob=1.5),
        dict(method="viterbi"),
    ):
        with pytest.raises(ValueError):
            SearchOptions(**bad)
    with pytest.raises(AttributeError):
        opts.beam_size = 3  # type: ignore[misc]


def test_make_search_picks_the_strategy() -> None:
    assert isinstance(make_search(), CtcPrefixBeamSearch)
    greedy = make_search(SearchOptions(method="greedy"))
    assert isinstance(greedy, CtcGreedySearch)
    assert isinstance(greedy, CtcSearch) and isinstance(make_search(), CtcSearch)


def test_kernels_are_compiled() -> None:
    # The speed claim of this module rests on numba; fail loudly if it silently fell back.
    assert _ctc_kernels.HAVE_NUMBA


# --------------------------------------------------------------------------- top-k


def test_topk_matches_numpy_and_breaks_ties_to_lower_id() -> None:
    rng = np.random.default_rng(0)
    x = random_log_probs(rng, 40, 300)
    vals, ids = topk_log_probs(x, 7)
    want_ids = np.argsort(-x, axis=-1, kind="stable")[:, :7]
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(vals, np.take_along_axis(x, want_ids, -1).astype(np.float64))
    tied = np.array([[0.0, -1.0, 0.0, -1.0, 0.0]])
    assert topk_log_probs(tied, 4)[1].tolist() == [[0, 2, 4, 1]]
    assert topk_log_probs(tied, 9)[1].shape == (1, 5)  # k is capped at V


# --------------------------------------------------------------------------- greedy


def test_greedy_collapses_repeats_and_drops_blanks() -> None:
    best = [[1, 1, 0, 1, 2, 2, 0, 0, 3], [0, 0, 2, 2, 2, 0, 2, 9, 9]]
    lp = np.full((2, 9, 10), -5.0)
    for b, row in enumerate(best):
        lp[b, np.arange(9), row] = -0.1
    assert ctc_greedy(lp) == [(1, 1, 2, 3), (2, 2, 9)]
    # lengths cut the second row after "0 0 2 2 2 0": one token.
    assert ctc_greedy(lp, lengths=[9, 6]) == [(1, 1, 2, 3), (2,)]
    assert ctc_greedy(lp, lengths=[0, 9]) == [(), (2, 2, 9)]
    # Top-k input: the ids array names the tokens.
    vals, ids = topk_log_probs(lp, 3)
    assert ctc_greedy(vals, ids=ids, lengths=[9, 6]) == ctc_greedy(lp, lengths=[9, 6])
    # Another blank id: 0 is an ordinary token then.
    assert ctc_greedy(lp[:1], blank_id=1) == [(0, 2, 0, 3)]


def test_greedy_stream_chunked_equals_batched() -> None:
    rng = np.random.default_rng(1)
    lp = random_log_probs(rng, 60, 5, peak=2.0)
    want = ctc_greedy(lp[None])[0]
    stream = CtcGreedySearch()
    for start in range(0, 60, 7):
        stream.advance(lp[start : start + 7])
    assert stream.best().tokens == want
    assert stream.best().score == pytest.approx(float(lp.max(axis=-1).astype(np.float64).sum()))
    vals, ids = topk_log_probs(lp, 2)
    topk_stream = CtcGreedySearch()
    topk_stream.advance(vals, ids)
    assert topk_stream.nbest() == [stream.best()]
    stream.reset()
    assert stream.best() == Hypothesis((), 0.0)


# --------------------------------------------------------------------------- brute force


def brute_force_label_probs(lp: np.ndarray, blank: int) -> dict[tuple[int, ...], float]:
    """Exact P(labels | x) by enumerating all V**T alignments (tiny inputs only)."""
    frames, vocab = lp.shape
    probs: dict[tuple[int, ...], float] = {}
    p = np.exp(lp.astype(np.float64))
    for path in itertools.product(range(vocab), repeat=frames):
        labels = []
        prev = None
        for s in path:
            if s != blank and s != prev:
                labels.append(s)
            prev = s
        key = tuple(labels)
        probs[key] = probs.get(key, 0.0) + float(np.prod(p[np.arange(frames), path]))
    return probs


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("blank", [0, 2])
def test_exhaustive_beam_equals_brute_force(seed: int, blank: int) -> None:
    rng = np.random.default_rng(seed)
    frames, vocab = 5, 3
    lp = random_log_probs(rng, frames, vocab, peak=1.5)
    exact = brute_force_label_probs(lp, blank)
    # A beam wider than the number of distinct label sequences never prunes: exact.
    opts = SearchOptions(beam_size=64, top_k=vocab, blank_id=blank)
    search = CtcPrefixBeamSearch(opts)
    search.advance(lp)
    got = {h.tokens: math.exp(h.score) for h in search.nbest()}
    assert set(got) == set(exact)
    for labels, prob in exact.items():
        assert got[labels] == pytest.approx(prob, rel=1e-9)
    assert search.best().tokens == max(exact, key=exact.get)
    assert sum(got.values()) == pytest.approx(sum(exact.values()), rel=1e-9)  # float32 input: ~1
    # A narrow beam sums only the alignments it kept: its scores are lower bounds.
    narrow = CtcPrefixBeamSearch(SearchOptions(beam_size=4, top_k=vocab, blank_id=blank))
    narrow.advance(lp)
    assert narrow.best().score <= math.log(exact[narrow.best().tokens]) + 1e-9


# --------------------------------------------------------------------------- parity


def run_fast(lp, ids, opts, chunks=None) -> list[Hypothesis]:
    search = CtcPrefixBeamSearch(opts)
    if chunks is None:
        search.advance(lp, ids)
    else:
        bounds = [0, *chunks, lp.shape[0]]
        for a, b in zip(bounds[:-1], bounds[1:]):
            search.advance(lp[a:b], None if ids is None else ids[a:b])
    return search.nbest()


@pytest.mark.parametrize("seed", range(40))
def test_fast_equals_reference_small_vocab(seed: int) -> None:
    # Small vocabularies make repeats and prefix merges frequent: the hard cases.
    rng = np.random.default_rng(100 + seed)
    vocab = int(rng.integers(2, 8))
    frames = int(rng.integers(1, 40))
    lp = random_log_probs(rng, frames, vocab, peak=float(rng.uniform(0.5, 4.0)))
    opts = SearchOptions(
        beam_size=int(rng.integers(1, 12)),
        top_k=int(rng.integers(1, vocab + 1)),
        blank_id=int(rng.integers(0, vocab)),
        cutoff_prob=float(rng.choice([1.0, 0.99, 0.9])),
    )
    want, _ = reference_prefix_beam_search(lp, options=opts)
    got = run_fast(lp, None, opts)
    assert got == want  # bit-identical: same recursion, same order of operations


@pytest.mark.parametrize("seed", range(3))
def test_fast_equals_reference_large_vocab_topk(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    lp = random_log_probs(rng, 60, 5000, peak=4.0)
    # Make blank dominate most frames, as in real CTC output, so merges happen.
    lp[rng.random(60) < 0.6, 0] = -0.01
    opts = SearchOptions(beam_size=10, top_k=10)
    vals, ids = topk_log_probs(lp, 10)
    want, _ = reference_prefix_beam_search(vals, ids, opts)
    assert run_fast(vals, ids, opts) == want
    # Full-V input does the same top-k inside: same n-best.
    assert run_fast(lp, None, opts) == want
    want_full, _ = reference_prefix_beam_search(lp, options=opts)
    assert want_full == want


def test_topk_input_order_does_not_matter() -> None:
    # Encoders emit top-k sorted, but a shuffled (T, K) must decode the same.
    rng = np.random.default_rng(7)
    lp = random_log_probs(rng, 30, 50, peak=2.0)
    vals, ids = topk_log_probs(lp, 6)
    perm = np.argsort(rng.random(vals.shape), axis=1)
    sv, si = np.take_along_axis(vals, perm, 1), np.take_along_axis(ids, perm, 1)
    opts = SearchOptions(beam_size=5, top_k=6)
    assert run_fast(sv, si, opts) == run_fast(vals, ids, opts)
    assert reference_prefix_beam_search(sv, si, opts)[0] == run_fast(vals, ids, opts)
    # K wider than top_k: only the best top_k columns of each frame count.
    wide_v, wide_i = topk_log_probs(lp, 12)
    assert run_fast(wide_v, wide_i, SearchOptions(beam_size=5, top_k=6)) == run_fast(vals, ids, opts)


def test_interpreted_kernel_matches_compiled() -> None:
    # The fallback when numba is missing runs the very same kernel as Python.
    rng = np.random.default_rng(11)
    lp = random_log_probs(rng, 12, 4, peak=2.0)
    vals, ids = topk_log_probs(lp, 4)
    opts = SearchOptions(beam_size=4, top_k=4)
    search = CtcPrefixBeamSearch(opts)
    search._kernel = _ctc_kernels.prefix_beam_advance.py_func
    search.advance(vals, ids)
    assert search.nbest() == run_fast(vals, ids, opts)


# --------------------------------------------------------------------------- streaming


@pytest.mark.parametrize("seed", range(8))
def test_chunked_equals_whole(seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    frames = 120
    lp = random_log_probs(rng, frames, 6 if seed % 2 else 400, peak=3.0)
    opts = SearchOptions(beam_size=8, top_k=5)
    whole = run_fast(lp, None, opts)
    cuts = sorted(set(rng.integers(0, frames, size=int(rng.integers(1, 15))).tolist()))
    assert run_fast(lp, None, opts, chunks=cuts) == whole
    assert run_fast(lp, None, opts, chunks=list(range(1, frames))) == whole  # one frame at a time
    vals, ids = topk_log_probs(lp, 5)
    assert run_fast(vals, ids, opts, chunks=cuts) == whole
    # The reference resumes from its returned state the same way.
    state = None
    for a, b in zip([0, *cuts], [*cuts, frames]):
        ref, state = reference_prefix_beam_search(lp[a:b], options=opts, state=state)
    assert ref == whole


def test_long_stream_grows_storage_and_reset_restarts() -> None:
    rng = np.random.default_rng(5)
    lp = random_log_probs(rng, 400, 3000, peak=6.0)  # nearly one new token per frame
    opts = SearchOptions(beam_size=4, top_k=4)
    search = CtcPrefixBeamSearch(opts)
    for a in range(0, 400, 16):
        search.advance(lp[a : a + 16])
    assert search.frames == 400
    assert len(search.best().tokens) > CtcPrefixBeamSearch._INITIAL_CAPACITY
    assert search.nbest() == reference_prefix_beam_search(lp, options=opts)[0]
    search.reset()
    assert search.nbest() == [Hypothesis((), 0.0)] and search.frames == 0
    search.advance(lp[:0])  # an empty chunk is a no-op
    assert search.best() == Hypothesis((), 0.0)


def test_nbest_is_sorted_unique_and_scores_are_log_probs() -> None:
    rng = np.random.default_rng(9)
    lp = random_log_probs(rng, 50, 5, peak=1.0)
    search = CtcPrefixBeamSearch(SearchOptions(beam_size=10, top_k=5))
    search.advance(lp)
    nbest = search.nbest()
    assert len(nbest) == 10 and len({h.tokens for h in nbest}) == 10
    scores = [h.score for h in nbest]
    assert scores == sorted(scores, reverse=True) and all(s <= 0.0 for s in scores)
    assert search.best() == nbest[0]
    assert all(0 not in h.tokens for h in nbest)


def test_cutoff_prunes_to_the_probability_mass() -> None:
    # Frame 0: token 1 holds 0.97 of the mass. With cutoff 0.95 it is the only candidate.
    lp = np.log(np.array([[0.01, 0.97, 0.02]]))
    search = CtcPrefixBeamSearch(SearchOptions(beam_size=3, top_k=3, cutoff_prob=0.95))
    search.advance(lp)
    assert search.nbest() == [Hypothesis((1,), math.log(0.97))]
    full = CtcPrefixBeamSearch(SearchOptions(beam_size=3, top_k=3))
    full.advance(lp)
    assert [h.tokens for h in full.nbest()] == [(1,), (2,), ()]


# --------------------------------------------------------------------------- batched


@pytest.mark.parametrize("full_vocab", [False, True])
def test_advance_streams_equals_single_streams(full_vocab: bool) -> None:
    rng = np.random.default_rng(42)
    batch, chunk, vocab = 5, 16, 200
    total = [40, 16, 33, 0, 48]
    lp = np.stack([random_log_probs(rng, 48, vocab, peak=3.0) for _ in range(batch)])
    opts = SearchOptions(beam_size=6, top_k=6)
    streams = [CtcPrefixBeamSearch(opts) for _ in range(batch)]
    streams[1] = CtcGreedySearch()  # strategies may be mixed in one batch
    for a in range(0, 48, chunk):
        lengths = np.clip(np.array(total) - a, 0, chunk)
        # Rows past their length hold junk that must be ignored.
        part = lp[:, a : a + chunk].copy()
        part[np.arange(chunk)[None, :] >= lengths[:, None]] = 0.0
        if full_vocab:
            advance_streams(streams, part, lengths=lengths)
        else:
            vals, ids = topk_log_probs(part, 8)
            advance_streams(streams, vals, ids, lengths=lengths)
    for b in range(batch):
        single = make_search(streams[b].options)
        single.advance(lp[b, : total[b]])
        assert streams[b].nbest() == single.nbest()
    with pytest.raises(ValueError):
        advance_streams(streams[:2], lp[:, :4])
    with pytest.raises(ValueError):
        advance_streams(streams, lp[:, :4], lengths=[5] * batch)
