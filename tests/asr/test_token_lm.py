"""The token n-gram LM: ARPA reading, back-off arithmetic, and shallow fusion in the prefix beam search."""

from __future__ import annotations

import gzip
import math
import os

import numpy as np
import pytest

from asr_server.asr.decoding import _ctc_kernels, token_lm
from asr_server.asr.decoding.ctc_search import CtcPrefixBeamSearch, SearchOptions
from asr_server.asr.decoding.reference_search import reference_prefix_beam_search
from asr_server.asr.decoding.token_lm import LN10, UNK_FLOOR, load_arpa

SYMBOLS = ["<blank>", "<unk>", "a", "b", "c", "d", "<sos/eos>"]  # units.txt order: a=2, b=3, c=4, d=5
A, B, C, D = 2, 3, 4, 5

# A hand-made trigram: log10 probabilities and back-off weights.
ARPA = """
\\data\\
ngram 1=6
ngram 2=4
ngram 3=1

\\1-grams:
-1.0\t<s>\t-0.5
-0.5\ta\t-0.3
-0.7\tb\t-0.2
-1.2\tc
-2.0\t</s>
-3.0\t<unk>

\\2-grams:
-0.1\t<s> a\t-0.4
-0.2\ta b\t-0.1
-0.3\tb c
-0.4\tb </s>

\\3-grams:
-0.05\t<s> a b

\\end\\
"""


@pytest.fixture()
def lm(tmp_path):
    path = tmp_path / "lm.arpa.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(ARPA)
    return load_arpa(path, SYMBOLS)


def test_listed_ngrams_score_their_own_probability(lm):
    assert lm.order == 3
    total, _ = lm.score_tokens([A, B])  # p(a|<s>) p(b|<s> a)
    assert total == pytest.approx((-0.1 - 0.05) * LN10, abs=1e-6)


def test_unlisted_ngrams_back_off_through_the_weights(lm):
    # p(c | a b): no trigram "a b c", so bow(a b) * p(c | b) = -0.1 + -0.3
    _, state = lm.score_tokens([A, B])
    logp, _ = lm.step(state, C)
    assert logp == pytest.approx((-0.1 - 0.3) * LN10, abs=1e-6)
    # p(a | c): c has no back-off weight (log 0), no bigram "c a": p(a) = -0.5
    _, after_c = lm.score_tokens([C], state=0)
    assert lm.step(after_c, A)[0] == pytest.approx(-0.5 * LN10, abs=1e-6)
    # p(b | b): bow(b) + p(b)
    _, after_b = lm.score_tokens([B], state=0)
    assert lm.step(after_b, B)[0] == pytest.approx((-0.2 - 0.7) * LN10, abs=1e-6)


def test_after_a_back_off_the_state_is_the_longest_listed_suffix(tmp_path):
    # With the trigram "b c d" listed, "a b c" must land in state (b c): then d scores that trigram's -0.01,
    # where a state (c) would charge p(d) (unlisted: <unk>).
    path = tmp_path / "lm.arpa"
    path.write_text(ARPA.replace("ngram 3=1", "ngram 3=2").replace("-0.05\t<s> a b\n", "-0.05\t<s> a b\n-0.01\tb c d\n"),
                    encoding="utf-8")
    lm3 = load_arpa(path, SYMBOLS)
    _, state = lm3.score_tokens([A, B, C])  # p(c | a b) backs off: bow(a b) + p(c | b)
    assert lm3.step(state, D)[0] == pytest.approx(-0.01 * LN10, abs=1e-6)
    _, after_c = lm3.score_tokens([C], state=0)
    assert lm3.step(after_c, D)[0] == pytest.approx(-3.0 * LN10, abs=1e-6)


