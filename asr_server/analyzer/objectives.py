"""What "best" means: an objective ranked among measurements that meet the constraints.

A measurement is one load point of one candidate configuration. A candidate's score is its best satisfying
measurement; a candidate with none scores below every candidate that has one (then by least violation), as
Triton's Model Analyzer ranks configurations that pass constraints first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional

THROUGHPUT = "throughput"  # most inferences per second
LATENCY = "latency"  # lowest p99 latency
PACED_STREAMS = "paced_streams"  # most paced real-time streams (our load generator)
OBJECTIVES = (THROUGHPUT, LATENCY, PACED_STREAMS)


@dataclass(frozen=True)
class Constraints:
    max_p99_latency_ms: Optional[float] = None  # latency budget (chunk latency for paced streams)
    max_memory_mb: Optional[float] = None  # server resident memory while measured
    min_throughput: Optional[float] = None  # infer/sec

    def violation(self, m: "Measured") -> float:
        """0 when `m` satisfies every constraint, else the summed relative excess (for ranking failures)."""
        if m.error:
            return math.inf
        excess = 0.0
        if self.max_p99_latency_ms is not None and m.p99_ms > self.max_p99_latency_ms:
            excess += m.p99_ms / self.max_p99_latency_ms - 1
        if self.max_memory_mb is not None and m.memory_mb is not None and m.memory_mb > self.max_memory_mb:
            excess += m.memory_mb / self.max_memory_mb - 1
        if self.min_throughput is not None and m.throughput < self.min_throughput:
            excess += 1 - m.throughput / self.min_throughput
        return excess

    def satisfied(self, m: "Measured") -> bool:
        return self.violation(m) == 0.0


@dataclass(frozen=True)
class Measured:
    """The numbers an objective reads from one measurement."""

    throughput: float = 0.0  # infer/sec (chunks/sec for paced streams)
    p99_ms: float = math.inf
    memory_mb: Optional[float] = None
    streams: int = 0  # paced streams run at this point
    error: str = ""  # non-empty: the point failed (load or measurement)


def value(objective: str, m: Measured) -> float:
    """Larger is better."""
    if objective == THROUGHPUT:
        return m.throughput
    if objective == LATENCY:
        return -m.p99_ms
    if objective == PACED_STREAMS:
        return float(m.streams)
    raise ValueError(f"unknown objective '{objective}' (known: {', '.join(OBJECTIVES)})")


def score(objective: str, constraints: Constraints, points: Iterable[Measured]) -> tuple[int, float]:
    """A candidate's rank key (larger is better): (1, best objective) when some point satisfies the
    constraints, else (0, -least violation)."""
    points = list(points)
    ok = [value(objective, m) for m in points if constraints.satisfied(m)]
    if ok:
        return 1, max(ok)
    violations = [constraints.violation(m) for m in points]
    return 0, -min(violations, default=math.inf)
