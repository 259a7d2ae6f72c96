"""Triton's dynamic batcher: gathers requests into batches up to max_batch_size.

A batch is the oldest queued request plus the compatible requests behind it, in queue order. It is sent
when it reaches max_batch_size (or the next compatible request would not fit), when a prefix of it reaches a
preferred size (the largest such prefix is sent), or when its oldest request has waited
max_queue_delay_microseconds. Batches are only formed when an instance is idle: while every instance is
busy the queue keeps growing, which is what makes batching pay off under load.

Priorities: `priority_levels` queues, level 1 first. The batch walk goes through level 1, then level 2, ...,
so lower levels may fill a batch that a higher level started. Within a level, requests whose DELAY timeout
expired go behind the ones still in time. Queue policies (per level: `priority_queue_policy`, else
`default_queue_policy`): REJECT fails a request that waited past its timeout with UNAVAILABLE "Request timeout
expired"; `max_queue_size` bounds each level's queue.

Shapes: requests whose non-batch shapes differ are batched together only when the backend declares
`ragged_batching`. Otherwise we refuse to pad: such a request waits for a batch of its own shape (it is not
padded to its neighbours' shape, which would change what a model that is not length-aware computes).

preserve_ordering: responses leave in arrival order even when batches finish out of order on several
instances (the reorder buffer: response_order.py). Only results of executed batches are ordered; a request
that fails in the queue (timeout, cancellation, unload) gets its error at once and stops holding back the
ones behind it. The options are read from the config once (batcher_options.py).

No task polls: the queue is examined when a request arrives, when a batch finishes and when a timer set for
the next deadline (batch delay or queue timeout) fires. Deadlines use `clock` (the loop's monotonic clock
unless a test injects one; after moving an injected clock a test calls `poke()`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from typing import Callable, Iterator, Optional

from tritonclient.grpc import model_config_pb2 as mc

from asr_server.errors import ErrorCode, ServerError, invalid_argument
from asr_server.scheduling.base import Scheduler
from asr_server.scheduling.batcher_options import QueuePolicy, batcher_options
from asr_server.scheduling.instances import InstancePool
from asr_server.scheduling.pending import Pending
from asr_server.scheduling.response_order import OrderedChannel, ReorderBuffer

Clock = Callable[[], float]  # seconds, monotonic

TIMEOUT_MESSAGE = "Request timeout expired"
QUEUE_FULL_MESSAGE = "Exceeds maximum queue size"


def _shape_key(pending: Pending) -> tuple:
    return tuple((t.name, t.datatype, t.data.shape[1:]) for t in pending.request.inputs)


@dataclasses.dataclass(eq=False)
class _Entry:
    """A queued request and what the batcher needs to know about it."""

    pending: Pending
    level: int  # 0-based priority level
    arrival: float  # clock time of submission
    expires: float  # clock time its queue timeout runs out (inf: never)
    key: Optional[tuple]  # non-batch shapes (None when the backend batches ragged requests)
    seq: int = -1  # arrival number, for preserve_ordering
    delayed: bool = False  # DELAY timeout expired: behind the requests still in time

    @property
    def size(self) -> int:
        return self.pending.batch_size


class _Level:
    """One priority level's queue: requests in time, then the DELAY-expired ones."""

    def __init__(self, policy: QueuePolicy) -> None:
        self.policy = policy
        self.waiting: list[_Entry] = []
        self.delayed: list[_Entry] = []

    def __len__(self) -> int:
        return len(self.waiting) + len(self.delayed)

    def __iter__(self) -> Iterator[_Entry]:
        yield from self.waiting
        yield from self.delayed


