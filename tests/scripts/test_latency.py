"""bench/_latency.py: the one definition of p50/p99 behind every benchmark table."""

import math

import pytest

from bench._latency import latency_summary, percentile_ms


def test_percentiles_interpolate_between_ranks_and_are_in_milliseconds():
    seconds = [i / 1000 for i in range(1, 101)]  # 1 .. 100 ms
    assert percentile_ms(seconds, 50) == pytest.approx(50.5)
    assert percentile_ms(seconds, 99) == pytest.approx(99.01)


def test_no_latency_is_missing_or_whatever_the_caller_says():
    assert math.isnan(percentile_ms([], 99))
    assert percentile_ms([], 99, empty=math.inf) == math.inf  # a budget check must not pass on nothing


def test_summary_counts_requests_per_second_of_the_elapsed_time():
    summary = latency_summary([0.010, 0.020, 0.030, 0.040], elapsed_s=2.0)
    assert summary["rps"] == 2.0
    assert summary["p50_ms"] == pytest.approx(25.0)
    assert summary["p99_ms"] == pytest.approx(39.7)
