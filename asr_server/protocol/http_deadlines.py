"""Read deadlines for HTTP clients that send too slowly (slowloris): a connection may not hold a server slot
for good by dribbling its request.

Two limits, as a reverse proxy sets them (nginx's client_header_timeout and client_body_timeout):
- headers: a connection that has not completed a request's headers within --http-idle-timeout-secs of opening,
  or of its last answer, is closed. aiohttp's keep-alive timer does this (it closes a connection whose next
  request has not arrived, whole, in time); the server passes the setting to it.
- body: a request whose body makes no progress for --http-body-timeout-secs is answered 408 and its connection
  closed (the rest of the body would otherwise be read as the next request). A slow client that keeps sending
  is not cut: only a stall counts.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

log = logging.getLogger(__name__)

BODY_TIMEOUT_KEY = web.AppKey("http_body_timeout_secs", float)
POLLS_PER_TIMEOUT = 4  # the stall is noticed within 1/4 of the timeout after it expires


class BodyStalled(Exception):
    """Set on a request's body stream: the handler reading it stops at once."""


async def _watch(request: web.Request, timeout: float, fired: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    content = request.content
    seen, progressed = content.total_bytes, loop.time()
    while not content.is_eof():
        await asyncio.sleep(timeout / POLLS_PER_TIMEOUT)
        if content.total_bytes != seen:
            seen, progressed = content.total_bytes, loop.time()
        elif loop.time() - progressed >= timeout and not content.is_eof():
            fired.set()
            content.set_exception(BodyStalled())
            return


@web.middleware
async def stalled_bodies_end(request: web.Request, handler) -> web.StreamResponse:
    """The outermost middleware: watches the body while the handler runs, answers 408 when it stalled."""
    timeout = request.app[BODY_TIMEOUT_KEY]
    if not request.body_exists or request.content.is_eof():
        return await handler(request)
    fired = asyncio.Event()
    watchdog = asyncio.create_task(_watch(request, timeout, fired))
    try:
        response = await handler(request)
    except BodyStalled:
        response = None
    finally:
        watchdog.cancel()
    if not fired.is_set():
        return response
    log.warning("%s %s: no request body bytes for %.0f s (--http-body-timeout-secs); connection closed",
                request.method, request.path, timeout)
    response = web.json_response(
        {"error": f"request body timed out: no bytes for {timeout:g} s (--http-body-timeout-secs)"}, status=408)
    response.force_close()
    return response
