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
        # What a scheduling step reads, kept up to date as sequences change, so that a step costs what is
        # queued, not what is live (a step per arriving chunk over every live stream grew as streams^2):
        # the sequences that may have a runnable request (each is checked when read), and a lower bound on
        # the latest-request time of every waiting sequence (no waiting one can be idle before it + idle_s).
        self._maybe_ready: dict[SequenceId, Sequence] = {}
        self._oldest_waiting_seen = math.inf

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
        self._maybe_ready[sequence.id] = sequence  # the caller queues the request on it
        return sequence

    def take(self, sequence: Sequence) -> Pending:
        """Take the next request of a runnable sequence (the caller marks the sequence running, unless the
        request fails before it runs)."""
        pending = sequence.queue.popleft()
        self._touched(sequence)
        return pending

    def _touched(self, sequence: Sequence) -> None:
        """`sequence`'s queue or running flag changed: it may have become runnable, or waiting."""
        self._maybe_ready[sequence.id] = sequence
        self._oldest_waiting_seen = min(self._oldest_waiting_seen, sequence.last_seen)

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
        self._touched(sequence)
        return False

    def heads_by_instance(self) -> dict[Instance, list[Sequence]]:
        """The sequences whose next request can run now, per instance, oldest request first; instances in the
        order of their oldest request."""
        heads = []
        for sequence_id, sequence in list(self._maybe_ready.items()):
            if sequence.queue and not sequence.running and self.live.get(sequence_id) is sequence:
                heads.append(sequence)
            else:  # running, empty or gone: it is touched again when that changes
                del self._maybe_ready[sequence_id]
        heads.sort(key=lambda s: s.queue[0].enqueued_ns)
        groups: dict[Instance, list[Sequence]] = {}
        for sequence in heads:
            groups.setdefault(sequence.instance, []).append(sequence)
        return groups

    def may_fill(self, batch: int) -> bool:
        """Whether `batch` sequences may have a runnable request (False: no instance can fill a batch of that
        size now). Every runnable sequence is among those kept for the next step to check."""
        return len(self._maybe_ready) >= batch

    def more_may_come(self, instance: Instance) -> bool:
        """Whether a live sequence of `instance` might still send a request (waiting for one only helps then)."""
        return any(s.instance is instance and s.waiting for s in self.live.values())

    def evict_idle(self, now: float, idle_s: float) -> bool:
        """Free the sequences that have waited more than `idle_s` since their latest request; returns whether
        any was freed."""
        if now - self._oldest_waiting_seen <= idle_s:
            return False  # none can be idle yet: no sweep
        idle = [s.id for s in self.live.values() if s.waiting and now - s.last_seen > idle_s]
        for sequence_id in idle:
            del self.live[sequence_id]
        self._oldest_waiting_seen = min((s.last_seen for s in self.live.values() if s.waiting), default=math.inf)
        return bool(idle)

    def next_idle_deadline(self, idle_s: float) -> float:
        """When `evict_idle` may next free a sequence (inf: none is waiting); it may free none then (a
        sequence seen since), and look again."""
        return self._oldest_waiting_seen + idle_s + IDLE_MARGIN_S

    def pop(self, sequence_id: SequenceId) -> Optional[Sequence]:
        self._maybe_ready.pop(sequence_id, None)
        return self.live.pop(sequence_id, None)

    def clear(self) -> list[Sequence]:
        sequences = list(self.live.values())
        self.live.clear()
        self._maybe_ready.clear()
        self._oldest_waiting_seen = math.inf
        return sequences
