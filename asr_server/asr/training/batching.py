"""Which utterances make each training batch, in which order, and the padded tensors of a batch.

The order is a function of (seed, epoch) and a batch's augmentation of the ``random.Random`` it is given, so a
run resumed from its saved (epoch, position) sees the batches an uninterrupted run sees.
"""

from __future__ import annotations

import random
from typing import Iterator, Sequence

import torch

from ..features.fbank import fbank
from ..nn.model import IGNORE_ID
from ..units import Tokenizer
from .augment import BAND_LIMIT_RATES, SPEEDS, band_limit, lead_silence, spec_augment, speed_perturb
from .data import load_wav
from .restricted_ctc import earliest_emission_frames

NUM_MEL_BINS = 80  # fbank dimension the trained models take


def make_batch(items, tokenizer: Tokenizer, rng: random.Random, augment: bool, pad_multiple: int = 1,
               emission_slack: int | None = None, band_limit_share: float = 0.0, lead_silence_share: float = 0.0):
    """Padded (x (B, T, 80), x_lens (B,), y (B, L) with IGNORE_ID, y_lens (B,), earliest (B, L) or None); T is
    rounded up to a multiple of `pad_multiple` frames: fewer distinct shapes let oneDNN reuse its kernels (15-20%
    faster steps here). With `emission_slack`, earliest holds each token's earliest CTC emission frame.
    items: (utt, wav path, text) rows; rng draws the speed of each utterance, then (when their shares are not 0)
    its band limit and leading silence, then its SpecAugment masks."""
    feats, ys, bounds = [], [], []
    for _, path, text in items:
        wav = load_wav(path)
        if augment:
            wav = speed_perturb(wav, rng.choice(SPEEDS))
            if band_limit_share and rng.random() < band_limit_share:
                wav = band_limit(wav, rng.choice(BAND_LIMIT_RATES), rng)
            if lead_silence_share and rng.random() < lead_silence_share:
                wav = lead_silence(wav, rng.uniform(0.3, 1.5), rng)
        f = fbank(wav)
        if emission_slack is not None:
            bounds.append(earliest_emission_frames(f, tokenizer.text_to_tokens(text), emission_slack))
        feats.append(spec_augment(f, rng) if augment else f)
        ys.append(tokenizer.encode(text))
    xl = torch.tensor([f.shape[0] for f in feats])
    x = torch.zeros(len(feats), -(-int(xl.max()) // pad_multiple) * pad_multiple, NUM_MEL_BINS)
    for i, f in enumerate(feats):
        x[i, : f.shape[0]] = torch.from_numpy(f)
    yl = torch.tensor([len(y) for y in ys])
    y = pad_int_rows(ys, IGNORE_ID)
    earliest = pad_int_rows(bounds, 0) if emission_slack is not None else None
    return x, xl, y, yl, earliest


def pad_int_rows(rows: list[list[int]], fill: int) -> torch.Tensor:
    """(B, longest) int64, each row's values then ``fill``."""
    return torch.nn.utils.rnn.pad_sequence([torch.tensor(r, dtype=torch.int64) for r in rows], batch_first=True,
                                           padding_value=fill)


def epoch_order(seed: int, epoch: int, batch: int, seconds: Sequence[float]) -> list[list[int]]:
    """Batches of similar-length utterances (less padding), in a random order fixed by (seed, epoch).
    seconds: each utterance's duration (``utterance_seconds``). The transcript's length, the key before leg 12,
    is a poor proxy for speech with pauses such as the games' lines: its batches held far more padding (the
    figures are in models/open_en_wip/MODEL_CARD.md)."""
    rng = random.Random(seed * 1000 + epoch)
    idx = list(range(len(seconds)))
    rng.shuffle(idx)
    # sort within windows of 50 batches by duration: batches of neighbours, still a different mix each epoch
    win = batch * 50
    out = []
    for s in range(0, len(idx), win):
        block = sorted(idx[s:s + win], key=lambda i: seconds[i])
        out += [block[j:j + batch] for j in range(0, len(block), batch)]
    rng.shuffle(out)
    return out


def planned_batches(seconds: Sequence[float], seed: int, batch: int, epoch: int, start: int
                    ) -> Iterator[tuple[int, int, list[int]]]:
    """(epoch, position in epoch, utterance indices) from (epoch, start) on, epoch after epoch."""
    while True:
        order = epoch_order(seed, epoch, batch, seconds)
        for position in range(start, len(order)):
            yield epoch, position, order[position]
        epoch, start = epoch + 1, 0
