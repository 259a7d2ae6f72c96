"""Token/word timestamps from the CTC alignment of a hypothesis over top-k frames, and the DETAILS dict."""

from __future__ import annotations

import numpy as np
import pytest

from asr_server.asr.decoding.alignment import TokenTime, align_tokens, group_words, word_times
from asr_server.asr.decoding.details import hypothesis_details, wants_details
from asr_server.asr.units import SymbolTable, Tokenizer

BPE = SymbolTable(["<blank>", "<unk>", "▁can", "▁you", "▁c", "h", "airs", "<sos/eos>"])
CHARS = SymbolTable(["<blank>", "<unk>", "a", "b", "▁", "<sos/eos>"])


def spikes(n_frames: int, at: dict[int, int], k: int = 3, peak: float = 0.9):
    """(T, K) top-k frames: blank everywhere, token at[t] the best at frame t (probability `peak`)."""
    log_probs = np.full((n_frames, k), np.log(0.01))
    ids = np.tile(np.arange(1, k + 1), (n_frames, 1))
    ids[:, 0] = 0
    log_probs[:, 0] = np.log(0.98)
    for t, token in at.items():
        ids[t] = [token, 0, 1]
        log_probs[t] = [np.log(peak), np.log(1 - peak - 0.01), np.log(0.01)]
    return log_probs, ids


def test_tokens_are_placed_on_their_spikes_and_grouped_into_words():
    log_probs, ids = spikes(30, {5: 2, 9: 3, 15: 4, 16: 5, 18: 6})
    times = align_tokens(log_probs, ids, [2, 3, 4, 5, 6], BPE, frame_seconds=0.04, offset_seconds=1.0)
    assert [round(t.start, 3) for t in times] == [1.2, 1.36, 1.6, 1.64, 1.72]
    assert [round(t.end, 3) for t in times] == [1.24, 1.4, 1.64, 1.68, 1.76]
    assert all(abs(t.confidence - 0.9) < 1e-9 for t in times)
    words = group_words(times)
    assert [(w.word, round(w.start, 3), round(w.end, 3)) for w in words] == [
        ("can", 1.2, 1.24), ("you", 1.36, 1.4), ("chairs", 1.6, 1.76)]


def test_a_repeated_token_needs_a_blank_between_and_holds_its_frames():
    # "a a" as character units: a (frames 2-4), blank, a (frame 7): two tokens, each over its own frames
    log_probs, ids = spikes(12, {2: 2, 3: 2, 4: 2, 7: 2})
    times = align_tokens(log_probs, ids, [2, 2], CHARS, frame_seconds=0.04)
    assert [(round(t.start / 0.04), round(t.end / 0.04)) for t in times] == [(2, 5), (7, 8)]


def test_character_units_split_words_on_the_space_unit():
    log_probs, ids = spikes(20, {1: 2, 3: 3, 6: 4, 9: 2})
    words = group_words(align_tokens(log_probs, ids, [2, 3, 4, 2], CHARS, frame_seconds=0.04))
    assert [w.word for w in words] == ["ab", "a"]


def test_a_token_outside_every_top_k_still_aligns_with_a_low_confidence():
    log_probs, ids = spikes(10, {4: 2})  # "airs" (6) is in no frame's top-3
    times = align_tokens(log_probs, ids, [2, 6], BPE, frame_seconds=0.04)
    assert times[0].confidence > 0.8 and times[1].confidence < 1e-3


def test_more_tokens_than_frames_is_an_error_and_nothing_to_align_is_empty():
    log_probs, ids = spikes(2, {})
    with pytest.raises(ValueError, match="cannot be aligned"):
        align_tokens(log_probs, ids, [2, 3, 4], BPE, frame_seconds=0.04)
    assert align_tokens(log_probs, ids, [], BPE, frame_seconds=0.04) == []


def test_details_dict_has_words_tokens_and_nbest():
    tokenizer = Tokenizer(BPE)
    log_probs, ids = spikes(20, {3: 2, 8: 3})
    info = hypothesis_details(tokenizer, (2, 3), log_probs, ids, 0.04, 0.0, [((2, 3), -0.5), ((2,), -3.0)])
    assert info["text"] == "can you"
    assert [w["word"] for w in info["words"]] == ["can", "you"]
    # spikes at 0.12 and 0.32 s: no pause between, one boundary at the middle of 0.16 and 0.32
    assert info["words"][0] == {"word": "can", "start": 0.12, "end": 0.24, "confidence": 0.9}
    assert info["words"][1]["start"] == 0.24 and info["words"][1]["end"] == 0.36
    assert [t["token"] for t in info["tokens"]] == ["▁can", "▁you"]
    assert info["nbest"] == [{"text": "can you", "score": -0.5}, {"text": "can", "score": -3.0}]
    assert set(hypothesis_details(tokenizer, (2,), None, None, 0.04)) == {"text"}


@pytest.mark.parametrize("value, expected", [(True, True), ("1", True), ("true", True), (False, False),
                                             ("0", False), (None, False)])
def test_details_parameter(value, expected):
    assert wants_details({"details": value}) is expected
    assert wants_details({}) is False


def test_the_models_emission_lag_moves_times_earlier_but_not_before_the_segment():
    log_probs, ids = spikes(30, {2: 2, 9: 3})
    times = align_tokens(log_probs, ids, [2, 3], BPE, frame_seconds=0.04, offset_seconds=1.0, shift=(0.2, 0.1))
    assert [(round(t.start, 3), round(t.end, 3)) for t in times] == [(1.0, 1.02), (1.16, 1.3)]


def timed(*spans):
    """("▁word", start, end) -> TokenTime of a whole-word unit."""
    return [TokenTime(i, unit, a, b, 0.9) for i, (unit, a, b) in enumerate(spans)]


def test_words_without_a_pause_share_one_boundary_and_a_word_after_a_pause_starts_earlier():
    tokens = timed(("▁can", 1.30, 1.40), ("▁you", 1.60, 1.70), ("▁go", 1.64, 1.90), ("▁home", 3.0, 3.2))
    words = word_times(tokens, onset_shift=0.15, floor=1.0)
    got = [(w.word, round(w.start, 3), round(w.end, 3)) for w in words]
    assert got == [
        ("can", 1.15, 1.5),  # first of the segment: onset lag; its end and the next start meet at 1.5
        ("you", 1.5, 1.67),  # estimates that overlap (1.64 < 1.70) meet in the middle too
        ("go", 1.67, 1.9),
        ("home", 2.85, 3.2),  # 1.1 s after "go": a pause, so its own start, with the onset lag
    ]
    # the onset lag never takes a word before the segment's start or into the word before it
    assert word_times(timed(("▁a", 1.05, 1.1)), onset_shift=0.3, floor=1.0)[0].start == 1.0
    assert word_times(timed(("▁a", 1.0, 1.1), ("▁b", 1.7, 1.8)), onset_shift=0.7)[1].start == 1.1
