"""The restricted CTC loss: plain CTC when unrestricted, larger when early alignments are forbidden, and the
emission bounds estimated from audio follow the speech."""

import numpy as np
import pytest
import torch

from asr_server.asr.training.restricted_ctc import earliest_emission_frames, restricted_ctc_loss, speech_span


def _batch(seed=0, b=3, t=12, v=6, lens=(12, 9, 7), ys=((1, 2, 2), (3, 1, 0), (4, 0, 0)), ylens=(3, 2, 1)):
    g = torch.Generator().manual_seed(seed)
    lp = torch.log_softmax(torch.randn(b, t, v, generator=g), dim=-1)
    return lp, torch.tensor(lens), torch.tensor(ys), torch.tensor(ylens)


def test_unrestricted_equals_torch_ctc_loss_and_its_gradient():
    lp, lens, ys, ylens = _batch()
    # compared on the logits: torch's ctc_loss returns the logits' gradient as the log-probs' one
    logits1, logits2 = lp.clone().requires_grad_(True), lp.clone().requires_grad_(True)
    ours = restricted_ctc_loss(torch.log_softmax(logits1, -1), lens, ys, ylens, torch.zeros_like(ys))
    ref = torch.nn.functional.ctc_loss(torch.log_softmax(logits2, -1).transpose(0, 1), ys, lens, ylens,
                                       reduction="none")
    assert torch.allclose(ours, ref, atol=1e-4)
    ours.sum().backward()
    ref.sum().backward()
    assert torch.allclose(logits1.grad, logits2.grad, atol=1e-4)


def test_a_restriction_removes_alignments_and_keeps_gradients_finite():
    lp, lens, ys, ylens = _batch(seed=1)
    free = restricted_ctc_loss(lp, lens, ys, ylens, torch.zeros_like(ys))
    late = torch.tensor([[4, 6, 8], [3, 5, 0], [5, 0, 0]])
    lp1 = lp.clone().requires_grad_(True)
    held = restricted_ctc_loss(lp1, lens, ys, ylens, late)
    assert torch.all(held > free + 1e-3)
    held.sum().backward()
    assert torch.isfinite(lp1.grad).all()
    # no gradient reaches a forbidden (token, frame): token 4 of utterance 2 may not appear before frame 5
    assert torch.all(lp1.grad[2, :5, 4] == 0) and torch.any(lp1.grad[2, 5:7, 4] != 0)


def test_restricting_to_the_only_alignment_gives_its_probability():
    # 3 frames, one token that may only appear at frame 2: alignments "- - a" only
    lp = torch.log_softmax(torch.randn(1, 3, 4), dim=-1)
    loss = restricted_ctc_loss(lp, torch.tensor([3]), torch.tensor([[2]]), torch.tensor([1]), torch.tensor([[2]]))
    assert loss.item() == pytest.approx(-(lp[0, 0, 0] + lp[0, 1, 0] + lp[0, 2, 2]).item(), abs=1e-5)


def test_an_impossible_restriction_is_infinite():
    lp, lens, ys, ylens = _batch()
    out = restricted_ctc_loss(lp, lens, ys, ylens, torch.tensor([[0, 0, 12], [0, 0, 0], [0, 0, 0]]))
    assert torch.isinf(out[0]) and torch.isfinite(out[1:]).all()


def test_emission_bounds_follow_the_speech_span():
    rng = np.random.default_rng(0)
    feats = rng.normal(0.0, 0.1, (400, 80))       # 4 s of quiet
    feats[100:300] += 8.0                         # speech from 1 s to 3 s
    assert speech_span(feats) == pytest.approx((100, 299), abs=3)
    bounds = earliest_emission_frames(feats, ["▁a", "bc", "▁de", "f"], slack=2)
    # characters before each token: 0, 2, 4, 7 of 8 -> fbank frames 100, 150, 200, 275 -> /4 - 2
    assert bounds == pytest.approx([23, 35, 48, 66], abs=1)
    assert bounds == sorted(bounds)
