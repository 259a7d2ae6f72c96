"""Model instances (instance_group) and running one batch on a free one.

Each instance owns a backend object and a one-thread executor, so instances run batches concurrently
while a single instance never runs two at once (Triton's semantics; also what non-reentrant models need).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Optional, Sequence

from asr_server.backends.base import Backend
from asr_server.errors import ErrorCode, ServerError, as_server_error, internal
from asr_server.scheduling.pending import Pending
from asr_server.statistics import ModelStatistics

log = logging.getLogger(__name__)


class Instance:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.name = backend.context.instance_name
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True)


class InstancePool:
    """Hands batches to idle instances; `run` waits for one to be free."""

    def __init__(self, instances: Sequence[Instance], stats: ModelStatistics, decoupled: bool) -> None:
        self.instances = list(instances)
        self.stats = stats
        self.decoupled = decoupled
        self._idle: Optional[asyncio.Queue[Instance]] = None

    def _idle_queue(self) -> asyncio.Queue[Instance]:
        # Created lazily so the queue binds to the running loop.
        if self._idle is None:
            self._idle = asyncio.Queue()
            for instance in self.instances:
                self._idle.put_nowait(instance)
        return self._idle

    @property
    def idle_count(self) -> int:
        return self._idle_queue().qsize()

    async def acquire(self) -> Instance:
        return await self._idle_queue().get()

    def release(self, instance: Instance) -> None:
        self._idle_queue().put_nowait(instance)

    async def run(self, batch: list[Pending], instance: Optional[Instance] = None) -> None:
        """Execute `batch` on `instance` (or the next idle one) and deliver every response."""
        if instance is None:
            instance = await self.acquire()
        try:
            live = [p for p in batch if not _drop_cancelled(p)]
            if live:
                await asyncio.get_running_loop().run_in_executor(instance.executor, self._execute, instance, live)
        finally:
            self.release(instance)

    def _execute(self, instance: Instance, batch: list[Pending]) -> None:
        """Runs in the instance's thread. Every pending request is resolved before this returns,
        except decoupled ones, which their model resolves through the sink."""
        start_ns = time.monotonic_ns()
        requests = [p.request for p in batch]
        senders = [p.channel.deliver for p in batch] if self.decoupled else None
        try:
            results = instance.backend.execute(requests, senders)
            if results is None and self.decoupled:
                results = [None] * len(batch)
            if len(results) != len(batch):
                raise internal(
                    f"backend of '{instance.name}' returned {len(results)} responses for {len(batch)} requests"
                )
        except BaseException as exc:  # noqa: BLE001 - a model failure must fail its batch, not the server
            error = as_server_error(exc)
            if not isinstance(exc, ServerError):
                log.exception("model instance '%s' failed", instance.name)
            results = [error] * len(batch)
        end_ns = time.monotonic_ns()
        batch_size = sum(p.batch_size for p in batch)
        infer_ns = end_ns - start_ns
        self.stats.record_execution(batch_size, 0, infer_ns, 0)
        for pending, result in zip(batch, results):
            ok = not isinstance(result, ServerError)
            self.stats.record_request(
                ok,
                total_ns=end_ns - pending.enqueued_ns,
                queue_ns=start_ns - pending.enqueued_ns,
                infer_ns=infer_ns,
                batch_size=pending.batch_size,
            )
            if pending.on_result is not None:
                result = pending.on_result(pending, result)
            if result is None and self.decoupled:
                continue  # the model answers through its sender
            if result is None:
                result = internal("model returned no response")
            pending.channel.deliver(result, True)

    def shutdown(self) -> None:
        for instance in self.instances:
            instance.shutdown()


def _drop_cancelled(pending: Pending) -> bool:
    if pending.request.cancelled():
        pending.fail(ServerError("request cancelled", ErrorCode.CANCELLED))
        return True
    return False

