"""The scheduler interface: what the core calls to get a request executed.

Every model version has one Scheduler, made by `factory.make_scheduler` from its config: DirectScheduler
(below), DynamicBatcher, SequenceBatcher, EnsembleScheduler. To add one: subclass Scheduler, implement
`_submit` (queue the request, never block; deliver through `pending.channel`), override `_drain` /
`_fail_queued` / `queued` if it keeps a queue, and pick it in the factory.
"""

from __future__ import annotations

import abc
import asyncio
from typing import Optional

from asr_server.errors import ErrorCode, ServerError
from asr_server.scheduling.instances import InstancePool
from asr_server.scheduling.pending import Pending


class Scheduler(abc.ABC):
    """Decides when and with which other requests a request runs, on which instance."""

    def __init__(self, pool: Optional[InstancePool]) -> None:
        self.pool = pool  # the model's instances; None for an ensemble, whose steps run on other models
        self._tasks: set[asyncio.Task] = set()
        self._accepting = True

    def submit(self, pending: Pending) -> None:
        """Queue a request; its channel receives the result. Never blocks."""
        if not self._accepting:
            pending.fail(ServerError("model is being unloaded", ErrorCode.UNAVAILABLE))
            return
        self._submit(pending)

    @abc.abstractmethod
    def _submit(self, pending: Pending) -> None: ...

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _track(self, future: asyncio.Future) -> None:
        self._tasks.add(future)
        future.add_done_callback(self._tasks.discard)

    async def stop(self, drain_timeout_s: float = 30.0) -> None:
        """Stop accepting, let queued and running requests finish, then fail whatever is left."""
        self._accepting = False
        await self._drain(drain_timeout_s)
        self._fail_queued(ServerError("model was unloaded before the request ran", ErrorCode.UNAVAILABLE))

    async def _drain(self, timeout_s: float) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)

    def _fail_queued(self, error: ServerError) -> None:
        """Schedulers with a queue fail its contents here."""

    @property
    def queued(self) -> int:
        """Requests waiting in this scheduler's queue (the nv_inference_pending_request_count metric)."""
        return 0

    @property
    def live_sequences(self) -> Optional[int]:
        """Sequences holding state (the asr_server_live_sequences metric); None for schedulers without any."""
        return None

    @property
    def healthy(self) -> bool:
        """False once the scheduler cannot go on; the model is then reported not ready."""
        return True


class DirectScheduler(Scheduler):
    """No batching: each request runs alone on the next idle instance (Triton's default scheduler)."""

    @property
    def in_flight(self) -> int:
        """Requests accepted and not yet answered (running, or waiting for an idle instance)."""
        return len(self._tasks)

    def _submit(self, pending: Pending) -> None:
        instance = self.pool.try_acquire()
        if instance is not None:
            done = asyncio.get_running_loop().create_future()
            self._track(done)
            self.pool.dispatch([pending], instance, done)
        else:
            self._spawn(self.pool.run([pending]))
