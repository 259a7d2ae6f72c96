"""Windowing and the streaming scorer's bookkeeping, with a fake encoder (no model, no server)."""

from __future__ import annotations

import numpy as np
import pytest

from asr_server.asr.serving.pipeline import DecodingSettings
from asr_server.asr.serving.streaming_scorer import ChunkTranscript, EncoderResult, StreamChunk, StreamingScorer
from asr_server.asr.serving.stream_state import FrameWindower
from asr_server.asr.windows import WindowConfig
from asr_server.asr.units import SymbolTable, Tokenizer

WINDOW = WindowConfig(chunk_size=4, subsampling=4, right_context=6)  # window 19 frames, stride 16
DIM = 3
VOCAB = ["<blank>", "<unk>", "a", "b", "c", "▁", "<sos/eos>"]


def test_window_geometry_matches_wenet():
    wenet = WindowConfig()
    assert (wenet.window, wenet.stride) == (67, 64)


@pytest.mark.parametrize("chunking", [[1000], [1] * 100, [7, 30, 2, 61], [19, 16, 16, 16]])
def test_windows_do_not_depend_on_how_frames_arrive(chunking):
    rng = np.random.default_rng(0)
    frames = rng.normal(size=(sum(chunking), DIM)).astype(np.float32)
    windower = FrameWindower(WINDOW, DIM)
    got, pos = [], 0
    for size in chunking:
        got += windower.push(frames[pos:pos + size])
        pos += size
    total = frames.shape[0]
    starts = range(0, total - WINDOW.window + 1, WINDOW.stride)
    assert len(got) == len(starts)
    for window, start in zip(got, starts):
        np.testing.assert_array_equal(window, frames[start:start + WINDOW.window])
    last = windower.finish()
    left = total - len(starts) * WINDOW.stride
    if left >= WINDOW.min_last_frames:
        padded, valid = last
        assert valid == left
        np.testing.assert_array_equal(padded[:valid], frames[total - left:])
        assert not padded[valid:].any()
    else:
        assert last is None


