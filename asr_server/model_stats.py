"""Per-model-version inference statistics, in the shape of Triton's ModelStatistics.

Durations are nanoseconds, counts are requests (inference_stats) or executions (batch_stats), as in Triton.
Updated from the event loop and from the model instances' threads, hence the lock.
"""

from __future__ import annotations

import dataclasses
import threading
import time


@dataclasses.dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += max(0, int(ns))


@dataclasses.dataclass
class BatchStats:
    compute_input: Duration = dataclasses.field(default_factory=Duration)
    compute_infer: Duration = dataclasses.field(default_factory=Duration)
    compute_output: Duration = dataclasses.field(default_factory=Duration)


class ModelStatistics:
    """Counters for one model version."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last_inference_ms = 0  # wall-clock ms since the epoch, as Triton reports
        self.inference_count = 0  # inferences, counting each batch element
        self.execution_count = 0  # backend executions
        self.success = Duration()
        self.fail = Duration()
        self.queue = Duration()
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()
        self.batch: dict[int, BatchStats] = {}
        # Failures by Triton's reason label (nv_inference_request_failure{reason=...}).
        self.failures_by_reason: dict[str, int] = {}

    def record_execution(self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        with self._lock:
            self.execution_count += 1
            stats = self.batch.setdefault(batch_size, BatchStats())
            stats.compute_input.add(input_ns)
            stats.compute_infer.add(infer_ns)
            stats.compute_output.add(output_ns)

    def record_request(
        self,
        ok: bool,
        total_ns: int,
        queue_ns: int = 0,
        input_ns: int = 0,
        infer_ns: int = 0,
        output_ns: int = 0,
        batch_size: int = 1,
        reason: str = "BACKEND",
    ) -> None:
        with self._lock:
            self.last_inference_ms = int(time.time() * 1000)
            if not ok:
                self.fail.add(total_ns)
                self.failures_by_reason[reason] = self.failures_by_reason.get(reason, 0) + 1
                return
            self.inference_count += batch_size
            self.success.add(total_ns)
            self.queue.add(queue_ns)
            self.compute_input.add(input_ns)
            self.compute_infer.add(infer_ns)
            self.compute_output.add(output_ns)

    def record_batch_requests(self, outcomes: list[tuple[bool, int, int, int]], infer_ns: int) -> None:
        """`record_request` for every request of one execution, under one lock: (ok, total_ns, queue_ns,
        batch_size) each, sharing the execution's `infer_ns` (each streamed chunk's batch comes here)."""
        infer_ns = max(0, int(infer_ns))
        with self._lock:
            self.last_inference_ms = int(time.time() * 1000)
            for ok, total_ns, queue_ns, batch_size in outcomes:
                if not ok:
                    self.fail.add(total_ns)
                    self.failures_by_reason["BACKEND"] = self.failures_by_reason.get("BACKEND", 0) + 1
                    continue
                self.inference_count += batch_size
                self.success.count += 1
                self.success.ns += max(0, total_ns)
                self.queue.count += 1
                self.queue.ns += max(0, queue_ns)
                self.compute_input.count += 1
                self.compute_infer.count += 1
                self.compute_infer.ns += infer_ns
                self.compute_output.count += 1

    def snapshot(self) -> "ModelStatistics":
        """A consistent copy for reporting."""
        copy = ModelStatistics()
        with self._lock:
            for field in ("last_inference_ms", "inference_count", "execution_count"):
                setattr(copy, field, getattr(self, field))
            for field in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output"):
                setattr(copy, field, dataclasses.replace(getattr(self, field)))
            copy.batch = {
                size: BatchStats(*(dataclasses.replace(d) for d in (b.compute_input, b.compute_infer, b.compute_output)))
                for size, b in self.batch.items()
            }
            copy.failures_by_reason = dict(self.failures_by_reason)
        return copy
