"""Latency figures as the benchmarks print them: percentiles of per-request seconds, in milliseconds, one
definition for every table (numpy's linear interpolation between the nearest ranks)."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def percentile_ms(latencies_s: Sequence[float], q: float, empty: float = float("nan")) -> float:
    """The q-th percentile of latencies given in seconds, in ms; `empty` when there are none (NaN prints as
    missing; a caller comparing against a budget passes inf so that nothing measured never passes)."""
    return 1e3 * float(np.percentile(latencies_s, q)) if len(latencies_s) else empty


def latency_summary(latencies_s: Sequence[float], elapsed_s: float) -> dict:
    """p50 and p99 in ms, and requests per second, of a run that took `elapsed_s`."""
    return {"p50_ms": percentile_ms(latencies_s, 50), "p99_ms": percentile_ms(latencies_s, 99),
            "rps": len(latencies_s) / elapsed_s}
