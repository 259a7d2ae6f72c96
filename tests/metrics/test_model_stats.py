"""A batch's requests recorded under one lock count exactly as recording them one by one."""

from __future__ import annotations

import dataclasses

from asr_server.model_stats import ModelStatistics

FIELDS = ("inference_count", "success", "fail", "queue", "compute_input", "compute_infer", "compute_output",
          "failures_by_reason")


def test_recording_a_batch_at_once_equals_recording_each_request():
    outcomes = [(True, 900, 100, 1), (False, 50, 10, 1), (True, 1200, 300, 2), (True, -5, -1, 1)]
    one_by_one, at_once = ModelStatistics(), ModelStatistics()
    for ok, total_ns, queue_ns, batch_size in outcomes:
        one_by_one.record_request(ok, total_ns=total_ns, queue_ns=queue_ns, infer_ns=400, batch_size=batch_size)
    at_once.record_batch_requests(outcomes, 400)
    for field in FIELDS:
        value = getattr(at_once, field)
        expected = getattr(one_by_one, field)
        assert (dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value) == (
            dataclasses.asdict(expected) if dataclasses.is_dataclass(expected) else expected), field
    assert at_once.success.count == 3 and at_once.inference_count == 4 and at_once.failures_by_reason == {"BACKEND": 1}
