"""Handing freed heap memory back to the system (glibc only).

glibc keeps freed memory in its arenas for reuse; after a burst of streams the server stays at its peak RSS
even once every sequence is gone. `malloc_trim(0)` returns the free pages of every arena. It takes a few
milliseconds on a big heap, so it runs in a worker thread and at most once per interval.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
from typing import Optional

log = logging.getLogger(__name__)

TRIM_INTERVAL_S = 10.0  # seconds between two trims requested by the same owner


def _load_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to do
        return None


_malloc_trim = _load_trim()


class HeapTrimmer:
    """Trims the heap when its owner goes idle, at most once per `interval_s`."""

    def __init__(self, interval_s: float = TRIM_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._last: Optional[float] = None
        self.trims = 0  # trims started (for tests and logs)

    def request(self) -> None:
        """Called on the event loop when the owner has just freed its state."""
        if _malloc_trim is None:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._last is not None and now - self._last < self.interval_s:
            return
        self._last = now
        self.trims += 1
        loop.run_in_executor(None, _malloc_trim, 0)
