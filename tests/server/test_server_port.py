"""core.CorePort, the ServerPort the layers below the core call back through (BLS, ensemble steps)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from asr_server.core import CorePort
from asr_server.errors import ErrorCode, ServerError
from asr_server.messages import InferRequest, InferResponse


class FakeCore:
    """Answers with the name of the thread its coroutine ran on, so a test sees which loop ran it."""

    async def infer_all(self, request: InferRequest) -> list[InferResponse]:
        await asyncio.sleep(0)
        return [InferResponse(request.model_name, "1", id=threading.current_thread().name)]


def test_an_unconnected_port_refuses_with_unavailable() -> None:
    port = CorePort()
    with pytest.raises(ServerError) as raised:
        port.infer(InferRequest(model_name="m"))
    assert raised.value.code == ErrorCode.UNAVAILABLE
    with pytest.raises(ServerError, match="not running"):
        asyncio.run(port.infer_async(InferRequest(model_name="m")))


async def test_every_call_runs_on_the_loop_the_port_is_connected_to() -> None:
    port = CorePort()
    port.connect(FakeCore(), asyncio.get_running_loop())
    here = threading.current_thread().name

    on_loop = await port.infer_async(InferRequest(model_name="a"))  # the server's own loop (ensembles)
    from_thread = await asyncio.to_thread(port.infer, InferRequest(model_name="b"))  # an executor thread (BLS)
    other_loop = await asyncio.to_thread(  # a python model's own loop (`async def execute`)
        asyncio.run, port.infer_async(InferRequest(model_name="c")))

    assert [r[0].model_name for r in (on_loop, from_thread, other_loop)] == ["a", "b", "c"]
    assert {r[0].id for r in (on_loop, from_thread, other_loop)} == {here}
