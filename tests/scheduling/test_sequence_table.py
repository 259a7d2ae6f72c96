"""The sequence table's bookkeeping: a scheduling step reads what changed, not every live sequence, and idle
sequences are still freed exactly once their idle time has passed."""

from __future__ import annotations

import types

from asr_server.messages import SequenceControl
from asr_server.scheduling.sequence_table import IDLE_MARGIN_S, SequenceTable

IDLE_S = 1.0


class CountingDict(dict):
    """Counts full scans of the live sequences."""

    scans = 0

    def values(self):
        CountingDict.scans += 1
        return super().values()


def request(at_ns: int = 0):
    return types.SimpleNamespace(enqueued_ns=at_ns)


def run_one(table: SequenceTable, sequence_id, now: float, start: bool = False):
    """A request of the sequence arrives at `now`, is taken, runs and finishes (the batcher's calls)."""
    sequence = table.admit(SequenceControl(sequence_id, start=start), now, max_sequences=10_000)
    sequence.queue.append(request())
    table.take(sequence)
    sequence.running = True
    table.finished(sequence_id)
    return sequence


def test_a_step_over_many_waiting_streams_reads_only_the_one_with_a_request():
    table = SequenceTable("m", [object(), object()])
    table.live = CountingDict()
    for i in range(1, 1001):
        run_one(table, i, now=0.0, start=True)
    assert table.heads_by_instance() == {}
    CountingDict.scans = 0
    sequence = table.admit(SequenceControl(7), 0.5, max_sequences=10_000)
    sequence.queue.append(request())
    heads = table.heads_by_instance()
    assert [s.id for group in heads.values() for s in group] == [7]
    assert table.evict_idle(0.9, IDLE_S) is False  # none can be idle before 0.0 + 1 s
    assert CountingDict.scans == 0


def test_a_sequence_that_turns_waiting_after_a_sweep_is_freed_on_its_own_deadline():
    table = SequenceTable("m", [object()])
    slow = table.admit(SequenceControl("slow", start=True), 0.0, max_sequences=10)  # its request runs long
    slow.queue.append(request())
    table.take(slow)
    slow.running = True
    run_one(table, "quick", now=0.5, start=True)
    assert table.evict_idle(1.2, IDLE_S) is False  # slow is running, quick has waited 0.7 s
    assert table.next_idle_deadline(IDLE_S) == 0.5 + IDLE_S + IDLE_MARGIN_S
    table.finished("slow")  # waiting now, last seen at 0.0: idle since 1.0
    assert table.next_idle_deadline(IDLE_S) <= 0.0 + IDLE_S + IDLE_MARGIN_S
    assert table.evict_idle(1.3, IDLE_S) is True
    assert set(table.live) == {"quick"}
    assert table.next_idle_deadline(IDLE_S) == 0.5 + IDLE_S + IDLE_MARGIN_S
    assert table.evict_idle(1.51, IDLE_S) is True and not table.live
