"""Checks shared by backend tests: a model served over gRPC and HTTP with the stock tritonclient."""

from __future__ import annotations

import asyncio

import numpy as np
import tritonclient.grpc.aio as grpc_aio
import tritonclient.http.aio as http_aio


async def check_add_sub_batched(server, model: str) -> dict:
    """16 concurrent requests to an add/sub model (INPUT0, INPUT1 [1, 4] FP32 -> OUTPUT0 = sum, OUTPUT1 =
    difference), 8 over gRPC and 8 over HTTP: every answer right, and requests shared executions (dynamic
    batching). Returns the model's config as HTTP reports it."""
    grpc = grpc_aio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    http = http_aio.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        async def one(client, module, i: int) -> None:
            a, b = np.full((1, 4), i, np.float32), np.ones((1, 4), np.float32)
            inputs = [module.InferInput("INPUT0", [1, 4], "FP32"), module.InferInput("INPUT1", [1, 4], "FP32")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            result = await client.infer(model, inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)

        await asyncio.gather(*(one(grpc, grpc_aio, i) for i in range(8)), *(one(http, http_aio, i) for i in range(8)))
        stats = (await grpc.get_inference_statistics(model, as_json=True))["model_stats"][0]
        assert int(stats["inference_count"]) == 16
        assert int(stats["execution_count"]) < 16  # requests shared executions
        return await http.get_model_config(model)
    finally:
        await grpc.close()
        await http.close()


async def served_transcripts(running, repo, samples: np.ndarray) -> tuple[str, str]:
    """(offline transcript, final streaming transcript in 640 ms chunks) of `samples` from a server on `repo`."""
    from asr_client.offline import recognize
    from asr_client.streaming import StreamingClient, StreamOptions

    async with running(repo, allow_http=False) as server:
        url = f"127.0.0.1:{server.grpc_port}"
        client = grpc_aio.InferenceServerClient(url)
        try:
            offline = await recognize(client, samples, timeout_s=60)
        finally:
            await client.close()
        async with StreamingClient(url, StreamOptions(chunk_ms=640)) as streaming:
            streamed = await streaming.transcribe(samples)
    return offline.text, streamed.text
