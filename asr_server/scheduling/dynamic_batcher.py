"""Triton's dynamic batcher: gathers requests into batches up to max_batch_size.

A batch is sent when it reaches max_batch_size, when it reaches a preferred size, or when its oldest
request has waited max_queue_delay_microseconds. Requests batch together only when their non-batch shapes
agree (unless the backend takes ragged batches); others wait for the next batch, oldest first.
Timing uses the loop's monotonic clock and waits on an event, never on polling sleeps.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Optional

from tritonclient.grpc import model_config_pb2 as mc

from asr_server.errors import ErrorCode, ServerError
from asr_server.scheduling.base import Scheduler
from asr_server.scheduling.instances import InstancePool
from asr_server.scheduling.pending import Pending


def _shape_key(pending: Pending) -> tuple:
    return tuple((t.name, t.datatype, t.data.shape[1:]) for t in pending.request.inputs)


class DynamicBatcher(Scheduler):
    def __init__(self, pool: InstancePool, config: mc.ModelConfig, ragged: bool = False) -> None:
        super().__init__(pool)
        batching = config.dynamic_batching
        self.max_batch_size = max(1, config.max_batch_size)
        self.preferred = sorted(s for s in batching.preferred_batch_size if s <= self.max_batch_size)
        self.max_delay_s = batching.max_queue_delay_microseconds / 1e6
        self.max_queue_size = batching.default_queue_policy.max_queue_size  # 0: unbounded
        self.ragged = ragged
        self._queue: collections.deque[Pending] = collections.deque()
        self._arrived = asyncio.Event()
        self._loop_task: Optional[asyncio.Task] = None

    @property
    def queued(self) -> int:
        return len(self._queue)

    def _submit(self, pending: Pending) -> None:
        if self.max_queue_size and len(self._queue) >= self.max_queue_size:
            pending.fail(ServerError("Exceeds maximum queue size", ErrorCode.UNAVAILABLE))
            return
        pending.deadline = asyncio.get_running_loop().time() + self.max_delay_s
        self._queue.append(pending)
        self._arrived.set()
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._batch_loop())

    async def _batch_loop(self) -> None:
        while True:
            while not self._queue:
                self._arrived.clear()
                await self._arrived.wait()
            instance = await self.pool.acquire()
            batch = await self._next_batch()
            if not batch:
                self.pool.release(instance)
                continue
            self._spawn(self.pool.run(batch, instance))

    def _candidates(self) -> tuple[list[Pending], int]:
        """The batch that would be sent now: oldest request plus compatible followers, in order."""
        first = self._queue[0]
        key = None if self.ragged else _shape_key(first)
        chosen, size = [], 0
        for pending in self._queue:
            if key is not None and _shape_key(pending) != key:
                continue
            if size + pending.batch_size > self.max_batch_size:
                break
            chosen.append(pending)
            size += pending.batch_size
        return chosen, size

    async def _next_batch(self) -> list[Pending]:
        loop = asyncio.get_running_loop()
        while True:
            self._discard_cancelled()
            if not self._queue:
                return []
            chosen, size = self._candidates()
            deadline = self._queue[0].deadline or 0.0
            full = size >= self.max_batch_size or len(chosen) < self._compatible_count()
            if full or size in self.preferred or loop.time() >= deadline:
                for pending in chosen:
                    self._queue.remove(pending)
                return chosen
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout=max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                pass

    def _compatible_count(self) -> int:
        """How many queued requests share the oldest one's shapes (more than fit means the batch is full)."""
        if self.ragged:
            return len(self._queue)
        key = _shape_key(self._queue[0])
        return sum(1 for p in self._queue if _shape_key(p) == key)

    def _discard_cancelled(self) -> None:
        for pending in [p for p in self._queue if p.request.cancelled()]:
            self._queue.remove(pending)
            pending.fail(ServerError("request cancelled", ErrorCode.CANCELLED))

    def _fail_queued(self, error: ServerError) -> None:
        while self._queue:
            self._queue.popleft().fail(error)
        if self._loop_task is not None:
            self._loop_task.cancel()

    async def _drain(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while self._queue and loop.time() < end:
            # Let the batch loop take what is queued; wake it without waiting out the delay.
            for pending in self._queue:
                pending.deadline = 0.0
            self._arrived.set()
            await asyncio.sleep(0)
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=max(0.0, end - loop.time()))
        await super()._drain(max(0.0, end - loop.time()))
