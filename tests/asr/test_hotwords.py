"""Hotwords: the prefix tree with failure links, its parsing, and biasing inside the compiled prefix beam search."""

from __future__ import annotations

import numpy as np
import pytest

from asr_server.asr.decoding import _ctc_kernels
from asr_server.asr.decoding.ctc_search import (
    CtcPrefixBeamSearch,
    SearchOptions,
    topk_log_probs,
)
from asr_server.asr.decoding.reference_search import reference_prefix_beam_search
from asr_server.asr.decoding.hotwords import EMPTY, Hotwords, build_graph, parse_phrases
from asr_server.asr.serving.pipeline import DecodingSettings, OfflineScorer
from asr_server.asr.units import SymbolTable, Tokenizer

# ids: 0 blank, 1 unk, 2 a, 3 b, 4 c, 5 d, 6 <sos/eos>
SYMBOLS = SymbolTable(["<blank>", "<unk>", "a", "b", "c", "d", "<sos/eos>"])


def walk(graph, tokens):
    node = 0
    for t in tokens:
        node = _ctc_kernels.context_step(node, t, graph.child_start, graph.child_token, graph.child_node, graph.fail)
    return node


def test_tree_follows_failure_links_and_scores_matched_depth():
    graph = build_graph([([2, 3, 4], 1.0), ([3, 4, 5], 2.0)])
    ab = walk(graph, [2, 3])
    assert graph.node_score[ab] == 2.0 and not graph.is_end[ab]
    # "a b" then "d": no "abd", but the suffix "b" ... "d" is not "bcd" either -> root
    assert walk(graph, [2, 3, 5]) == 0
    # "a b" then "c": the phrase "abc" ends there
    assert graph.is_end[walk(graph, [2, 3, 4])]
    # "a a b c": the second "a" restarts the match
    assert graph.is_end[walk(graph, [2, 2, 3, 4])]
    # "b c" from inside "a b c d"? "a b" fails over to "b" when "c d" follows: a x b c d -> bcd ends
    assert graph.is_end[walk(graph, [2, 5, 3, 4, 5])] and graph.node_score[walk(graph, [3, 4, 5])] == 6.0
    assert EMPTY.empty and not graph.empty


def test_phrases_parse_with_scores_and_bad_ones_are_refused():
    assert parse_phrases("ab | b c:3.5\nd", 2.0) == [("ab", 2.0), ("b c", 3.5), ("d", 2.0)]
    assert parse_phrases("x\t1.5", 2.0, separators="\n") == [("x", 1.5)]
    with pytest.raises(ValueError, match="score"):
        parse_phrases("ab:lots", 2.0)
    with pytest.raises(ValueError, match="at most"):
        parse_phrases("|".join(["a"] * 1001), 2.0)


@pytest.mark.parametrize("score", ["nan", "-inf", "inf", "1e300", "-1e300", "101", "", "0x1p3"])
def test_a_score_must_be_a_finite_number_in_range(score):
    # NaN or an infinite bonus used to reach the compiled search and crash the server (SIGSEGV)
    with pytest.raises(ValueError, match="score"):
        parse_phrases(f"chairs:{score}", 2.0)
    hot = Hotwords(Tokenizer(SYMBOLS).encode)
    with pytest.raises(ValueError, match="hotwords_score"):
        hot.for_request({"hotwords": "a b", "hotwords_score": score})
    with pytest.raises(ValueError, match="hotwords_score"):
        Hotwords.from_parameters({"hotwords_score": score}, None, Tokenizer(SYMBOLS).encode)
    assert hot.for_request({"hotwords": "a b", "hotwords_score": "-100"}).phrases == ("a b",)


@pytest.mark.parametrize("bonus", [float("nan"), float("-inf"), float("inf"), 1e308])
def test_the_search_kernel_stays_in_bounds_whatever_the_bonus(bonus):
    # graphs built directly bypass the parameter checks: the kernel itself must not index out of its arrays
    for full in (False, True):
        hyps = decode(AMBIGUOUS, build_graph([([2, 5], bonus), ([4], bonus)]), full=full)
        assert all(all(0 <= t < len(SYMBOLS) for t in h.tokens) for h in hyps)


