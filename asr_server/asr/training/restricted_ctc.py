"""CTC loss whose alignments may not emit a token before a given frame, and those frames estimated from audio.

Why: trained on template sentences with full context, the demo model learnt to write most of a sentence in
its first encoder frames, before the words are spoken (see models/demo_en/MODEL_CARD.md, "Streaming"). Streaming,
the first chunk then guesses words it has not heard. Forbidding each token's emission before (roughly) the
time it is spoken removes those alignments from the loss, in the spirit of alignment-restricted CTC/RNN-T.
Only a lower bound is imposed: late emission is allowed (it costs latency, not accuracy).

torch's ``ctc_loss`` takes no per-token time limits and no package the project uses does, so the forward
(alpha) recursion is written here in log space; autograd gives the gradient.
"""

from __future__ import annotations

import numpy as np
import torch

# A finite stand-in for log(0): with -inf, logsumexp over unreachable states has NaN gradients.
NEG_INF = -1e30
UNREACHABLE = -1e29  # a total log-likelihood below this means no allowed alignment


def restricted_ctc_loss(log_probs: torch.Tensor, lengths: torch.Tensor, targets: torch.Tensor,
                        target_lengths: torch.Tensor, earliest: torch.Tensor, blank: int = 0) -> torch.Tensor:
    """Per-utterance negative log-likelihood (B,) over the CTC alignments in which target token j is first
    emitted no earlier than frame ``earliest[b, j]``.

    log_probs (B, T, V) log-softmax; lengths (B,) valid frames; targets (B, L) (padding: any id);
    target_lengths (B,); earliest (B, L) int frame indices (0 everywhere = plain CTC). An utterance with no
    allowed alignment gets +inf, as ``torch.nn.functional.ctc_loss`` does.
    """
    b, t_max, _ = log_probs.shape
    L = targets.size(1)
    s = 2 * L + 1
    device = log_probs.device
    targets = targets.clamp(min=0)
    # extended label sequence: blank, y1, blank, y2, ..., yL, blank
    ext = torch.full((b, s), blank, dtype=torch.int64, device=device)
    ext[:, 1::2] = targets
    state_earliest = torch.zeros(b, s, dtype=torch.int64, device=device)
    state_earliest[:, 1::2] = earliest.to(torch.int64)
    # skipping the blank between two labels is allowed unless they are equal
    can_skip = torch.zeros(b, s, dtype=torch.bool, device=device)
    can_skip[:, 3::2] = targets[:, 1:] != targets[:, :-1]
    n_states = 2 * target_lengths + 1
    in_range = torch.arange(s, device=device).unsqueeze(0) < n_states.unsqueeze(1)

    emit = torch.gather(log_probs.float(), 2, ext.unsqueeze(1).expand(b, t_max, s))        # (B, T, S)
    frames = torch.arange(t_max, device=device).view(1, t_max, 1)
    emit = emit.masked_fill((frames < state_earliest.unsqueeze(1)) | ~in_range.unsqueeze(1), NEG_INF)

    alpha = torch.full((b, s), NEG_INF, device=device)
    alpha[:, :2] = emit[:, 0, :2]
    neg = torch.full((b, 1), NEG_INF, device=device)
    for t in range(1, t_max):
        stay = alpha
        step = torch.cat([neg, alpha[:, :-1]], dim=1)
        skip = torch.cat([neg, neg, alpha[:, :-2]], dim=1).masked_fill(~can_skip, NEG_INF)
        new = torch.logsumexp(torch.stack([stay, step, skip]), dim=0) + emit[:, t]
        alpha = torch.where((t < lengths).unsqueeze(1), new, alpha)  # finished utterances keep their alpha
    last = n_states - 1
    ends = torch.stack([alpha.gather(1, last.unsqueeze(1)).squeeze(1),
                        alpha.gather(1, (last - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
                        .masked_fill(target_lengths == 0, NEG_INF)])
    logp = torch.logsumexp(ends, dim=0)
    return torch.where(logp > UNREACHABLE, -logp, torch.full_like(logp, float("inf")))


def speech_span(feats: np.ndarray, share: float = 0.35, smooth: int = 5) -> tuple[int, int]:
    """First and last fbank frame of speech: the mean log-mel energy, smoothed, above the noise floor (10th
    percentile) by ``share`` of the distance to the loud level (95th percentile). Robust to the corpus's
    added noise because both ends are measured per utterance."""
    energy = np.convolve(feats.mean(axis=1), np.ones(smooth) / smooth, mode="same")
    floor, loud = np.percentile(energy, 10), np.percentile(energy, 95)
    speech = np.nonzero(energy > floor + share * (loud - floor))[0]
    if speech.size == 0:
        return 0, len(energy) - 1
    return int(speech[0]), int(speech[-1])


def earliest_emission_frames(feats: np.ndarray, tokens: list[str], slack: int, subsampling: int = 4
                             ) -> list[int]:
    """Encoder frame before which each token may not be emitted: its start if the speech span is spread over
    the tokens in proportion to their characters, minus ``slack`` encoder frames for the estimate's error."""
    first, last = speech_span(feats)
    chars = [max(len(tok), 1) for tok in tokens]
    before = np.concatenate([[0], np.cumsum(chars)[:-1]]) / max(sum(chars), 1)
    start = first + before * (last - first)
    return [max(int(f) // subsampling - slack, 0) for f in start]
