"""A request waiting in a scheduler, and the channel its responses travel back through.

Backends run in their instances' threads and decoupled models may send from threads of their own, so every
delivery hops onto the event loop with `call_soon_threadsafe`. The channel enforces "resolved exactly
once": after a final delivery, further deliveries are dropped (and counted, for the tests to check).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import AsyncIterator, Callable, Optional, Union

from asr_server.errors import ErrorCode, ServerError
from asr_server.messages import InferRequest, InferResponse

Delivery = Union[InferResponse, ServerError, None]


class ResponseChannel:
    """Carries the responses of one request from any thread to the awaiting coroutine, or, given
    ``on_delivery``, to that callback on the loop thread instead (no queue and no awaiting task: the gRPC
    stream's path for models with one response per request)."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 on_delivery: Optional[Callable[[Delivery, bool], None]] = None) -> None:
        self._loop = loop
        # where a delivery goes, on the loop thread: the callback, or the queue `first` and `stream` read (made
        # only when there is no callback: a streamed chunk's request would build one for nothing)
        self._queue: Optional[asyncio.Queue[tuple[Delivery, bool]]] = None if on_delivery else asyncio.Queue()
        self._sink: Callable[[Delivery, bool], None] = on_delivery or (lambda item, final: self._queue.put_nowait(
            (item, final)))
        self._closed = False  # set on the first final delivery (on the thread that delivered it)
        self.dropped = 0  # deliveries that arrived after the final one

    @property
    def closed(self) -> bool:
        return self._closed

    def deliver(self, item: Delivery, final: bool) -> None:
        """Thread-safe. `item` None with final=True closes the request with no more responses."""
        if self._closed:
            self.dropped += 1
            return
        if final:
            self._closed = True
        try:
            self._loop.call_soon_threadsafe(self._sink, item, final)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def deliver_on_loop(self, item: Delivery, final: bool) -> None:
        """`deliver` for callers already on the loop thread (saves a loop wake-up)."""
        if self._closed:
            self.dropped += 1
            return
        if final:
            self._closed = True
        self._sink(item, final)

    async def first(self) -> InferResponse:
        """The one response of a non-decoupled request (raises its error)."""
        item, _ = await self._queue.get()
        if isinstance(item, ServerError):
            raise item
        if item is None:
            raise ServerError("model sent no response", ErrorCode.INTERNAL)
        return item

    async def stream(self) -> AsyncIterator[tuple[Delivery, bool]]:
        """Every delivery up to and including the final one."""
        while True:
            item, final = await self._queue.get()
            yield item, final
            if final:
                return


@dataclasses.dataclass
class Pending:
    """One request inside a scheduler."""

    request: InferRequest
    channel: ResponseChannel
    batch_size: int = 1  # the request's batch dimension (1 for models with max_batch_size 0)
    enqueued_ns: int = dataclasses.field(default_factory=time.monotonic_ns)
    deadline: Optional[float] = None  # loop time after which the queue policy applies
    # Called in the instance thread with the backend's result before it is delivered (the sequence
    # batcher takes implicit-state outputs here).
    on_result: Optional[Callable[["Pending", Delivery], Delivery]] = None

    def fail(self, error: ServerError) -> None:
        self.channel.deliver(error, True)
