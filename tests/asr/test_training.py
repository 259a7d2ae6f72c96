"""The training helpers scripts/train.py runs on: batch order, augmentation, the step schedule, batch tensors.
A resumed run must draw what an uninterrupted one draws, so every draw here is checked to depend only on its
seed and step (tests/scripts/test_train.py checks the whole run: resumed weights equal uninterrupted ones)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import soundfile as sf

torch = pytest.importorskip("torch", reason="the training helpers need torch")

from asr_server.asr.nn.model import IGNORE_ID  # noqa: E402
from asr_server.asr.training.augment import (  # noqa: E402
    LSB, band_limit, lead_silence, requantise, speed_perturb, spec_augment)
from asr_server.asr.training.batching import epoch_order, make_batch, planned_batches  # noqa: E402
from asr_server.asr.training.data import read_data_dir, utterance_seconds  # noqa: E402
from asr_server.asr.training.schedule import FULL_CONTEXT, attention_chunk, lr_at  # noqa: E402
from asr_server.asr.units import SymbolTable, Tokenizer  # noqa: E402

SECONDS = [0.5 + (i * 7919 % 23) / 5 for i in range(23)]  # 23 distinct durations, 0.5-4.9 s


def test_an_epoch_holds_every_utterance_once_in_batches_fixed_by_seed_and_epoch():
    order = epoch_order(seed=5, epoch=2, batch=4, seconds=SECONDS)
    assert sorted(i for batch in order for i in batch) == list(range(len(SECONDS)))
    assert all(1 <= len(batch) <= 4 for batch in order)
    assert order == epoch_order(seed=5, epoch=2, batch=4, seconds=SECONDS)
    assert order != epoch_order(seed=5, epoch=3, batch=4, seconds=SECONDS)


def test_batches_hold_utterances_of_neighbouring_durations():
    """Within a window of 50 batches (all 23 here) a batch takes the next utterances by duration, so no two
    batches' duration ranges overlap: a batch pads to its longest member only a little."""
    spans = sorted((min(SECONDS[i] for i in batch), max(SECONDS[i] for i in batch))
                   for batch in epoch_order(seed=5, epoch=0, batch=4, seconds=SECONDS))
    assert all(high < next_low for (_, high), (next_low, _) in zip(spans, spans[1:]))


def test_utterance_seconds_reads_each_file_header_once(tmp_path):
    for name, samples in (("a", 8000), ("b", 24000)):
        sf.write(tmp_path / f"{name}.wav", np.zeros(samples, np.float32), 16000)
    rows = [("u1", str(tmp_path / "a.wav"), "x"), ("u2", str(tmp_path / "b.wav"), "y"),
            ("u1_r2", str(tmp_path / "a.wav"), "x")]
    assert utterance_seconds(rows) == [0.5, 1.5, 0.5]


def test_planned_batches_resume_at_a_saved_position():
    whole = planned_batches(SECONDS, seed=1, batch=4, epoch=0, start=0)
    plan = [next(whole) for _ in range(15)]  # 6 batches per epoch: crosses two epoch boundaries
    assert [p[0] for p in plan] == [0] * 6 + [1] * 6 + [2] * 3
    epoch, position, _ = plan[8]
    resumed = planned_batches(SECONDS, seed=1, batch=4, epoch=epoch, start=position)
    assert [next(resumed) for _ in range(7)] == plan[8:]


def test_attention_chunk_is_full_context_in_the_curriculum_then_drawn_per_step():
    args = dict(seed=2026, curriculum_steps=10, full_context_share=0.3, chunk_range=(8, 24))
    assert {attention_chunk(step, **args) for step in range(10)} == {FULL_CONTEXT}
    draws = [attention_chunk(step, **args) for step in range(10, 2010)]
    assert draws == [attention_chunk(step, **args) for step in range(10, 2010)]
    chunks = [d for d in draws if d != FULL_CONTEXT]
    assert 0.25 < 1 - len(chunks) / len(draws) < 0.35
    assert min(chunks) == 8 and max(chunks) == 24


