"""Attention rescoring: decoder input layout, decoder scores, weight maths."""

from __future__ import annotations

import numpy as np
import pytest

from asr_server.asr.decoding.rescoring import (
    PAD_CTC_SCORE,
    DecoderInputs,
    Rescored,
    RescoringOptions,
    attention_rescoring,
    build_decoder_inputs,
    combine_scores,
    decoder_scores_from_log_probs,
    hyps_from_best_index,
)

SOS, EOS = 8, 9  # distinct here so the layout test can tell them apart (WeNet: sos == eos)
NBESTS = [[((1, 2, 3), -1.0), ((4,), -2.0)], [((), -0.5)]]


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_options_validation() -> None:
    assert RescoringOptions() == RescoringOptions(ctc_weight=0.5, reverse_weight=0.0)
    for bad in (dict(ctc_weight=-0.1), dict(ctc_weight=float("nan")), dict(reverse_weight=1.5)):
        with pytest.raises(ValueError):
            RescoringOptions(**bad)


def test_decoder_input_layout() -> None:
    inputs = build_decoder_inputs(NBESTS, beam_size=3, sos=SOS, eos=EOS)
    assert inputs.hyps_pad_sos_eos.dtype == np.int64 and inputs.hyps_lens_sos.dtype == np.int32
    assert inputs.hyps_pad_sos_eos.shape == (2, 3, 5)  # longest hyp 3, + sos + eos
    np.testing.assert_array_equal(
        inputs.hyps_pad_sos_eos,
        [
            [[8, 1, 2, 3, 9], [8, 4, 9, 9, 9], [8, 9, 9, 9, 9]],
            [[8, 9, 9, 9, 9], [8, 9, 9, 9, 9], [8, 9, 9, 9, 9]],
        ],
    )
    np.testing.assert_array_equal(inputs.r_hyps_pad_sos_eos[0, 0], [8, 3, 2, 1, 9])
    np.testing.assert_array_equal(inputs.r_hyps_pad_sos_eos[0, 1:], inputs.hyps_pad_sos_eos[0, 1:])
    np.testing.assert_array_equal(inputs.hyps_lens_sos, [[4, 2, 1], [1, 1, 1]])
    np.testing.assert_array_equal(
        inputs.ctc_score, np.array([[-1.0, -2.0, PAD_CTC_SCORE], [-0.5, PAD_CTC_SCORE, PAD_CTC_SCORE]], np.float32)
    )
    np.testing.assert_array_equal(inputs.num_hyps, [2, 1])
    np.testing.assert_array_equal(inputs.valid, [[True, True, False], [True, False, False]])
    assert list(inputs.feeds()) == ["hyps_pad_sos_eos", "hyps_lens_sos", "r_hyps_pad_sos_eos", "ctc_score"]


def test_decoder_input_options() -> None:
    inputs = build_decoder_inputs(
        NBESTS, 2, SOS, EOS, bidirectional=False, pad_id=-1, ids_dtype=np.int32, score_dtype=np.float16
    )
    assert inputs.r_hyps_pad_sos_eos is None and "r_hyps_pad_sos_eos" not in inputs.feeds()
    assert inputs.hyps_pad_sos_eos.dtype == np.int32 and inputs.ctc_score.dtype == np.float16
    np.testing.assert_array_equal(inputs.hyps_pad_sos_eos[0, 1], [8, 4, 9, -1, -1])
    np.testing.assert_array_equal(inputs.hyps_pad_sos_eos[1, 1], [8, 9, -1, -1, -1])
    assert build_decoder_inputs([[((), 0.0)]], 1, SOS, EOS).hyps_pad_sos_eos.tolist() == [[[8, 9]]]
    with pytest.raises(ValueError, match="beam_size"):
        build_decoder_inputs(NBESTS, 1, SOS, EOS)


