"""Model instances (instance_group) and running one batch on a free one.

Each instance owns a backend object and a thread of its own, so instances run batches concurrently while a
single instance never runs two at once (Triton's semantics; also what non-reentrant models need).
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import logging
import queue
import threading
import time
from typing import Callable, Optional, Sequence

from asr_server.backends.base import Backend
from asr_server.errors import ErrorCode, ServerError, as_server_error, internal
from asr_server.scheduling.pending import Pending
from asr_server.model_stats import ModelStatistics

log = logging.getLogger(__name__)


# Batches whose recent executions took less than this run on the event loop thread itself: for such tiny
# work the two thread hops (about 100 us and two GIL hand-offs) cost more than the execution.
INLINE_BELOW_NS = 150_000
EMA_WEIGHT = 0.1  # weight of the newest execution in the running average


def name_os_thread(name: str) -> None:
    """Give the calling thread an OS-visible name (Linux keeps 15 bytes), so `top -H`, py-spy and per-thread
    CPU counters (bench/stream_cpu.py) show which model instance burns the CPU; elsewhere a no-op."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # 15 = PR_SET_NAME
    except (OSError, AttributeError):
        pass


class InstanceThread:
    """One model instance's thread: runs what is submitted, in order, one at a time.

    What a one-worker ThreadPoolExecutor does for an instance, without the Future, work item, shutdown locks
    and idle-thread semaphore it handles per call (the loop's side of a hop cost 27-32 us against 7-9 us
    here, measured on this machine): every streamed chunk's batch takes this hop. Submitted callables
    handle their own errors; `shutdown` runs what was submitted before it. The thread is a daemon: work still
    queued when the process exits without unloading its models is not run (the server unloads them on stop).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()  # no submit slips in after the stop marker
        self._closed = False
        # A daemon: an instance that is never shut down (a test's) must not hold the interpreter at exit.
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, work: Callable[[], None]) -> None:
        """Run `work` on the thread; RuntimeError once shut down."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"instance thread '{self.name}' is shut down")
            self._queue.put(work)

    def shutdown(self, wait: bool = True) -> None:
        """Stop after the work already submitted; with `wait`, return once it has run (called from the thread
        itself, it returns at once: the work runs after the caller's)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._queue.put(None)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        name_os_thread(self.name)
        while True:
            work = self._queue.get()
            if work is None:
                return
            try:
                work()
            except BaseException:  # noqa: BLE001 - the thread must outlive a bug in what it runs
                log.exception("work on instance thread '%s' failed", self.name)


class Instance:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.name = backend.context.instance_name
        self.thread = InstanceThread(self.name)
        # Only backends that never call back into the server (BLS would deadlock) may run inline.
        self.may_run_inline = backend.inline_safe
        self.average_ns = float(INLINE_BELOW_NS)  # start on its thread until measured

    def observe(self, elapsed_ns: int) -> None:
        self.average_ns += EMA_WEIGHT * (elapsed_ns - self.average_ns)

    @property
    def runs_inline(self) -> bool:
        return self.may_run_inline and self.average_ns < INLINE_BELOW_NS

    def shutdown(self) -> None:
        self.thread.shutdown(wait=True)


class InstancePool:
    """Hands batches to idle instances; `run` waits for one to be free."""

    def __init__(self, instances: Sequence[Instance], stats: ModelStatistics, decoupled: bool) -> None:
        self.instances = list(instances)
        self.stats = stats
        self.decoupled = decoupled
        self._idle: collections.deque[Instance] = collections.deque(self.instances)
        self._released: Optional[asyncio.Event] = None  # created lazily so that it binds to the running loop

    @property
    def idle_count(self) -> int:
        return len(self._idle)

    async def wait_for_idle(self) -> None:
        """Returns once some instance is idle."""
        while not self._idle:
            if self._released is None:
                self._released = asyncio.Event()
            self._released.clear()
            await self._released.wait()

    async def acquire(self) -> Instance:
        await self.wait_for_idle()
        return self._idle.popleft()

    def release(self, instance: Instance) -> None:
        self._idle.append(instance)
        if self._released is not None:
            self._released.set()

    def try_acquire(self, accept: Optional[Callable[[Instance], bool]] = None) -> Optional[Instance]:
        """An idle instance now (the first that `accept` accepts, when given), or None."""
        for instance in self._idle:
            if accept is None or accept(instance):
                self._idle.remove(instance)
                return instance
        return None

    async def run(self, batch: list[Pending], instance: Optional[Instance] = None) -> None:
        """Execute `batch` on `instance` (or the next idle one); returns once every response is delivered
        and the instance is free again."""
        if instance is None:
            instance = await self.acquire()
        done = asyncio.get_running_loop().create_future()
        self.dispatch(batch, instance, done)
        await done

    def dispatch(self, batch: list[Pending], instance: Instance, done: Optional[asyncio.Future] = None) -> None:
        """Start `batch` on `instance` without waiting. The instance thread hands results back with one
        loop wake-up that delivers them and frees the instance (the fewest hops per request)."""
        live = [p for p in batch if not _drop_cancelled(p)]
        if not live:
            self.release(instance)
            if done is not None and not done.done():
                done.set_result(None)
            return
        loop = asyncio.get_running_loop()
        if instance.runs_inline and not self.decoupled:
            self._finish(instance, self._execute(instance, live), done)
            return

        def work() -> None:
            try:
                deliveries = self._execute(instance, live)
            except BaseException as exc:  # noqa: BLE001 - never lose a request, even on a bug here
                log.exception("executing a batch on '%s' failed", instance.name)
                deliveries = [(p, as_server_error(exc)) for p in live]
            loop.call_soon_threadsafe(self._finish, instance, deliveries, done)

        try:
            instance.thread.submit(work)
        except RuntimeError:  # the instance is shut down
            self._finish(instance, [(p, ServerError("model is unloading", ErrorCode.UNAVAILABLE)) for p in live], done)

    def _finish(self, instance: Instance, deliveries, done: Optional[asyncio.Future]) -> None:
        """On the loop: deliver, then free the instance."""
        for pending, result in deliveries:
            pending.channel.deliver_on_loop(result, True)
        self.release(instance)
        if done is not None and not done.done():
            done.set_result(None)

    def _execute(self, instance: Instance, batch: list[Pending]) -> list:
        """Runs in the instance's thread; returns (pending, result) pairs to deliver on the loop.
        Decoupled requests are left out: their model resolves them through the sink."""
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
        instance.observe(infer_ns)
        self.stats.record_execution(batch_size, 0, infer_ns, 0)
        self.stats.record_batch_requests(
            [(not isinstance(result, ServerError), end_ns - pending.enqueued_ns, start_ns - pending.enqueued_ns,
              pending.batch_size) for pending, result in zip(batch, results)], infer_ns)
        deliveries = []
        for pending, result in zip(batch, results):
            if pending.on_result is not None:
                result = pending.on_result(pending, result)
            if result is None and self.decoupled:
                continue  # the model answers through its sender
            if result is None:
                result = internal("model returned no response")
            deliveries.append((pending, result))
        return deliveries


    def shutdown(self) -> None:
        for instance in self.instances:
            instance.shutdown()


def _drop_cancelled(pending: Pending) -> bool:
    if pending.request.cancelled():
        pending.fail(ServerError("request cancelled", ErrorCode.CANCELLED))
        return True
    return False

