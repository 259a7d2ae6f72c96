"""Cutting long audio at pauses, stitching the pieces' words, and subtitles from timed words (no server: the
offline request is replaced by a decoder of tests/client/tones.py's tone words that reports word times)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from asr_client import longform, offline
from asr_client.longform import PAD_AFTER_S, PAD_BEFORE_S, Word, find_pieces, transcribe_long
from asr_client.subtitles import cues, to_srt, to_vtt
from tests.client.tones import BASE_HZ, STEP_HZ, WORDS, tones

RATE = 16000


def noise_burst(seconds: float, rng) -> np.ndarray:
    return (0.3 * rng.standard_normal(int(seconds * RATE))).astype(np.float32)


def quiet(seconds: float, rng) -> np.ndarray:
    return (0.001 * rng.standard_normal(int(seconds * RATE))).astype(np.float32)


def test_cuts_fall_in_pauses_and_pieces_stay_short():
    rng = np.random.default_rng(0)
    parts, spans, pos = [], [], 0.0
    for _ in range(12):  # 12 "sentences" of 3 s with 0.6 s pauses: 43 s
        parts += [noise_burst(3.0, rng), quiet(0.6, rng)]
        spans.append((pos, pos + 3.0))
        pos += 3.6
    samples = np.concatenate(parts)
    pieces = find_pieces(samples, max_piece_s=10.0)
    assert all((p.end - p.start) / RATE <= 10.0 + 0.21 for p in pieces)
    # every sentence lies whole inside one piece, and every piece boundary is in a pause
    for a, b in spans:
        assert any(p.start / RATE <= a and b <= p.end / RATE for p in pieces)
    assert len(pieces) >= 5


def test_pieces_keep_more_pause_after_the_speech_than_before_and_never_overlap_at_a_pause():
    rng = np.random.default_rng(2)
    # speech 0.5-2.5 s, pause of 2 s, speech 4.5-6.5 s, pause of 0.6 s, speech 7.1-9.1 s, 1 s of quiet
    samples = np.concatenate([quiet(0.5, rng), noise_burst(2.0, rng), quiet(2.0, rng), noise_burst(2.0, rng),
                              quiet(0.6, rng), noise_burst(2.0, rng), quiet(1.0, rng)])
    pieces = [(p.start / RATE, p.end / RATE) for p in find_pieces(samples)]
    assert len(pieces) == 3
    (a0, b0), (a1, b1), (a2, b2) = pieces
    # a long pause: each side takes its full pad (a CTC model emits a word's tokens after the word)
    assert a0 == pytest.approx(0.5 - PAD_BEFORE_S, abs=0.03) and b0 == pytest.approx(2.5 + PAD_AFTER_S, abs=0.03)
    assert a1 == pytest.approx(4.5 - PAD_BEFORE_S, abs=0.03) and b1 <= a2
    # a pause shorter than both pads together is shared, the piece before it taking the larger part
    assert b1 - 6.5 > a2 - b1 - 0.03 and a2 < 7.1
    assert b2 == pytest.approx(9.1 + PAD_AFTER_S, abs=0.03)


def test_a_click_between_pauses_is_not_a_piece():
    rng = np.random.default_rng(3)
    samples = np.concatenate([noise_burst(2.0, rng), quiet(1.0, rng), noise_burst(0.1, rng), quiet(1.0, rng),
                              noise_burst(2.0, rng)])
    assert len(find_pieces(samples)) == 2


def test_speech_without_a_pause_is_cut_at_its_quietest_point_and_silence_gives_nothing():
    rng = np.random.default_rng(1)
    long_speech = noise_burst(25.0, rng)
    pieces = find_pieces(long_speech, max_piece_s=10.0)
    assert len(pieces) >= 3 and pieces[0].start == 0 and pieces[-1].end == len(long_speech)
    assert all((p.end - p.start) / RATE <= 10.0 + 2 * longform.CUT_CONTEXT_S + 0.03 for p in pieces)
    # neighbours overlap (each hears the words around the cut whole) and every sample is reported by one
    assert all(a.end > b.start for a, b in zip(pieces, pieces[1:]))
    assert all(a.keep_end == b.keep_start > 0 for a, b in zip(pieces, pieces[1:]))
    centres = range(0, len(long_speech), 160)
    assert all(sum(p.keeps(c) for p in pieces) == 1 for c in centres)
    assert find_pieces(np.zeros(RATE * 5, np.float32)) == []


def tone_words(samples: np.ndarray) -> list[dict]:
    """Words of a tone recording with times: runs of 10 ms frames whose strongest bin is one digit's tone."""
    frame = RATE // 100  # 10 ms: FFT bins 100 Hz apart, one per digit
    n = len(samples) // frame
    spectra = np.abs(np.fft.rfft(samples[: n * frame].reshape(n, frame), axis=1))
    digits = np.where(spectra.max(axis=1) > 5.0, np.argmax(spectra, axis=1) - int(BASE_HZ // STEP_HZ), -1)
    words, start = [], 0
    for i in range(1, n + 1):
        if i == n or digits[i] != digits[start]:
            if 0 <= digits[start] < len(WORDS) and i - start >= 10:
                words.append({"word": WORDS[digits[start]], "start": start / 100, "end": i / 100})
            start = i
    return words


@pytest.fixture
def tone_recognizer(monkeypatch):
    """offline.recognize replaced: each piece decoded as tone words with times, as DETAILS would carry them."""
    sent = []

    async def recognize(client, samples, model, request_id="", timeout_s=None, parameters=None, details=False):
        sent.append(len(samples))
        words = tone_words(samples)
        return offline.OfflineResult(" ".join(w["word"] for w in words), 0.0, {"words": words})

    monkeypatch.setattr(offline, "recognize", recognize)
    return sent


def no_repeats(count: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    out = [WORDS[0]]
    while len(out) < count:
        word = WORDS[rng.integers(len(WORDS))]
        if word != out[-1]:  # two equal tones in a row would read as one word
            out.append(word)
    return out


def test_words_of_pieces_cut_inside_speech_are_stitched_without_loss_or_repeats(tone_recognizer):
    words = no_repeats(120, seed=4)  # 30 s of tones, no pause: cut inside speech, pieces overlap
    samples = tones(" ".join(words), seed=4)
    result = asyncio.run(transcribe_long(None, samples, max_piece_s=8.0))
    assert len(tone_recognizer) >= 4  # the audio went in several pieces
    assert result.text == " ".join(words)
    assert [w.word for w in result.words] == words
    starts = np.array([w.start for w in result.words])
    assert np.abs(starts - 0.25 * np.arange(len(words))).max() < 0.02  # times in the file's clock


def test_sentences_between_pauses_come_back_whole_and_in_order(tone_recognizer):
    rng = np.random.default_rng(5)
    sentences = [" ".join(no_repeats(8, seed=s)) for s in range(6)]
    parts = []
    for text in sentences:
        parts += [tones(text, seed=len(parts)), quiet(0.8, rng)]
    result = asyncio.run(transcribe_long(None, np.concatenate(parts)))
    assert len(result.pieces) == len(sentences)
    assert [text for _, _, text in result.pieces] == sentences
    assert result.text == " ".join(sentences)


def test_subtitles_group_words_into_cues():
    words = [Word("hello", 0.5, 0.9), Word("there", 1.0, 1.4), Word("again", 3.0, 3.4)]
    got = cues(words)
    assert [(c.start, c.end, c.text) for c in got] == [(0.5, 1.4, "hello there"), (3.0, 3.4, "again")]
    assert to_srt(got) == ("1\n00:00:00,500 --> 00:00:01,400\nhello there\n\n"
                           "2\n00:00:03,000 --> 00:00:03,400\nagain\n")
    assert to_vtt(got).startswith("WEBVTT\n\n00:00:00.500 --> 00:00:01.400\nhello there\n")
    assert cues([Word("x", 3725.25, 3726.0)]) and to_srt(cues([Word("x", 3725.25, 3726.0)])).split("\n")[1] == (
        "01:02:05,250 --> 01:02:06,000")


def noisy_sentences(snr_db: float, seed: int = 0) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """36 spoken sentences of tests/data/demo_utts, 0.7-1.5 s apart, in steady noise at ``snr_db``; and where
    each sentence lies (samples)."""
    from asr_client.audio import load_audio
    from tests.conftest import ROOT

    folder = ROOT / "tests" / "data" / "demo_utts"
    keys = [line.split()[0] for line in (folder / "wav.scp").read_text().splitlines() if line.strip()]
    rng = np.random.default_rng(seed)
    parts, spans, pos = [], [], 0
    for key in (keys * 3)[:36]:
        speech = load_audio(folder / f"{key}.flac").samples
        gap = np.zeros(int(rng.uniform(0.7, 1.5) * RATE), np.float32)
        parts += [gap, speech]
        spans.append((pos + gap.size, pos + gap.size + speech.size))
        pos += gap.size + speech.size
    clean = np.concatenate(parts)
    power = np.mean(np.concatenate([clean[a:b] for a, b in spans]) ** 2)
    noise = np.convolve(rng.normal(size=clean.size), np.ones(8) / 8, mode="same")
    noise *= np.sqrt(power / 10 ** (snr_db / 10) / np.mean(noise ** 2))
    return (clean + noise).astype(np.float32), spans


def dropped(pieces, spans) -> int:
    """Sentences that no piece holds at least half of."""
    return sum(1 for a, b in spans if max([min(b, p.end) - max(a, p.start) for p in pieces] + [0]) < (b - a) / 2)


@pytest.mark.skipif(longform.default_vad() is None, reason="silero-vad is not installed (pip install silero-vad)")
def test_sentences_the_energy_floor_loses_in_noise_are_kept_with_the_vad():
    samples, spans = noisy_sentences(snr_db=15)
    assert dropped(find_pieces(samples), spans) >= 1  # the energy floor alone calls quiet sentences pauses
    speech = longform.speech_frames(samples)
    assert dropped(find_pieces(samples, speech=speech), spans) == 0


def test_refused_and_empty_pieces_are_reported_with_their_times_and_progress_is_told():
    rng = np.random.default_rng(7)
    parts = []
    for _ in range(4):  # four "sentences" between pauses: four pieces
        parts += [quiet(0.8, rng), noise_burst(2.0, rng)]
    samples = np.concatenate(parts)

    async def recognize(piece, request_id, parameters):
        if request_id == "piece-1":
            return offline.OfflineError("Exceeds maximum queue size")
        text = "" if request_id == "piece-2" else request_id
        return offline.OfflineResult(text, 0.0, {"words": [{"word": text, "start": 0.5, "end": 1.0}] if text else []})

    seen = []
    result = asyncio.run(longform.transcribe_pieces(recognize, samples, on_progress=lambda d, t: seen.append((d, t)),
                                                    use_vad=False))
    assert result.text == "piece-0 piece-3"
    reasons = [why for _, _, why in result.untranscribed]
    assert reasons == ["refused: Exceeds maximum queue size", "no words recognised"]
    (s1, e1, _), (s2, e2, _) = result.untranscribed
    assert 3.0 < s1 < e1 < s2 < e2 < 9.5  # the second (3.6-5.6 s) and third (6.4-8.4 s) sentences, padded
    assert seen[0] == (0, 4) and seen[-1] == (4, 4) and [d for d, _ in seen] == [0, 1, 2, 3, 4]