@pytest.mark.parametrize("pad_id", [None, -1])
def test_decoder_scores_are_token_log_probs_plus_eos(pad_id: int | None) -> None:
    rng = np.random.default_rng(0)
    vocab = 10
    inputs = build_decoder_inputs(NBESTS, 3, SOS, EOS, pad_id=pad_id)
    batch, beam, width = inputs.hyps_pad_sos_eos.shape
    logits = rng.standard_normal((batch * beam, width - 1, vocab))
    lp = log_softmax(logits)
    got = decoder_scores_from_log_probs(lp, inputs.hyps_pad_sos_eos, inputs.hyps_lens_sos)
    want = np.zeros((batch, beam))
    for b in range(batch):
        for j in range(beam):
            hyp = NBESTS[b][j][0] if j < len(NBESTS[b]) else ()
            rows = lp[b * beam + j]
            want[b, j] = sum(rows[i, tok] for i, tok in enumerate(hyp)) + rows[len(hyp), EOS]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # (B, beam, L+1, V) works too, and logits can be normalised here.
    four_d = lp.reshape(batch, beam, width - 1, vocab)
    np.testing.assert_allclose(
        decoder_scores_from_log_probs(four_d, inputs.hyps_pad_sos_eos, inputs.hyps_lens_sos), want, atol=1e-12
    )
    np.testing.assert_allclose(
        decoder_scores_from_log_probs(logits, inputs.hyps_pad_sos_eos, inputs.hyps_lens_sos, normalize=True),
        want,
        atol=1e-12,
    )
    # Right to left: the reversed rows score the reversed tokens plus eos.
    r_got = decoder_scores_from_log_probs(lp, inputs.r_hyps_pad_sos_eos, inputs.hyps_lens_sos)
    rows = lp[0]
    assert r_got[0, 0] == pytest.approx(rows[0, 3] + rows[1, 2] + rows[2, 1] + rows[3, EOS], abs=1e-12)
    with pytest.raises(ValueError, match="does not fit"):
        decoder_scores_from_log_probs(lp[:, :-1], inputs.hyps_pad_sos_eos, inputs.hyps_lens_sos)


def test_combine_scores_hand_computed() -> None:
    ctc, dec, rdec = np.array([[-2.0]]), np.array([[-3.0]]), np.array([[-5.0]])
    both = combine_scores(ctc, dec, rdec, RescoringOptions(ctc_weight=0.5, reverse_weight=0.3))
    assert both[0, 0] == pytest.approx(-3.0 * 0.7 + -5.0 * 0.3 + 0.5 * -2.0)  # -4.6
    # reverse_weight 0: the right-to-left scores are ignored (WeNet prunes them from the graph).
    assert combine_scores(ctc, dec, rdec, RescoringOptions(ctc_weight=0.5))[0, 0] == pytest.approx(-4.0)
    assert combine_scores(ctc, dec, None, RescoringOptions(ctc_weight=0.0))[0, 0] == pytest.approx(-3.0)
    assert combine_scores(ctc, dec, rdec, RescoringOptions(ctc_weight=1.0, reverse_weight=1.0))[0, 0] == -7.0
    with pytest.raises(ValueError, match="right-to-left"):
        combine_scores(ctc, dec, None, RescoringOptions(reverse_weight=0.3))


