"""ResponseChannel: one final delivery per request, from any thread, to a waiting coroutine or (the gRPC
stream's path for one-response models) to a callback on the loop."""

from __future__ import annotations

import asyncio
import threading

from asr_server.errors import ErrorCode, ServerError
from asr_server.messages import InferResponse
from asr_server.scheduling.pending import ResponseChannel


async def test_a_callback_channel_calls_back_once_on_the_loop_thread_whoever_delivers():
    loop = asyncio.get_running_loop()
    calls, done = [], asyncio.Event()

    def on_delivery(item, final):
        calls.append((item, final, threading.get_ident()))
        done.set()

    channel = ResponseChannel(loop, on_delivery)
    answer = InferResponse("m", "1")
    worker = threading.Thread(target=lambda: (channel.deliver(answer, True), channel.deliver(answer, True)))
    worker.start()
    worker.join()
    await asyncio.wait_for(done.wait(), 5)
    assert calls == [(answer, True, threading.get_ident())]  # on the loop's thread, and only the first
    assert channel.closed and channel.dropped == 1
    on_loop = ResponseChannel(loop, on_delivery)
    error = ServerError("refused", ErrorCode.UNAVAILABLE)
    on_loop.deliver_on_loop(error, True)  # already on the loop: called at once, no wake-up
    assert calls[-1][0] is error and len(calls) == 2


async def test_a_queued_channel_still_hands_the_first_response_to_its_awaiting_coroutine():
    channel = ResponseChannel(asyncio.get_running_loop())
    answer = InferResponse("m", "1")
    threading.Thread(target=channel.deliver, args=(answer, True)).start()
    assert await asyncio.wait_for(channel.first(), 5) is answer
