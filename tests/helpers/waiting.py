"""Waiting for a state instead of sleeping for a guess: a test goes on as soon as what it needs is true, and
fails with a clear message when it never becomes true (a fixed sleep is too short on a busy CI and too long
everywhere else)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Awaitable, Callable, Union

Predicate = Callable[[], Union[bool, Awaitable[bool]]]


async def wait_until(predicate: Predicate, timeout_s: float = 10.0, interval_s: float = 0.05) -> bool:
    """True once `predicate()` (sync, or a coroutine function) is true; False after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(interval_s)
