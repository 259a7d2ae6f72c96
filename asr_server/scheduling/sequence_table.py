"""The live sequences of a sequence-batched model: which exist, which instance runs each, which have a
request that can run now, and which went idle.

A sequence is created by a request with START and a non-zero id. It lives until its END request has run
(the batcher then calls `finish`) or until it has had no request for the idle time (`evict_idle`). Each is
bound to one model instance at START, round robin, as in Triton: a model that keeps per-sequence state in
its instance (python models do) can then have several instances. Times are the batcher's clock, in seconds.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Optional, Sequence as Seq

import numpy as np

from asr_server.errors import ErrorCode, ServerError, invalid_argument
from asr_server.messages import SequenceControl, SequenceId
from asr_server.scheduling.instances import Instance
from asr_server.scheduling.pending import Pending

# Idle sequences are freed strictly after the idle time; the wake-up for it comes this much later.
IDLE_MARGIN_S = 1e-3


@dataclasses.dataclass(eq=False)
class Sequence:
    id: SequenceId
    last_seen: float  # clock time of its latest request
    instance: Instance  # runs every request of this sequence
    queue: collections.deque[Pending] = dataclasses.field(default_factory=collections.deque)  # in arrival order
    running: bool = False  # one of its requests is executing (steps of a sequence run one at a time, in order)
    ended: bool = False  # its END request has arrived
    states: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # input name -> array, no batch dim

    @property
    def waiting(self) -> bool:
        """Live but with nothing queued or running: it may still send."""
        return not self.queue and not self.running


class SequenceTable:
    def __init__(self, model: str, instances: Seq[Instance]) -> None:
        self.model = model
        self.instances = list(instances)
        self.live: dict[SequenceId, Sequence] = {}
        self._assigned = 0  # sequences assigned to instances so far (round robin)

    def __len__(self) -> int:
        return len(self.live)

    @property
    def queued(self) -> int:
        return sum(len(s.queue) for s in self.live.values())

    def admit(self, control: SequenceControl, now: float, max_sequences: int) -> Sequence:
        """The sequence a request joins (created, or restarted, by START); raises ServerError when the request
        cannot join one. The caller queues the request on it."""
        sequence = self.live.get(control.id)
        if control.start:
            instance = None
            if sequence is not None and sequence.waiting:
                instance = sequence.instance  # a new START restarts the sequence, on the same instance
                del self.live[control.id]
                sequence = None
            elif sequence is not None:
                # It queues behind the previous sequence's last steps; an END among them ended that one, not
                # this one (which the END's completion would otherwise free).
                sequence.ended = False
            if sequence is None:
                if len(self.live) >= max_sequences:
                    raise ServerError(f"model '{self.model}' has reached its limit of {max_sequences} live sequences",
                                      ErrorCode.RESOURCE_EXHAUSTED)
                sequence = Sequence(control.id, now, instance=instance or self._next_instance())
                self.live[control.id] = sequence
        elif sequence is None or sequence.ended:
            raise invalid_argument(
                f"inference request for sequence {control.id} to model '{self.model}' must specify the "
                "START flag on the first request of the sequence")
        if control.end:
            sequence.ended = True
        sequence.last_seen = now
        return sequence

    def _next_instance(self) -> Instance:
        self._assigned += 1
        return self.instances[self._assigned % len(self.instances)]

    def finished(self, sequence_id: SequenceId) -> bool:
        """A request of the sequence has run: the sequence may take its next one, or is freed after its END.
        Returns whether it was freed."""
        sequence = self.live.get(sequence_id)
        if sequence is None:
            return False
        sequence.running = False
        if sequence.ended and not sequence.queue:
            del self.live[sequence_id]
            return True
        return False

    def heads_by_instance(self) -> dict[Instance, list[Sequence]]:
        """The sequences whose next request can run now, per instance, oldest request first; instances in the
        order of their oldest request."""
        heads = [s for s in self.live.values() if s.queue and not s.running]
        heads.sort(key=lambda s: s.queue[0].enqueued_ns)
        groups: dict[Instance, list[Sequence]] = {}
        for sequence in heads:
            groups.setdefault(sequence.instance, []).append(sequence)
        return groups

    def more_may_come(self, instance: Instance) -> bool:
        """Whether a live sequence of `instance` might still send a request (waiting for one only helps then)."""
        return any(s.instance is instance and s.waiting for s in self.live.values())

    def evict_idle(self, now: float, idle_s: float) -> bool:
        """Free the sequences that have waited more than `idle_s` since their latest request; returns whether
        any was freed."""
        idle = [s.id for s in self.live.values() if s.waiting and now - s.last_seen > idle_s]
        for sequence_id in idle:
            del self.live[sequence_id]
        return bool(idle)

    def next_idle_deadline(self, idle_s: float) -> float:
        """When `evict_idle` would next free a sequence (inf: none is waiting)."""
        times = [s.last_seen + idle_s for s in self.live.values() if s.waiting]
        return min(times) + IDLE_MARGIN_S if times else math.inf

    def pop(self, sequence_id: SequenceId) -> Optional[Sequence]:
        return self.live.pop(sequence_id, None)

    def clear(self) -> list[Sequence]:
        sequences = list(self.live.values())
        self.live.clear()
        return sequences
