"""--grpc-restricted-protocol / --http-restricted-api: Triton's syntax, header names, codes and words
(checked against tritonserver 2.51)."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import grpc
import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

from asr_server.cli import build_parser, settings_from_args
from asr_server.protocol import restrictions
from tests.conftest import BUNDLED_REPO, copy_model

GRPC_REFUSED = "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"
ADMIN = {"triton-grpc-protocol-admin-key": "secret"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    copy_model(tmp_path, BUNDLED_REPO / "add_sub")
    copy_model(tmp_path, BUNDLED_REPO / "add_sub", "add_sub_copy")
    return tmp_path


def add_sub_inputs(module):
    a = np.arange(4, dtype=np.float32)
    inputs = [module.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    return inputs


async def expect_grpc_error(coro, code: grpc.StatusCode, text: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        await coro
    assert info.value.status() == f"StatusCode.{code.name}", info.value
    assert text == info.value.message(), info.value.message()


def test_flags_parse_with_tritons_syntax_and_errors():
    args = build_parser().parse_args([
        "--model-repository", "/r", "--grpc-restricted-protocol", "model-repository,shared-memory:admin-key=s=1",
        "--grpc-restricted-protocol", "inference:infer-key=k", "--http-restricted-api", "health:Admin-Key=v",
    ])
    s = settings_from_args(args)
    grpc_side = restrictions.parse(s.grpc_restricted_protocols, grpc_side=True)
    assert grpc_side["model-repository"] == grpc_side["shared-memory"] == restrictions.Restriction(
        ("model-repository", "shared-memory"), "triton-grpc-protocol-admin-key", "s=1")
    assert grpc_side["inference"].header == "triton-grpc-protocol-infer-key"
    assert restrictions.parse(s.http_restricted_apis, grpc_side=False)["health"].header == "Admin-Key"
    # tritonserver 2.51's messages for the same mistakes.
    for flag, message in [
        ("bogus:a=b", "unknown restricted protocol 'bogus'"),
        ("health,metadata", "--grpc-restricted-protocol option format is '<config name>:<setting>=<value>'. "
                            "Got health,metadata"),
        ("health:a", "--grpc-restricted-protocol option format is"),
    ]:
        with pytest.raises(ValueError, match=message):
            restrictions.parse([flag], grpc_side=True)
    with pytest.raises(ValueError, match="restricted api 'health' can not be specified in multiple config groups"):
        restrictions.parse(["health:a=b", "metadata,health:c=d"], grpc_side=False)


async def test_grpc_model_repository_needs_the_header_and_inference_does_not(repo: Path, running):
    settings = dict(model_control_mode="explicit", load_models=("add_sub", "add_sub_copy"), allow_http=False,
                    grpc_restricted_protocols=("model-repository,health:admin-key=secret",))
    async with running(repo, **settings) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        for headers in (None, {"triton-grpc-protocol-admin-key": "wrong"}, {"admin-key": "secret"}):
            await expect_grpc_error(client.unload_model("add_sub", headers=headers), grpc.StatusCode.UNAVAILABLE,
                                    GRPC_REFUSED)
        await expect_grpc_error(client.load_model("add_sub"), grpc.StatusCode.UNAVAILABLE, GRPC_REFUSED)
        await expect_grpc_error(client.get_model_repository_index(), grpc.StatusCode.UNAVAILABLE, GRPC_REFUSED)
        await expect_grpc_error(client.is_server_ready(), grpc.StatusCode.UNAVAILABLE, GRPC_REFUSED)
        # Nothing was unloaded; unrestricted groups answer without the header.
        assert await client.is_model_ready("add_sub", headers=ADMIN)
        result = await client.infer("add_sub", add_sub_inputs(aioclient))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * np.arange(4, dtype=np.float32))
        assert (await client.get_server_metadata()).name == "triton"
        # With the header the administrator can.
        await client.unload_model("add_sub_copy", headers=ADMIN)
        assert not await client.is_model_ready("add_sub_copy", headers=ADMIN)
        await client.close()


async def test_grpc_restricted_inference_refuses_a_stream_without_the_header(repo: Path, running):
    async with running(repo, allow_http=False, grpc_restricted_protocols=("inference:infer-key=k1",)) as server:
        url = f"127.0.0.1:{server.grpc_port}"
        await expect_grpc_error(aioclient.InferenceServerClient(url).infer("add_sub", add_sub_inputs(aioclient)),
                                grpc.StatusCode.UNAVAILABLE,
                                "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'")
        # The stream is refused as a whole (Triton ends it with the same status); with the header it works.
        for headers in (None, {"triton-grpc-protocol-infer-key": "k1"}):
            client = aioclient.InferenceServerClient(url)

            async def requests():
                yield {"model_name": "add_sub", "inputs": add_sub_inputs(aioclient)}

            got = []
            try:
                async for result, error in client.stream_infer(requests(), headers=headers):
                    got.append(error if error is not None else result.as_numpy("OUTPUT1").tolist())
            except grpc.aio.AioRpcError as exc:  # tritonclient's aio stream lets the status through as it is
                got.append(exc)
            if headers is None:
                assert len(got) == 1 and got[0].code() == grpc.StatusCode.UNAVAILABLE
                assert got[0].details() == ("This protocol is restricted, expecting header "
                                            "'triton-grpc-protocol-infer-key'")
            else:
                assert got == [[0, 0, 0, 0]]
            await client.close()


async def test_http_restricted_api_answers_403_with_tritons_words(repo: Path, running):
    settings = dict(model_control_mode="explicit", load_models=("add_sub",), allow_grpc=False,
                    http_restricted_apis=("model-repository,health:admin-key=secret",))
    async with running(repo, **settings) as server:
        base = f"http://127.0.0.1:{server.http_port}"
        async with aiohttp.ClientSession() as session:
            for method, path in [("POST", "/v2/repository/models/add_sub/unload"), ("POST", "/v2/repository/index"),
                                 ("GET", "/v2/health/ready"), ("GET", "/v2/models/add_sub/ready")]:
                async with session.request(method, base + path, headers={"admin-key": "nope"}) as reply:
                    assert reply.status == 403
                    assert await reply.json() == {"error": "This API is restricted, expecting header 'admin-key'"}
            async with session.get(base + "/v2/models/add_sub/ready", headers={"admin-key": "secret"}) as reply:
                assert reply.status == 200  # still loaded
            async with session.get(base + "/v2/models/add_sub/config") as reply:
                assert reply.status == 200  # model-config is not restricted here
            async with session.post(base + "/v2/repository/models/add_sub/unload",
                                    headers={"Admin-Key": "secret"}) as reply:
                assert reply.status == 200
