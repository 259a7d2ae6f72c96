"""Small requests must not cost large responses: an output requested many times is returned once,
over gRPC and HTTP, as Triton does."""

from __future__ import annotations

import numpy as np
import tritonclient.grpc.aio as grpc_aio
import tritonclient.http.aio as http_aio

from tests.protocol.test_hostile_input import repo  # noqa: F401  (fixture)


def inputs(module):
    tensors = [module.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in tensors:
        tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
    return tensors


async def test_an_output_requested_many_times_is_returned_once(repo, running):  # noqa: F811
    async with running(repo) as server:
        grpc_client = grpc_aio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        http_client = http_aio.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            for client, module in ((grpc_client, grpc_aio), (http_client, http_aio)):
                outputs = [module.InferRequestedOutput(n) for n in ["OUTPUT0"] * 200 + ["OUTPUT1", "OUTPUT0"]]
                result = await client.infer("add_sub", inputs(module), outputs=outputs)
                response = result.get_response()
                names = ([o.name for o in response.outputs] if module is grpc_aio
                         else [o["name"] for o in response["outputs"]])
                assert names == ["OUTPUT0", "OUTPUT1"]
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * np.arange(4))
        finally:
            await grpc_client.close()
            await http_client.close()
