"""WER/CER, percentiles and server-statistics arithmetic on hand-made values."""

from __future__ import annotations

import pytest

from asr_client.batch import BatchResult, UtteranceResult
from asr_client.report import error_rates, format_summary, percentiles_ms, statistics_delta, summarize


def test_error_rates_count_corpus_level_edits_after_light_normalisation():
    rates = error_rates([
        ("three one four", "three one five"),  # 1 substitution; chars: "four" vs "five" = 3 edits
        ("Two  Seven", "two seven"),  # case and spacing do not count
        ("nine", ""),  # 1 deletion; 4 chars deleted
        ("", "zero"),  # 1 insertion; 4 chars inserted
    ])
    assert (rates.words, rates.word_errors) == (6, 3)
    assert (rates.chars, rates.char_errors) == (12 + 8 + 4, 3 + 4 + 4)
    assert rates.wer == pytest.approx(0.5) and rates.cer == pytest.approx(11 / 24)
    assert error_rates([]) is None
    chinese = error_rates([("你好世界", "你好是界")])
    assert chinese.cer == pytest.approx(0.25)


def test_percentiles_in_milliseconds():
    latencies = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    assert percentiles_ms(latencies) == {"p50": 50.5, "p90": 90.1, "p99": 99.01}
    assert percentiles_ms([]) == {}


def test_statistics_delta_reports_only_models_that_ran_in_the_window():
    before = {"m:1": dict(requests=10, executions=5, queue_ns=1_000_000, compute_ns=10_000_000),
              "idle:1": dict(requests=3, executions=3, queue_ns=0, compute_ns=0)}
    after = {"m:1": dict(requests=14, executions=6, queue_ns=3_000_000, compute_ns=30_000_000),
             "idle:1": dict(requests=3, executions=3, queue_ns=0, compute_ns=0),
             "new:1": dict(requests=2, executions=1, queue_ns=400_000, compute_ns=2_000_000)}
    rows = statistics_delta(before, after)
    assert [(r.model, r.requests, r.executions, r.avg_queue_ms, r.avg_compute_ms) for r in rows] == [
        ("m:1", 4, 1, 0.5, 5.0), ("new:1", 2, 1, 0.2, 1.0)]


def test_summary_rtf_throughput_and_failures():
    ok = dict(path="p", partials=1)
    batch = BatchResult(results=(
        UtteranceResult(key="a", reference="one two", hypothesis="one two", duration_s=3.0, elapsed_s=0.2,
                        chunk_latencies_s=(0.1, 0.3), **ok),
        UtteranceResult(key="b", reference=None, hypothesis="x", duration_s=1.0, elapsed_s=0.1,
                        chunk_latencies_s=(0.2,), **ok),
        UtteranceResult(key="c", path="p", reference="zz", hypothesis=None, duration_s=0.0, elapsed_s=0.0,
                        error="cannot read audio file p"),
    ), wall_s=2.0, model="streaming_wenet", streaming=True)
    summary = summarize(batch)
    assert (summary.utterances, summary.failed, summary.audio_s, summary.rtf) == (3, 1, 4.0, 0.5)
    assert summary.throughput_utt_s == 1.0 and summary.latency_ms["p50"] == 200.0
    assert summary.error_rates.utterances == 1 and summary.error_rates.wer == 0.0  # failed ones are not scored
    text = format_summary(summary)
    assert "2/3 utterances, 1 failed" in text and "RTF 0.5000" in text and "WER 0.00% (0/2 words)" in text
    assert summary.as_dict()["error_rates"]["wer"] == 0.0