def test_a_unit_the_lm_never_saw_scores_unk_and_the_end_of_sentence_is_known(lm):
    assert lm.step(0, D)[0] == pytest.approx(-3.0 * LN10, abs=1e-6)
    _, after_b = lm.score_tokens([A, B])
    assert lm.end_logp(after_b) == pytest.approx((-0.1 - 0.4) * LN10, abs=1e-6)  # bow(a b) p(</s> | b)


def test_without_unk_a_floor_is_used(tmp_path):
    path = tmp_path / "lm.arpa"
    path.write_text(ARPA.replace("-3.0\t<unk>\n", ""), encoding="utf-8")
    assert load_arpa(path, SYMBOLS).step(0, D)[0] == pytest.approx(UNK_FLOOR)


def test_an_arpa_over_other_words_is_refused(tmp_path):
    path = tmp_path / "lm.arpa"
    path.write_text("\\data\\\nngram 1=1\n\n\\1-grams:\n-1.0\tzebra\n\n\\end\\\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no n-gram over the model's units"):
        load_arpa(path, SYMBOLS)


def test_an_estimated_lm_sums_to_one_at_every_history(tmp_path):
    """Back-off arithmetic against the definition: over all units and </s>, p(. | h) sums to 1 for an ARPA whose
    weights were computed to normalise (a small Witten-Bell bigram built here by hand)."""
    corpus = [[A, B, C], [A, B], [B, C, C], [A]]
    vocab = [A, B, C, D]
    names = {A: "a", B: "b", C: "c", D: "d"}
    uni = {w: 1 for w in vocab + ["</s>"]}  # add-one unigrams
    big: dict = {}
    for sent in corpus:
        seq = ["<s>"] + sent + ["</s>"]
        for x in seq[1:]:
            uni[x] = uni.get(x, 0) + 1
        for h, w in zip(seq, seq[1:]):
            big.setdefault(h, {}).setdefault(w, 0)
            big[h][w] += 1
    total = sum(uni.values())
    p_uni = {w: c / total for w, c in uni.items()}
    lines = ["\\data\\", "", "\\1-grams:"]
    bows = {}
    for h, follow in big.items():
        n, types = sum(follow.values()), len(follow)
        lam = n / (n + types)
        p = {w: lam * c / n + (1 - lam) * p_uni[w] for w, c in follow.items()}
        bows[h] = (p, (1 - sum(p.values())) / (1 - sum(p_uni[w] for w in follow)))
    for w in vocab + ["</s>", "<s>"]:
        key = names.get(w, w)
        lp = -99.0 if w == "<s>" else math.log10(p_uni[w])
        bw = f"\t{math.log10(bows[w][1])}" if w in bows else ""
        lines.append(f"{lp}\t{key}{bw}")
    lines += ["", "\\2-grams:"]
    for h, (p, _) in bows.items():
        for w, pw in p.items():
            lines.append(f"{math.log10(pw)}\t{names.get(h, h)} {names.get(w, w)}")
    lines += ["", "\\end\\"]
    path = tmp_path / "wb.arpa"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    lm = load_arpa(path, SYMBOLS)
    for history in ([], [A], [B], [C], [D], [A, B]):
        _, state = lm.score_tokens(history)
        mass = sum(math.exp(lm.step(state, w)[0]) for w in vocab) + math.exp(lm.end_logp(state))
        assert mass == pytest.approx(1.0, abs=1e-5), history


def frames(rows):
    """Probabilities over (blank, <unk>, a, b, c, d) per frame -> (T, V) log-probs."""
    p = np.asarray(rows, np.float64) + 1e-9  # every token possible, as a softmax gives
    p = np.concatenate([p, np.full((p.shape[0], 1), 1e-9)], axis=1)  # <sos/eos>
    return np.log(p / p.sum(axis=1, keepdims=True))


CLOSE_CALL = frames([[0.1, 0.0, 0.9, 0.0, 0.0, 0.0],
                     [0.1, 0.0, 0.0, 0.0, 0.46, 0.44],  # c or d: the acoustics barely prefer c
                     [0.9, 0.0, 0.0, 0.0, 0.05, 0.05]])