def test_a_request_list_is_bounded_by_characters_and_the_cache_by_bytes(monkeypatch):
    from asr_server.asr.decoding import hotwords

    with pytest.raises(ValueError, match="characters in all"):
        parse_phrases("|".join(["x" * 199] * 101), 2.0)  # 101 phrases, 20,099 characters
    hot = Hotwords(Tokenizer(SYMBOLS).encode)
    one = hot.for_request({"hotwords": "a b c d|a b"})
    monkeypatch.setattr(hotwords, "CACHE_BYTES", 3 * one.nbytes)
    for i in range(10):
        hot.for_request({"hotwords": "a b c d|a b", "hotwords_score": 1 + i})
        assert hot._cache_bytes == sum(g.nbytes for g in hot._cache.values()) <= 3 * one.nbytes
    assert len(hot._cache) == 3  # the newest three
    assert hot.for_request({"hotwords": "a b c d|a b", "hotwords_score": 10}) is hot._cache[("a b c d|a b", 10.0)]


def test_the_model_file_must_stay_inside_its_folder(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "hot.txt").write_text("a b\nc:4\n")
    (tmp_path / "secret.txt").write_text("x\n")
    tokenizer = Tokenizer(SYMBOLS)
    hot = Hotwords.from_parameters({"hotwords_file": "hot.txt"}, tmp_path / "model", tokenizer.encode)
    assert hot.model_graph.phrases == ("a b", "c")
    with pytest.raises(ValueError, match="outside"):
        Hotwords.from_parameters({"hotwords_file": "../secret.txt"}, tmp_path / "model", tokenizer.encode)
    # a request's list replaces the model's; without one the model's applies
    assert hot.for_request({"hotwords": "d"}).phrases == ("d",) and hot.for_request({}) is hot.model_graph


def frames(rows):
    """rows of {token: probability} -> (T, V) log-probs (the rest of the mass spread evenly)."""
    out = np.full((len(rows), len(SYMBOLS)), 0.0)
    for t, row in enumerate(rows):
        rest = (1.0 - sum(row.values())) / (len(SYMBOLS) - len(row))
        out[t] = rest
        for token, p in row.items():
            out[t, token] = p
    return np.log(out)


# "c" is heard a little better than "d" at the second spike: unbiased, "a c" wins; the hotword "a d" flips it
AMBIGUOUS = frames([{2: 0.9}, {0: 0.9}, {4: 0.5, 5: 0.4}, {0: 0.9}])


def decode(log_probs, context=None, beam=4, full=False):
    """The search over each frame's top-4 (what the streaming encoder gives); full: with every token's
    log-prob beside it (what the offline encoder gives), so hotword tokens outside the top-4 are tried too."""
    search = CtcPrefixBeamSearch(SearchOptions(beam_size=beam, top_k=4), context)
    values, ids = topk_log_probs(log_probs, 4)
    search.advance(values, ids, log_probs if full else None)
    return search.nbest()


def test_a_hotword_flips_a_close_call_and_only_then():
    assert decode(AMBIGUOUS)[0].tokens == (2, 4)
    biased = decode(AMBIGUOUS, build_graph([([2, 5], 1.0)]))
    assert biased[0].tokens == (2, 5)
    # its score carries the bonus of the completed phrase (2 tokens x 1.0)
    plain = {h.tokens: h.score for h in decode(AMBIGUOUS)}
    assert biased[0].score == pytest.approx(plain[(2, 5)] + 2.0)
    # a hotword that is not said leaves the best hypothesis and every score as they were (a partial match
    # may still pull a prefix into the tail of the beam while it lasts)
    unsaid = decode(AMBIGUOUS, build_graph([([3, 3, 3], 1.0)]))
    assert unsaid[0] == decode(AMBIGUOUS)[0]
    assert all(h.score == pytest.approx(plain[h.tokens]) for h in unsaid if h.tokens in plain)


def test_a_partial_match_loses_its_bonus():
    # "a d b" is the phrase; only "a d" is said: the partial bonus must not survive into the n-best scores
    plain = {h.tokens: h.score for h in decode(AMBIGUOUS)}
    biased = decode(AMBIGUOUS, build_graph([([2, 5, 3], 1.0)]))
    shared = [h for h in biased if h.tokens in plain]
    assert (2, 5) in [h.tokens for h in shared] and biased[0].tokens == (2, 4)
    assert all(h.score == pytest.approx(plain[h.tokens]) for h in shared)