class FakeEncoder:
    """Emits, for every window, one encoder frame per chunk whose top token is the window's mean sign."""

    def __init__(self):
        self.jobs = []

    def __call__(self, jobs):
        self.jobs.append([(j.key, j.start, j.end, j.valid) for j in jobs])
        results = []
        for job in jobs:
            token = 2 + int(job.window[: max(job.valid, 1)].mean() > 0)  # "a" or "b"
            t = WINDOW.chunk_size
            log_probs = np.full((t, 2), -5.0, np.float32)
            ids = np.zeros((t, 2), np.int64)
            log_probs[0], ids[0] = (-0.01, -5.0), (token, 0)  # first frame: the token, then blanks
            log_probs[1:, 0], ids[1:, 0] = -0.01, 0
            valid = min(t, (job.valid - 1) // WINDOW.subsampling) if job.valid else 0
            results.append(EncoderResult(log_probs, ids, np.ones((t, 8), np.float32), valid))
        return results


def run_stream(scorer, key, frames, chunking, encoder):
    texts, pos = [], 0
    for index, size in enumerate(chunking):
        last = index == len(chunking) - 1
        chunk = StreamChunk(key, frames[pos:pos + size], start=index == 0, end=last)
        texts += [answer.text for answer in scorer.step([chunk], encoder)]
        pos += size
    return texts


def make_scorer():
    tokenizer = Tokenizer(SymbolTable(VOCAB))
    settings = DecodingSettings(beam_size=2, sos=6, eos=6, rescoring=False)
    return StreamingScorer(tokenizer, settings, WINDOW, DIM, encoder_dim=8)


def test_streaming_transcript_is_independent_of_chunking_and_state_is_freed():
    rng = np.random.default_rng(1)
    frames = rng.normal(size=(150, DIM)).astype(np.float32)
    frames[:40] += 3  # windows over the start read as "a", later ones mostly "b"
    finals = set()
    for chunking in ([150], [10] * 15, [50, 3, 97]):
        scorer, encoder = make_scorer(), FakeEncoder()
        texts = run_stream(scorer, 7, frames, chunking, encoder)
        finals.add(texts[-1])
        flat = [job for round_jobs in encoder.jobs for job in round_jobs]
        assert flat[0][1] is True and sum(j[1] for j in flat) == 1  # START on the first window only
        assert flat[-1][2] is True and sum(j[2] for j in flat) == 1  # END on the last one only
        assert len(scorer.streams) == 0
    assert len(finals) == 1 and finals.pop() != ""


def test_sequences_in_one_batch_share_encoder_rounds():
    scorer, encoder = make_scorer(), FakeEncoder()
    frames = np.ones((40, DIM), np.float32)
    chunks = [StreamChunk(1, frames, True, False), StreamChunk(2, frames[:20], True, False)]
    scorer.step(chunks, encoder)
    # Sequence 1 has two windows, sequence 2 one: round 0 holds both, round 1 only sequence 1.
    assert [[key for key, *_ in round_jobs] for round_jobs in encoder.jobs] == [[1, 2], [1]]
    assert set(scorer.streams) == {1, 2}
    scorer.step([StreamChunk(2, frames[:0], False, True)], encoder)
    assert set(scorer.streams) == {1}


def test_idle_streams_are_dropped(monkeypatch):
    scorer, encoder = make_scorer(), FakeEncoder()
    scorer.step([StreamChunk(1, np.ones((5, DIM), np.float32), True, False)], encoder)
    assert 1 in scorer.streams
    scorer.streams.get(1).last_seen -= scorer.streams.idle_seconds + 1
    scorer.step([StreamChunk(2, np.ones((5, DIM), np.float32), True, False)], encoder)
    assert set(scorer.streams) == {2}


class FailingEncoder(FakeEncoder):
    """FakeEncoder whose window number `fail_at` of sequence `key` fails (as an ORT Gather error did)."""

    def __init__(self, key, fail_at):
        super().__init__()
        self.key, self.fail_at, self.seen = key, fail_at, 0

    def __call__(self, jobs):
        results = super().__call__(jobs)
        for index, job in enumerate(jobs):
            if job.key == self.key:
                if self.seen == self.fail_at:
                    results[index] = RuntimeError("Gather: indices element out of data bounds")
                self.seen += 1
        return results


def test_a_failed_chunk_fails_its_stream_until_end_and_never_restarts_it_silently():
    from asr_server.asr.serving.streaming_scorer import StreamFailed

    scorer, encoder = make_scorer(), FailingEncoder(key=1, fail_at=1)
    frames = np.ones((16, DIM), np.float32)  # one window (stride 16) per chunk
    opening = np.ones((WINDOW.window, DIM), np.float32)
    first = scorer.step([StreamChunk(1, opening, True, False), StreamChunk(2, opening, True, False)], encoder)
    assert all(isinstance(t, ChunkTranscript) for t in first)
    second = scorer.step([StreamChunk(1, frames, False, False), StreamChunk(2, frames, False, False)], encoder)
    assert isinstance(second[0], StreamFailed) and "Gather" in second[0].message
    assert isinstance(second[1], ChunkTranscript)  # the other stream of the batch goes on
    # the failed stream's encoder sequence is closed at once (an END-only window), not left to its idle limit
    assert encoder.jobs[-1] == [(1, False, True, 0)]
    later = scorer.step([StreamChunk(1, frames, False, False)], encoder)[0]
    assert isinstance(later, StreamFailed) and "failed on an earlier chunk" in later.message
    end = scorer.step([StreamChunk(1, frames, False, True)], encoder)[0]
    assert isinstance(end, StreamFailed)  # END never answers "successfully" with part of the audio
    assert 1 not in scorer.failed and 1 not in scorer.streams  # END frees it
    restarted = scorer.step([StreamChunk(1, frames, True, True)], encoder)[0]
    assert isinstance(restarted, ChunkTranscript)  # a new START begins a new stream
    assert set(scorer.streams) == {2}


def test_a_chunk_without_start_for_an_unknown_stream_is_an_error():
    from asr_server.asr.serving.streaming_scorer import StreamFailed

    scorer, encoder = make_scorer(), FakeEncoder()
    result = scorer.step([StreamChunk(5, np.ones((20, DIM), np.float32), False, False)], encoder)[0]
    assert isinstance(result, StreamFailed) and "START" in result.message
    assert encoder.jobs == [] and scorer.decoding == {} and 5 in scorer.failed


def test_a_stream_past_the_rescoring_bound_keeps_bounded_memory_and_ends_on_its_ctc_result():
    tokenizer = Tokenizer(SymbolTable(VOCAB))
    settings = DecodingSettings(beam_size=2, sos=6, eos=6, rescoring=True, max_rescoring_frames=8)
    scorer = StreamingScorer(tokenizer, settings, WINDOW, DIM, encoder_dim=8)
    rescored = []

    def rescorer(inputs, encoder_out, lengths):
        rescored.append(lengths.tolist())
        return np.zeros(len(lengths), np.int64)

    encoder = FakeEncoder()
    rng = np.random.default_rng(4)
    long, short = rng.normal(size=(200, DIM)).astype(np.float32), rng.normal(size=(30, DIM)).astype(np.float32)
    scorer.step([StreamChunk(1, long[:100], True, False), StreamChunk(2, short, True, False)], encoder)
    assert not scorer.decoding[1].rescorable and scorer.decoding[1].encoder_out == []  # freed, not growing
    assert scorer.decoding[2].rescorable
    best = tokenizer.decode(scorer.decoding[1].search.best().tokens)
    finals = scorer.step([StreamChunk(1, long[100:], False, True), StreamChunk(2, short[:0], False, True)],
                         encoder, rescorer)
    assert len(rescored) == 1 and len(rescored[0]) == 1  # one rescoring call, for stream 2 only
    assert finals[0].text.startswith(best)


def test_a_chunk_that_breaks_in_the_scorer_fails_alone_and_its_batch_neighbours_go_on():
    """Frames of the wrong width (nothing the encoder could take) used to raise out of step() and fail every
    sequence of the batch."""
    from asr_server.asr.serving.streaming_scorer import StreamFailed

    rng = np.random.default_rng(9)
    frames = {key: rng.normal(size=(60, DIM)).astype(np.float32) for key in (1, 2, 3)}
    halves = [[StreamChunk(k, f[:30], True, False) for k, f in frames.items()],
              [StreamChunk(k, f[30:], False, True) for k, f in frames.items()]]
    clean_scorer, encoder = make_scorer(), FakeEncoder()
    clean = [clean_scorer.step(batch, encoder) for batch in halves]
    scorer = make_scorer()
    broken_batch_encoder = FakeEncoder()
    first = scorer.step([halves[0][0], StreamChunk(2, frames[2][:30, :DIM - 1], True, False), halves[0][2]],
                        broken_batch_encoder)
    assert isinstance(first[1], StreamFailed) and "sequence 2 failed" in first[1].message
    # sequence 2 never reached the encoder, so there is no encoder sequence to close
    assert all(key != 2 for round_jobs in broken_batch_encoder.jobs for key, *_ in round_jobs)
    assert [first[0], first[2]] == [clean[0][0], clean[0][2]]
    second = scorer.step(halves[1], FakeEncoder())
    assert isinstance(second[1], StreamFailed)  # its END answers the earlier failure, not part of the audio
    assert [second[0], second[2]] == [clean[1][0], clean[1][2]]
    assert len(scorer.streams) == 0