def best(log_probs, lm=None, beam=4):
    search = CtcPrefixBeamSearch(SearchOptions(beam_size=beam, top_k=6, lm=lm))
    search.advance(log_probs)
    return search.best().tokens


def test_the_lm_flips_a_close_call_and_only_with_weight(lm, tmp_path):
    # This LM knows "c" (-1.2) and not "d" (<unk>, -3.0): fused, "a c" wins; an LM that knew d better flips it.
    assert best(CLOSE_CALL) == (A, C)
    assert best(CLOSE_CALL, lm.with_weights(0.0, 0.0)) == (A, C)
    assert best(CLOSE_CALL, lm.with_weights(0.5, 0.0)) == (A, C)
    path = tmp_path / "d.arpa"
    path.write_text(ARPA.replace("-1.2\tc", "-2.5\tc\n-0.6\td").replace("ngram 1=6", "ngram 1=7"), encoding="utf-8")
    likes_d = load_arpa(path, SYMBOLS)
    assert best(CLOSE_CALL, likes_d.with_weights(0.5, 0.0)) == (A, D)
    assert best(CLOSE_CALL, likes_d.with_weights(0.0, 0.0)) == (A, C)


def test_the_bonus_keeps_a_longer_hypothesis(lm):
    # "a" then a weak "c": "a c </s>" costs the LM 1.2 log10 units (2.8 nats) more than "a </s>", so without
    # a bonus the fused search drops the "c"; a bonus of 3 per token keeps it.
    log_probs = frames([[0.1, 0.0, 0.9, 0.0, 0.0, 0.0],
                        [0.55, 0.0, 0.0, 0.0, 0.45, 0.0]])
    assert best(log_probs) == (A,)
    assert best(log_probs, lm.with_weights(1.0, 0.0)) == (A,)
    assert best(log_probs, lm.with_weights(1.0, 3.0)) == (A, C)


@pytest.mark.parametrize("weight,bonus", [(0.3, 0.5), (1.0, 0.0), (0.7, 2.0)])
def test_fused_search_is_the_reference_bit_for_bit_and_resumable(lm, weight, bonus):
    rng = np.random.default_rng(7)
    log_probs = np.log(rng.dirichlet(np.full(7, 0.3), size=40))
    fused = lm.with_weights(weight, bonus)
    options = SearchOptions(beam_size=5, top_k=4, lm=fused)
    ref, _ = reference_prefix_beam_search(log_probs, options=options)
    whole = CtcPrefixBeamSearch(options)
    whole.advance(log_probs)
    chunked = CtcPrefixBeamSearch(options)
    for start in range(0, 40, 7):
        chunked.advance(log_probs[start:start + 7])
    assert whole.nbest() == ref
    assert chunked.nbest() == ref



@pytest.mark.parametrize("weight,bonus", [(0.3, 0.5), (0.7, 3.0)])
def test_the_interpreted_kernel_is_the_compiled_one_bit_for_bit(lm, monkeypatch, weight, bonus):
    """The fallback without numba runs the same kernels as Python, the LM's step included."""
    rng = np.random.default_rng(11)
    log_probs = np.log(rng.dirichlet(np.full(7, 0.3), size=30))
    options = SearchOptions(beam_size=5, top_k=4, lm=lm.with_weights(weight, bonus))
    compiled = CtcPrefixBeamSearch(options)
    compiled.advance(log_probs)
    monkeypatch.setattr(_ctc_kernels, "lm_step", _ctc_kernels.lm_step.py_func)
    interpreted = CtcPrefixBeamSearch(options)
    interpreted._kernel = _ctc_kernels.prefix_beam_advance.py_func
    interpreted.advance(log_probs)
    assert interpreted.nbest() == compiled.nbest()


