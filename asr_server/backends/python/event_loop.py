"""The event loop an instance's `async def execute` coroutines run on."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Coroutine, Optional


class ModelEventLoop:
    """One asyncio loop in its own thread per instance, started on first use (Triton's stub has one too)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None

    def submit(self, coroutine: Coroutine) -> concurrent.futures.Future:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name=f"python-model-loop-{self._name}", daemon=True
                )
                self._thread.start()
            return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def close(self) -> None:
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5.0)
        if not thread.is_alive():
            loop.close()
