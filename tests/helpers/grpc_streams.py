"""Sending sequence requests over a gRPC stream with tritonclient's aio client (sequence batcher and ensemble
tests)."""

from __future__ import annotations

import numpy as np
import tritonclient.grpc.aio as aioclient


def x_input(value: float, name: str = "INPUT") -> list:
    """One FP32 input of shape (1, 1) holding `value`."""
    inp = aioclient.InferInput(name, [1, 1], "FP32")
    inp.set_data_from_numpy(np.array([[value]], dtype=np.float32))
    return [inp]


async def stream_all(client: aioclient.InferenceServerClient, requests: list[dict]) -> list:
    """Send every request (keyword arguments of `stream_infer`'s items) on one stream; return the
    (result, error) pairs in arrival order."""

    async def iterate():
        for request in requests:
            yield request

    out = []
    async for result, error in client.stream_infer(iterate()):
        out.append((result, error))
        if len(out) == len(requests):
            break
    return out
