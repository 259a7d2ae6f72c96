"""Cutting long audio at pauses, and subtitles from timed words (no server)."""

from __future__ import annotations

import numpy as np

from asr_client.longform import Word, find_pieces
from asr_client.subtitles import cues, to_srt, to_vtt

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


def test_speech_without_a_pause_is_cut_at_its_quietest_point_and_silence_gives_nothing():
    rng = np.random.default_rng(1)
    long_speech = noise_burst(25.0, rng)
    pieces = find_pieces(long_speech, max_piece_s=10.0)
    assert len(pieces) >= 3 and pieces[0].start == 0 and pieces[-1].end == len(long_speech)
    assert all((p.end - p.start) / RATE <= 10.0 + 0.21 for p in pieces)
    assert all(a.end > b.start for a, b in zip(pieces, pieces[1:]))  # nothing between pieces is lost
    assert find_pieces(np.zeros(RATE * 5, np.float32)) == []


def test_subtitles_group_words_into_cues():
    words = [Word("hello", 0.5, 0.9), Word("there", 1.0, 1.4), Word("again", 3.0, 3.4)]
    got = cues(words)
    assert [(c.start, c.end, c.text) for c in got] == [(0.5, 1.4, "hello there"), (3.0, 3.4, "again")]
    assert to_srt(got) == ("1\n00:00:00,500 --> 00:00:01,400\nhello there\n\n"
                           "2\n00:00:03,000 --> 00:00:03,400\nagain\n")
    assert to_vtt(got).startswith("WEBVTT\n\n00:00:00.500 --> 00:00:01.400\nhello there\n")
    assert cues([Word("x", 3725.25, 3726.0)]) and to_srt(cues([Word("x", 3725.25, 3726.0)])).split("\n")[1] == (
        "01:02:05,250 --> 01:02:06,000")