def test_an_empty_lm_or_one_at_weight_zero_changes_nothing(lm):
    rng = np.random.default_rng(3)
    log_probs = np.log(rng.dirichlet(np.full(7, 0.3), size=30))
    plain = CtcPrefixBeamSearch(SearchOptions(beam_size=5, top_k=4))
    plain.advance(log_probs)
    for fused in (token_lm.EMPTY.with_weights(1.0, 1.0), lm.with_weights(0.0, 0.0)):
        search = CtcPrefixBeamSearch(SearchOptions(beam_size=5, top_k=4, lm=fused))
        search.advance(log_probs)
        assert search.nbest() == plain.nbest()


def test_a_model_config_names_its_lm_inside_its_folder(tmp_path):
    from asr_server.asr.serving.serving_config import fusion_lm
    from asr_server.asr.units import SymbolTable

    model = tmp_path / "scoring"
    model.mkdir()
    (model / "lm.arpa").write_text(ARPA, encoding="utf-8")
    (tmp_path / "other.arpa").write_text(ARPA, encoding="utf-8")
    args = {"model_repository": str(model)}
    symbols = SymbolTable(SYMBOLS)
    assert fusion_lm(args, {}, symbols) is None
    lm = fusion_lm(args, {"lm_file": "lm.arpa", "lm_weight": "0.7", "lm_bonus": "-1"}, symbols)
    assert (lm.order, lm.weight, lm.bonus) == (3, 0.7, -1.0)
    defaults = fusion_lm(args, {"lm_file": "lm.arpa"}, symbols)
    assert (defaults.weight, defaults.bonus) == (token_lm.DEFAULT_WEIGHT, token_lm.DEFAULT_BONUS)
    with pytest.raises(ValueError, match="outside"):
        fusion_lm(args, {"lm_file": "../other.arpa"}, symbols)
    for bad in ("nan", "-0.1", "11", "x"):
        with pytest.raises(ValueError, match="lm_weight"):
            fusion_lm(args, {"lm_file": "lm.arpa", "lm_weight": bad}, symbols)


def test_the_offline_scorer_searches_with_the_settings_lm(lm, tmp_path):
    from asr_server.asr.decoding.ctc_search import topk_log_probs
    from asr_server.asr.serving.pipeline import DecodingSettings, OfflineScorer
    from asr_server.asr.units import SymbolTable, Tokenizer

    path = tmp_path / "d.arpa"
    path.write_text(ARPA.replace("-1.2\tc", "-2.5\tc\n-0.6\td").replace("ngram 1=6", "ngram 1=7"), encoding="utf-8")
    likes_d = load_arpa(path, SYMBOLS, weight=0.5, bonus=0.0)
    values, ids = topk_log_probs(CLOSE_CALL, 6)
    encoder_out = np.zeros((1, 3, 2), np.float32)
    tokenizer = Tokenizer(SymbolTable(SYMBOLS))
    for fused, text in ((None, "ac"), (likes_d, "ad")):
        settings = DecodingSettings(beam_size=4, sos=6, eos=6, rescoring=False, lm=fused)
        assert OfflineScorer(tokenizer, settings).decode(encoder_out, np.array([3]), values[None], ids[None]) == [text]


def test_instances_of_one_process_share_the_arrays_and_a_changed_file_is_read_again(tmp_path):
    path = tmp_path / "lm.arpa"
    path.write_text(ARPA, encoding="utf-8")
    first, second = load_arpa(path, SYMBOLS, 0.5, 1.0), load_arpa(path, SYMBOLS, 0.2, 0.0)
    assert first.arc_logp is second.arc_logp and (second.weight, second.bonus) == (0.2, 0.0)
    path.write_text(ARPA.replace("-1.2\tc", "-1.3\tc"), encoding="utf-8")
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    changed = load_arpa(path, SYMBOLS)
    assert changed.arc_logp is not first.arc_logp
    assert changed.step(0, C)[0] == pytest.approx(-1.3 * LN10, abs=1e-6)