def test_lr_warms_up_linearly_then_decays_as_inverse_square_root():
    assert lr_at(0, 2e-3, 100) == lr_at(1, 2e-3, 100) == pytest.approx(2e-5)
    assert lr_at(100, 2e-3, 100) == pytest.approx(2e-3)
    assert lr_at(400, 2e-3, 100) == pytest.approx(1e-3)


def test_augmentation_keeps_shapes_and_depends_only_on_its_generator():
    wav = np.sin(np.arange(16000) / 10).astype(np.float32)
    assert speed_perturb(wav, 1.0) is wav
    assert abs(speed_perturb(wav, 1.1).size - 16000 / 1.1) <= 1 and speed_perturb(wav, 0.9).dtype == np.float32
    feats = np.ones((200, 80), np.float32)
    a, b = spec_augment(feats, random.Random(3)), spec_augment(feats, random.Random(3))
    assert a.shape == feats.shape and np.array_equal(a, b) and (feats == 1).all()
    assert 0 < (a == 0).mean() < 0.6


def test_band_limit_empties_the_upper_band_but_leaves_16_bit_noise_there():
    t = np.arange(16000) / 16000
    wav = (0.3 * np.sin(2 * np.pi * 1000 * t) + 0.3 * np.sin(2 * np.pi * 6000 * t)).astype(np.float32)
    for rate, gone in ((8000, 6000), (11025, 6000)):
        out = band_limit(wav, rate, random.Random(1))
        assert out.size == wav.size and out.dtype == np.float32
        spectrum = np.abs(np.fft.rfft(out))
        assert spectrum[gone] < 1e-3 * spectrum[1000]  # the 6 kHz tone is gone, the 1 kHz one kept
        top = spectrum[int(rate / 2) + 300:]
        assert top.min() > 0  # dither: the empty band is not exactly zero, as in any 16-bit recording
        assert np.array_equal(out, band_limit(wav, rate, random.Random(1)))
    q = requantise(np.zeros(1000, np.float32), random.Random(2))
    assert np.allclose(q / LSB, np.round(q / LSB)) and np.abs(q).max() <= LSB and q.any()


def test_lead_silence_prepends_quiet_samples():
    wav = np.full(100, 0.5, np.float32)
    out = lead_silence(wav, 0.5, random.Random(0))
    assert out.size == 8100 and np.array_equal(out[8000:], wav) and np.abs(out[:8000]).max() <= LSB


def test_make_batch_pads_features_and_labels(tmp_path):
    rate = 16000
    lines = []
    for i, seconds in enumerate((0.5, 0.8)):
        path = tmp_path / f"u{i}.wav"
        sf.write(path, (0.1 * np.sin(np.arange(int(seconds * rate)) / 7)).astype(np.float32), rate)
        lines.append((f"u{i}", str(path)))
    (tmp_path / "wav.scp").write_text("".join(f"{u} {p}\n" for u, p in lines))
    (tmp_path / "text").write_text("u0 ab\nu1 abc\nu9 missing\n")
    rows = read_data_dir(tmp_path)
    assert [r[0] for r in rows] == ["u0", "u1"]
    tokenizer = Tokenizer(SymbolTable.from_units(["a", "b", "c"]))
    x, xl, y, yl, earliest = make_batch(rows, tokenizer, random.Random(0), augment=False, pad_multiple=64)
    assert xl.tolist() == [48, 78] and x.shape == (2, 128, 80)
    assert x[0, 48:].abs().sum() == 0 and x[1, :78].abs().sum() > 0
    assert yl.tolist() == [2, 3] and y[0, 2] == IGNORE_ID and earliest is None
    *_, earliest = make_batch(rows, tokenizer, random.Random(0), augment=True, emission_slack=2)
    assert earliest.shape == (2, 3)