def test_attention_rescoring_picks_by_combined_score() -> None:
    nbests = [[((1,), -1.0), ((2,), -1.5), ((3,), -4.0)], [((5, 6), -0.2)]]
    dec = np.array([[-4.0, -3.0, -1.0], [-2.0, 0.0, 0.0]])  # row 1 cols 1-2 are padding
    rdec = np.array([[-4.0, -6.0, -1.0], [-2.0, 0.0, 0.0]])
    opts = RescoringOptions(ctc_weight=0.5, reverse_weight=0.5)
    # utt 0: -4.5, -5.25, -3.0 -> index 2; utt 1: padding never wins despite score 0.
    got = attention_rescoring(nbests, dec, rdec, opts)
    assert got[0] == Rescored((3,), -3.0, 2)
    assert got[1] == Rescored((5, 6), pytest.approx(-2.1), 0)
    # Without the right-to-left decoder and with a heavy CTC weight the CTC best wins.
    assert attention_rescoring(nbests, dec, None, RescoringOptions(ctc_weight=5.0))[0].index == 0
    # Equal scores keep the CTC order.
    tie = attention_rescoring([[((1,), -1.0), ((2,), -1.0)]], np.array([[-1.0, -1.0]]))
    assert tie[0].index == 0
    assert attention_rescoring([[]], np.zeros((1, 2)))[0] == Rescored((), -np.inf, -1)
    with pytest.raises(ValueError):
        attention_rescoring(nbests, dec[:1], rdec[:1], opts)


def test_matches_wenet_decoder_graph_formula() -> None:
    # WeNet's exported decoder mixes l2r and r2l per position, sums, adds ctc_weight * ctc and
    # argmaxes over the beam. Emulate that on the padded inputs; the pick must agree.
    rng = np.random.default_rng(3)
    vocab, beam = 12, 4
    nbests = [
        [(tuple(rng.integers(1, vocab - 1, size=int(rng.integers(0, 6))).tolist()), float(-rng.random() * 5)) for _ in range(n)]
        for n in (4, 2, 3)
    ]
    inputs = build_decoder_inputs(nbests, beam, vocab - 1, vocab - 1)
    width = inputs.hyps_pad_sos_eos.shape[2]
    lp = log_softmax(rng.standard_normal((3 * beam, width - 1, vocab)) * 2)
    rlp = log_softmax(rng.standard_normal((3 * beam, width - 1, vocab)) * 2)
    cw, rw = 0.3, 0.3
    hyps = inputs.hyps_pad_sos_eos.reshape(3 * beam, width)
    rhyps = inputs.r_hyps_pad_sos_eos.reshape(3 * beam, width)
    mask = np.arange(width - 1)[None] < inputs.hyps_lens_sos.reshape(-1, 1)
    l2r = np.take_along_axis(lp, (hyps[:, 1:] * mask)[..., None], -1)[..., 0] * mask
    r2l = np.take_along_axis(rlp, (rhyps[:, 1:] * mask)[..., None], -1)[..., 0] * mask
    graph = ((1 - rw) * l2r + rw * r2l).sum(-1).reshape(3, beam) + cw * inputs.ctc_score
    best_index = graph.argmax(-1)

    dec = decoder_scores_from_log_probs(lp, inputs.hyps_pad_sos_eos, inputs.hyps_lens_sos)
    rdec = decoder_scores_from_log_probs(rlp, inputs.r_hyps_pad_sos_eos, inputs.hyps_lens_sos)
    opts = RescoringOptions(ctc_weight=cw, reverse_weight=rw)
    np.testing.assert_allclose(combine_scores(inputs.ctc_score, dec, rdec, opts), graph, rtol=1e-6)
    picks = attention_rescoring(nbests, dec, rdec, opts)
    valid_best = [int(i) for i in best_index]  # the graph may pick padding; ours never does
    for b, pick in enumerate(picks):
        if valid_best[b] < len(nbests[b]):
            assert pick.index == valid_best[b]
    assert hyps_from_best_index(nbests, best_index) == [
        nbests[b][i][0] if i < len(nbests[b]) else nbests[b][0][0] for b, i in enumerate(valid_best)
    ]


def test_hyps_from_best_index_falls_back_on_padding() -> None:
    assert hyps_from_best_index(NBESTS, np.array([[1], [2]])) == [(4,), ()]
    assert hyps_from_best_index([[((7,), -1.0)], []], [0, 0]) == [(7,), ()]
    with pytest.raises(ValueError):
        hyps_from_best_index(NBESTS, [0])
    assert isinstance(build_decoder_inputs(NBESTS, 2, SOS, EOS), DecoderInputs)