class DynamicBatcher(Scheduler):
    def __init__(self, pool: InstancePool, config: mc.ModelConfig, ragged: bool = False,
                 clock: Optional[Clock] = None) -> None:
        super().__init__(pool)
        self.options = batcher_options(config, ragged)
        self._clock_override = clock
        self._levels = [_Level(policy) for policy in self.options.policies]
        self._count = 0  # queued requests, all levels
        self._timed = 0  # queued requests with a finite, not yet expired timeout
        self._flush = False  # set while draining: send what is queued without waiting for the delay
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_at = math.inf
        self._changed: Optional[asyncio.Event] = None  # set whenever the queue shrinks (for draining)
        self._seq = 0
        self._order = ReorderBuffer() if self.options.preserve_ordering else None

    # ---- public -------------------------------------------------------------------------------
    @property
    def queued(self) -> int:
        return self._count

    def clock(self) -> float:
        return self._clock_override() if self._clock_override is not None else asyncio.get_running_loop().time()

    def poke(self) -> None:
        """Examine the queue now (after an injected clock moved)."""
        self._pump()

    # ---- submission ---------------------------------------------------------------------------
    def _submit(self, pending: Pending) -> None:
        level = self._level_of(pending)
        if level is None:
            return
        queue = self._levels[level]
        if queue.policy.max_queue_size and len(queue) >= queue.policy.max_queue_size:
            self._reject(pending, ServerError(QUEUE_FULL_MESSAGE, ErrorCode.UNAVAILABLE))
            return
        now = self.clock()
        timeout = queue.policy.timeout_for(pending.request.timeout_us)
        entry = _Entry(
            pending,
            level,
            arrival=now,
            expires=now + timeout if timeout > 0 else math.inf,
            key=None if self.options.ragged else _shape_key(pending),
        )
        pending.deadline = entry.expires if timeout > 0 else None
        if self._order is not None:
            entry.seq = self._seq
            self._seq += 1
            self._order.register(entry.seq, pending.channel)
            pending.channel = OrderedChannel(pending.channel, self._order, entry.seq, asyncio.get_running_loop())
        queue.waiting.append(entry)
        self._count += 1
        if timeout > 0:
            self._timed += 1
        # Cancellations are looked for when a batch finishes, on timers and on poke(); scanning the queue
        # on every arrival made each request cost O(queue length) (and the pool drops cancelled ones anyway).
        self._pump(scan_cancelled=False)

    def _level_of(self, pending: Pending) -> Optional[int]:
        """0-based level of the request, or None after failing it for an invalid priority."""
        levels = self.options.priority_levels
        if not levels:
            return 0  # as Triton: without priority levels a request's priority is ignored
        priority = pending.request.priority
        if priority == 0:
            return self.options.default_level - 1
        if not 1 <= priority <= levels:
            pending.fail(invalid_argument(
                f"[request id: {pending.request.id or '<id_unknown>'}] inference request priority must be in "
                f"range [0, {levels}] for '{self.options.model}', got {priority}"
            ))
            return None
        return priority - 1

    # ---- the scheduling step --------------------------------------------------------------------
    def _pump(self, scan_cancelled: bool = True) -> None:
        """Apply queue policies, then send batches while an instance is idle and a batch is due; finally
        arm the timer for the next deadline. Runs on the loop thread, never blocks."""
        now = self.clock()
        next_expiry = self._apply_policies(now) if self._timed else math.inf
        if scan_cancelled:
            self._drop_cancelled()
        batch_due = math.inf
        while self._count and self.pool.idle_count:
            batch, batch_due = self._next_batch(now)
            if batch is None:
                break
            instance = self.pool.try_acquire()
            if instance is None:  # cannot happen with idle_count > 0, but never lose the batch
                batch_due = math.inf
                break
            self._remove(batch)
            self._dispatch([e.pending for e in batch], instance)
        self._arm(min(next_expiry, batch_due), now)
        if self._changed is not None:
            self._changed.set()

    def _order_of_service(self) -> Iterator[_Entry]:
        for level in self._levels:
            yield from level

    def _next_batch(self, now: float) -> tuple[Optional[list[_Entry]], float]:
        """The batch to send now, or (None, the time it will be due)."""
        chosen: list[_Entry] = []
        size, preferred_prefix, saturated = 0, 0, False
        key: Optional[tuple] = None
        limit = self.options.max_batch_size
        for entry in self._order_of_service():
            if not chosen:
                key, head = entry.key, entry
            elif entry.key != key:
                continue  # another shape: it waits for a batch of its own
            if size + entry.size > limit:
                saturated = True
                break
            chosen.append(entry)
            size += entry.size
            if size in self.options.preferred:
                preferred_prefix = len(chosen)
        if not chosen:
            return None, math.inf
        due = head.arrival + self.options.max_delay_s
        if saturated or size >= limit or self._flush or now >= due:
            return chosen, math.inf
        if preferred_prefix:
            return chosen[:preferred_prefix], math.inf
        return None, due

    def _remove(self, batch: list[_Entry]) -> None:
        taken = set(map(id, batch))
        for level in {e.level for e in batch}:
            queue = self._levels[level]
            queue.waiting = [e for e in queue.waiting if id(e) not in taken]
            queue.delayed = [e for e in queue.delayed if id(e) not in taken]
        self._count -= len(batch)
        self._timed -= sum(1 for e in batch if not e.delayed and e.expires < math.inf)

    def _dispatch(self, batch: list[Pending], instance) -> None:
        done = asyncio.get_running_loop().create_future()
        self._track(done)
        done.add_done_callback(self._batch_done)
        self.pool.dispatch(batch, instance, done)

    def _batch_done(self, _future: asyncio.Future) -> None:
        self._pump()

    def _apply_policies(self, now: float) -> float:
        """Reject or demote requests whose queue timeout ran out; returns the next expiry."""
        next_expiry = math.inf
        for queue in self._levels:
            kept = []
            for entry in queue.waiting:
                if entry.expires <= now:
                    self._timed -= 1
                    if queue.policy.reject:
                        self._count -= 1
                        self._fail(entry, ServerError(TIMEOUT_MESSAGE, ErrorCode.UNAVAILABLE), "REJECTED")
                    else:
                        entry.delayed = True
                        queue.delayed.append(entry)  # keeps arrival order among the delayed
                    continue
                kept.append(entry)
                next_expiry = min(next_expiry, entry.expires)
            queue.waiting = kept
        return next_expiry

    def _drop_cancelled(self) -> None:
        for queue in self._levels:
            for attr in ("waiting", "delayed"):
                entries = getattr(queue, attr)
                if not any(e.pending.request.cancelled() for e in entries):
                    continue
                kept = []
                for entry in entries:
                    if entry.pending.request.cancelled():
                        self._count -= 1
                        if not entry.delayed and entry.expires < math.inf:
                            self._timed -= 1
                        self._fail(entry, ServerError("request cancelled", ErrorCode.CANCELLED), "CANCELED")
                    else:
                        kept.append(entry)
                setattr(queue, attr, kept)

    def _fail(self, entry: _Entry, error: ServerError, reason: str) -> None:
        """Answer a queued request with an error, outside the ordering."""
        pending = entry.pending
        channel = pending.channel
        if isinstance(channel, OrderedChannel):
            channel.target.deliver_on_loop(error, True)
            channel._closed = True
            self._order.leave(entry.seq)
        else:
            channel.deliver_on_loop(error, True)
        self.pool.stats.record_request(False, total_ns=time.monotonic_ns() - pending.enqueued_ns, reason=reason)

    def _reject(self, pending: Pending, error: ServerError) -> None:
        pending.fail(error)
        self.pool.stats.record_request(False, total_ns=0, reason="REJECTED")

    def _arm(self, when: float, now: float) -> None:
        """Make sure the queue is examined again at `when` (clock time)."""
        if when == math.inf:
            if self._timer is not None:
                self._timer.cancel()
                self._timer, self._timer_at = None, math.inf
            return
        if self._timer is not None and self._timer_at <= when:
            return  # an earlier wake-up is armed; it re-arms for this one
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = asyncio.get_running_loop().call_later(max(0.0, when - now), self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, math.inf
        self._pump()

    # ---- shutdown -----------------------------------------------------------------------------
    async def _drain(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        self._flush = True  # send what is queued without waiting out the delay
        self._changed = asyncio.Event()
        self._pump()
        while self._count and loop.time() < end:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=max(0.0, end - loop.time()))
            except asyncio.TimeoutError:
                break
        await super()._drain(max(0.0, end - loop.time()))

    def _fail_queued(self, error: ServerError) -> None:
        for queue in self._levels:
            for entry in list(queue):
                self._fail(entry, error, "OTHER")
            queue.waiting, queue.delayed = [], []
        self._count = self._timed = 0
        self._arm(math.inf, 0.0)