def test_without_hotwords_the_search_is_the_reference_bit_for_bit():
    rng = np.random.default_rng(5)
    log_probs = np.log(rng.dirichlet(np.ones(len(SYMBOLS)) * 0.3, size=40))
    ref, _ = reference_prefix_beam_search(log_probs, options=SearchOptions(beam_size=4, top_k=4))
    assert decode(log_probs) == ref
    assert decode(log_probs, EMPTY) == ref


def test_offline_scorer_takes_hotwords_per_request():
    scorer = OfflineScorer(Tokenizer(SYMBOLS), DecodingSettings(beam_size=4, sos=6, eos=6, rescoring=False))
    values, ids = _ctc_kernels_topk(AMBIGUOUS)
    encoder_out = np.zeros((1, 4, 2), np.float32)
    assert scorer.decode(encoder_out, np.array([4]), values, ids) == ["ac"]
    got = scorer.recognize(encoder_out, np.array([4]), values, ids, parameters={"hotwords": "ad:1"})
    assert got[0][0] == "ad"
    with pytest.raises(ValueError):
        scorer.recognize(encoder_out, np.array([4]), values, ids, parameters={"hotwords": "ad:x"})


def _ctc_kernels_topk(log_probs):
    from asr_server.asr.decoding.ctc_search import topk_log_probs

    values, ids = topk_log_probs(log_probs, 4)
    return values[None], ids[None]


# "d" is said, but the encoder ranks it 5th at its spike: a top-4 search can never find it
RARE = frames([{2: 0.9}, {0: 0.9}, {4: 0.5, 0: 0.3, 3: 0.1, 1: 0.05, 5: 0.03}, {0: 0.9}])


def ctc_log_prob(log_probs, tokens):
    """log P(tokens) summed over every CTC path (torch's CTC loss)."""
    import torch

    lp = torch.tensor(log_probs, dtype=torch.float64)[:, None, :]
    loss = torch.nn.functional.ctc_loss(lp, torch.tensor([tokens]), torch.tensor([len(log_probs)]),
                                        torch.tensor([len(tokens)]), blank=0, reduction="sum")
    return -float(loss)


def test_a_hotword_token_outside_the_top_k_is_found_when_every_log_prob_is_known():
    assert 5 not in topk_log_probs(RARE, 4)[1][2]
    hot = build_graph([([2, 5], 2.0)])
    assert decode(RARE)[0].tokens == (2, 4)
    assert decode(RARE, hot)[0].tokens == (2, 4)  # top-4 only: "d" is never a candidate
    found = decode(RARE, hot, full=True)
    assert found[0].tokens == (2, 5)
    # its score is its CTC log-probability (over the paths the search kept: at least its best path, at most
    # all paths) plus the bonus of the completed phrase (2 tokens x 2.0)
    best_path = np.log(0.9 * 0.9 * 0.03 * 0.9)
    assert best_path <= found[0].score - 4.0 <= ctc_log_prob(RARE, [2, 5]) + 1e-9
    # a phrase that starts with the rare token is tried from the root, too
    assert decode(RARE, build_graph([([5], 4.0)]), full=True)[0].tokens == (2, 5)


def test_every_log_prob_known_changes_nothing_without_hotwords_or_when_the_hotword_is_not_said():
    rng = np.random.default_rng(6)
    log_probs = np.log(rng.dirichlet(np.ones(len(SYMBOLS)) * 0.3, size=40))
    ref, _ = reference_prefix_beam_search(log_probs, options=SearchOptions(beam_size=4, top_k=4))
    assert decode(log_probs, full=True) == ref
    assert decode(log_probs, EMPTY, full=True) == ref
    unsaid = decode(RARE, build_graph([([3, 3, 3], 1.0)]), full=True)
    assert unsaid[0] == decode(RARE)[0]


def test_expansion_is_resumable_chunk_by_chunk():
    rng = np.random.default_rng(8)
    log_probs = np.log(rng.dirichlet(np.ones(len(SYMBOLS)) * 0.3, size=60))
    hot = build_graph([([5, 3], 1.5), ([4, 4, 2], 2.0)])
    whole = decode(log_probs, hot, full=True)
    search = CtcPrefixBeamSearch(SearchOptions(beam_size=4, top_k=4), hot)
    values, ids = topk_log_probs(log_probs, 4)
    for a, b in ((0, 7), (7, 8), (8, 31), (31, 60)):
        search.advance(values[a:b], ids[a:b], log_probs[a:b])
    assert search.nbest() == whole
