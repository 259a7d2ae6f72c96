"""StreamingClient and transcribe_files over a live in-process server running the fake pipelines."""

from __future__ import annotations

import asyncio

import pytest
import tritonclient.grpc.aio as grpcclient

from asr_client import (
    StreamingClient, StreamingError, StreamOptions, TranscribeOptions, Utterance, load_audio, summarize,
    transcribe_files,
)
from asr_client.report import statistics_delta, statistics_snapshot
from tests.client.tones import tones


async def test_stream_sends_640ms_chunks_and_gets_growing_partials_then_the_final(url, corpus):
    samples = load_audio(corpus.paths["d"]).samples  # 7 words, 1.75 s = 28000 samples
    seen = []
    async with StreamingClient(url) as client:
        result = await client.transcribe(samples, sequence_id=77, on_partial=seen.append)
    assert result.text == corpus.texts["d"] == "zero one two three four five six"
    assert result.sequence_id == 77 and result.audio_s == pytest.approx(1.75)
    # chunks end at 0.69 s and 1.33 s: 2 then 5 complete 250 ms words; END decodes all 7.
    assert [p.text for p in result.partials] == ["zero one", "zero one two three four", result.text]
    # 640 ms chunks after a first one 50 ms longer (the decoding window's look-ahead)
    assert [p.audio_end_s for p in result.partials] == [0.69, 1.33, 1.75]
    assert seen == list(result.partials)
    assert all(0 < latency < 5 for latency in result.chunk_latencies_s)


async def test_wenet_chunks_and_blocks_from_a_live_source(url, corpus):
    samples = load_audio(corpus.paths["d"]).samples
    async with StreamingClient(url, StreamOptions(wenet_chunks=True)) as client:
        result = await client.transcribe(samples)
    assert [p.audio_end_s for p in result.partials] == [0.69, 1.33, 1.75]  # 11040, 10240, then 6720 padded
    assert [p.text for p in result.partials] == ["zero one", "zero one two three four", corpus.texts["d"]]

    async def odd_blocks():  # a live source: blocks of whatever size arrive
        for start in range(0, len(samples), 3001):
            yield samples[start:start + 3001]

    async with StreamingClient(url, StreamOptions(chunk_ms=500)) as client:
        live = await client.transcribe(odd_blocks())
    assert live.text == corpus.texts["d"] and len(live.partials) == 4  # 8000-sample chunks: 3.5 of them


async def test_concurrent_streams_on_one_client_keep_their_own_sequences(url, corpus):
    texts = ["one two three", "nine eight", "four four four four four", "seven"]
    async with StreamingClient(url, StreamOptions(chunk_ms=120)) as client:
        results = await asyncio.gather(*(client.transcribe(tones(t, seed=i)) for i, t in enumerate(texts)))
    assert [r.text for r in results] == texts
    assert len({r.sequence_id for r in results}) == 4


async def test_realtime_pacing_takes_as_long_as_the_audio(url):
    async with StreamingClient(url, StreamOptions(chunk_ms=100, realtime=True)) as client:
        result = await client.transcribe(tones("five six"))  # 0.5 s
    assert result.text == "five six" and len(result.partials) == 5
    assert 0.45 <= result.elapsed_s < 2.0


async def test_stream_errors_name_the_model_and_leave_the_connection_usable(url):
    async with grpcclient.InferenceServerClient(url) as shared:
        wrong = StreamingClient(options=StreamOptions(model="no_such_model"), grpc_client=shared)
        with pytest.raises(StreamingError, match="Request for unknown model: 'no_such_model'"):
            await wrong.transcribe(tones("one"))
        right = StreamingClient(grpc_client=shared)
        assert (await right.transcribe(tones("one"))).text == "one"


async def test_transcribe_files_offline_skips_the_corrupt_file_and_scores_wer(url, corpus):
    references = {
        "a": "three one four one six",  # one substitution against what is spoken
        "b": corpus.texts["b"],  # 8 kHz file: resampled, exact
        "c": corpus.texts["c"],  # stereo file: mono mix, exact
        "d": "zero one two three four five",  # the spoken "six" is an insertion
    }
    utterances = [Utterance(k, corpus.paths[k], references[k]) for k in "ab"]
    utterances += [Utterance("corrupt", corpus.corrupt, "x")]
    utterances += [Utterance(k, corpus.paths[k], references[k]) for k in "cd"]
    done = []
    async with grpcclient.InferenceServerClient(url) as grpc_client:
        before = await statistics_snapshot(grpc_client)
        batch = await transcribe_files(
            utterances, options=TranscribeOptions(concurrency=3), on_result=done.append, grpc_client=grpc_client
        )
        after = await statistics_snapshot(grpc_client)
    assert [r.key for r in batch.results] == ["a", "b", "corrupt", "c", "d"]
    assert sorted(r.key for r in done) == sorted(r.key for r in batch.results)
    by_key = {r.key: r for r in batch.results}
    assert {k: by_key[k].hypothesis for k in "abcd"} == corpus.texts
    assert by_key["corrupt"].hypothesis is None and "corrupt.wav" in by_key["corrupt"].error
    assert by_key["b"].duration_s == pytest.approx(1.0) and by_key["c"].duration_s == pytest.approx(0.75)

    summary = summarize(batch, statistics_delta(before, after))
    assert (summary.utterances, summary.failed) == (5, 1)
    assert summary.error_rates.words == 5 + 4 + 3 + 6 and summary.error_rates.word_errors == 2
    assert summary.error_rates.wer == pytest.approx(2 / 18)
    assert summary.audio_s == pytest.approx(1.25 + 1.0 + 0.75 + 1.75)
    assert summary.rtf == pytest.approx(batch.wall_s / summary.audio_s)
    assert [(s.model, s.requests) for s in summary.server] == [("attention_rescoring:1", 4)]
    assert set(summary.latency_ms) == {"p50", "p90", "p99"}


async def test_transcribe_files_streaming_gives_per_chunk_latencies(url, corpus):
    paths = [corpus.paths[k] for k in "abcd"] + [corpus.corrupt]
    batch = await transcribe_files(paths, url, TranscribeOptions(streaming=True, concurrency=4))
    assert batch.model == "streaming_wenet" and batch.streaming
    assert [r.hypothesis for r in batch.results] == [*corpus.texts.values(), None]
    # ceil(duration / 0.64 s) chunks each: 1.25 s -> 2, 1.0 -> 2, 0.75 -> 2, 1.75 -> 3.
    assert [len(r.chunk_latencies_s) for r in batch.results] == [2, 2, 2, 3, 0]

    refused = await transcribe_files(paths[:2], url, TranscribeOptions(streaming=True, model="missing"))
    assert all(r.hypothesis is None and "missing" in r.error for r in refused.results)


def test_options_are_validated():
    with pytest.raises(ValueError):
        TranscribeOptions(concurrency=0)
    with pytest.raises(ValueError):
        StreamOptions(chunk_ms=-5)
    assert TranscribeOptions().model_name == "attention_rescoring"
    assert TranscribeOptions(streaming=True).model_name == "streaming_wenet"
