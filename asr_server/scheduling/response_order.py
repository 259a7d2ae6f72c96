"""preserve_ordering: responses leave in arrival order even when batches finish out of order on several
instances. A request's channel is wrapped in an `OrderedChannel` that hands its deliveries to the model's
`ReorderBuffer`, which releases them once every earlier request has had its final one.
"""

from __future__ import annotations

import asyncio
import dataclasses

from asr_server.scheduling.pending import Delivery, ResponseChannel


class OrderedChannel:
    """Stands in for a request's channel under preserve_ordering: deliveries go through the reorder
    buffer. Keeps ResponseChannel's contract (thread-safe `deliver`, one final delivery, extras counted
    in the real channel's `dropped`)."""

    def __init__(self, target: ResponseChannel, order: "ReorderBuffer", seq: int,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.target = target
        self._order = order
        self._seq = seq
        self._loop = loop
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def dropped(self) -> int:
        return self.target.dropped

    def _accept(self, final: bool) -> bool:
        if self._closed:
            self.target.dropped += 1
            return False
        if final:
            self._closed = True
        return True

    def deliver(self, item: Delivery, final: bool) -> None:
        if self._accept(final):
            try:
                self._loop.call_soon_threadsafe(self._order.arrive, self._seq, item, final)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

    def deliver_on_loop(self, item: Delivery, final: bool) -> None:
        if self._accept(final):
            self._order.arrive(self._seq, item, final)


@dataclasses.dataclass(eq=False)
class _Slot:
    target: ResponseChannel
    held: list[tuple[Delivery, bool]] = dataclasses.field(default_factory=list)
    done: bool = False  # its final delivery arrived (or it left the ordering)


class ReorderBuffer:
    """Releases each request's deliveries once every earlier request has had its final one. The request
    at the head streams straight through (decoupled models); later ones are held."""

    def __init__(self) -> None:
        self._next = 0  # the oldest request not yet finished
        self._slots: dict[int, _Slot] = {}

    def register(self, seq: int, target: ResponseChannel) -> None:
        self._slots[seq] = _Slot(target)

    def arrive(self, seq: int, item: Delivery, final: bool) -> None:
        slot = self._slots[seq]
        slot.held.append((item, final))
        slot.done = slot.done or final
        if seq == self._next:
            self._advance()

    def leave(self, seq: int) -> None:
        """The request was answered outside the ordering; stop waiting for it."""
        slot = self._slots.get(seq)
        if slot is not None:
            slot.done = True
            slot.held.clear()
            if seq == self._next:
                self._advance()

    def _advance(self) -> None:
        while self._next in self._slots:
            slot = self._slots[self._next]
            for item, final in slot.held:
                slot.target.deliver_on_loop(item, final)
            slot.held.clear()
            if not slot.done:
                return
            del self._slots[self._next]
            self._next += 1

    @property
    def waiting(self) -> int:
        return len(self._slots)
