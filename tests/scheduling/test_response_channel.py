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


async def test_a_callback_that_raises_does_not_stop_the_model_answering(tmp_path):
    """core.submit's callback runs inside the scheduler's delivery loop: a caller whose callback fails is
    logged, and the instance is released for the next request."""
    import numpy as np

    from asr_server.messages import InferRequest, Tensor
    from asr_server.server import Server
    from asr_server.settings import ServerSettings
    from tests.conftest import BUNDLED_REPO, copy_model

    copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    server = Server(ServerSettings(model_repositories=(tmp_path,)))
    await server.manager.load_many(["add_sub"])
    try:
        def request() -> InferRequest:
            x = np.arange(4, dtype=np.float32)
            return InferRequest(model_name="add_sub", inputs=[Tensor("INPUT0", "FP32", x), Tensor("INPUT1", "FP32", x)])

        def broken(answer):
            raise RuntimeError("the caller's bug")

        answers: asyncio.Queue = asyncio.Queue()
        server.core.submit(request(), broken)
        server.core.submit(request(), answers.put_nowait)
        answer = await asyncio.wait_for(answers.get(), 10)
        assert isinstance(answer, InferResponse) and answer.final
        assert answer.output("OUTPUT0").data.tolist() == [0.0, 2.0, 4.0, 6.0]
    finally:
        await server.manager.shutdown()
