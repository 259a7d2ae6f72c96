"""Hostile input at the protocol layer: shared-memory keys that leave /dev/shm, parameters of the
wrong type or sign, oversize and endless bodies, deep JSON, overflowing shapes, raw and typed contents at once.
Each is refused with INVALID_ARGUMENT (400) or 413, and the server goes on serving."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc.aio as grpc_aio
import tritonclient.http.aio as http_aio
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from asr_server.cli import build_parser, settings_from_args
from asr_server.errors import ErrorCode, ServerError
from asr_server.shared_memory import SHM_ROOT, shm_name
from tests.conftest import BUNDLED_REPO, PYTHON_MODELS, copy_model

SECRET = b"do not touch: " + bytes(range(50))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    copy_model(root, BUNDLED_REPO / "add_sub")
    copy_model(root, PYTHON_MODELS / "sequence_echo")
    return root


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """A file outside /dev/shm that no request may read or write."""
    path = tmp_path / "target.bin"
    path.write_bytes(SECRET)
    return path


def add_sub_request(**params) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[4])
        request.raw_input_contents.append(np.ones(4, np.float32).tobytes())
    for key, (field, value) in params.items():
        setattr(request.parameters[key], field, value)
    return request


async def grpc_error(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


# ---- 1. shared-memory keys --------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["", "/", ".", "/..", "a/b", "/a/b", "//a", "/x\0y", "/" + "n" * 256])
def test_keys_shm_open_refuses_are_refused(key):
    with pytest.raises(ServerError) as info:
        shm_name(key)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert f"Unable to open shared memory region: '{key}'" in info.value.message


@pytest.mark.parametrize("key, name", [("/region", "region"), ("region", "region"), ("/" + "n" * 255, "n" * 255)])
def test_keys_shm_open_takes_are_taken(key, name):
    assert shm_name(key) == name


async def test_shared_memory_keys_cannot_leave_dev_shm(repo, target, running):
    traversal = "/../.." + str(target)  # /dev/shm/../../<tmp>/target.bin
    assert os.path.samefile(os.path.join(SHM_ROOT, traversal.lstrip("/")), target)  # the key would reach it
    link_key = f"/asr_test_link_{uuid.uuid4().hex}"
    os.symlink(target, os.path.join(SHM_ROOT, link_key[1:]))  # a link planted in /dev/shm
    valid_key = f"/asr_test_valid_{uuid.uuid4().hex}"
    handle = shm.create_shared_memory_region("valid", valid_key, 64)
    try:
        async with running(repo) as server:
            grpc_client = grpc_aio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
            http_client = http_aio.InferenceServerClient(f"127.0.0.1:{server.http_port}")
            try:
                for key in (traversal, link_key):
                    with pytest.raises(InferenceServerException) as info:
                        await grpc_client.register_system_shared_memory("evil", key, len(SECRET))
                    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
                    assert f"Unable to open shared memory region: '{key}'" in info.value.message()
                    with pytest.raises(InferenceServerException) as info:
                        await http_client.register_system_shared_memory("evil", key, len(SECRET))
                    assert info.value.status() == "400"
                    assert f"Unable to open shared memory region: '{key}'" in info.value.message()
                assert await grpc_client.get_system_shared_memory_status(as_json=True) == {}
                # An output placed in the refused region goes nowhere: the region does not exist.
                inputs = [grpc_aio.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
                for tensor in inputs:
                    tensor.set_data_from_numpy(np.ones(4, np.float32))
                output = grpc_aio.InferRequestedOutput("OUTPUT0")
                output.set_shared_memory("evil", 16)
                with pytest.raises(InferenceServerException):
                    await grpc_client.infer("add_sub", inputs, outputs=[output])
                # A valid key still works, over both endpoints.
                await grpc_client.register_system_shared_memory("valid", valid_key, 64)
                await http_client.register_system_shared_memory("valid_http", valid_key, 32, offset=32)
                status = await http_client.get_system_shared_memory_status()
                assert sorted(r["name"] for r in status) == ["valid", "valid_http"]
                output.set_shared_memory("valid", 16)
                await grpc_client.infer("add_sub", inputs, outputs=[output])
                np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [4]), [2, 2, 2, 2])
                await grpc_client.unregister_system_shared_memory()
            finally:
                await grpc_client.close()
                await http_client.close()
    finally:
        os.unlink(os.path.join(SHM_ROOT, link_key[1:]))
        shm.destroy_shared_memory_region(handle)
    assert target.read_bytes() == SECRET


# ---- 2. parameter types ------------------------------------------------------------------------------
GRPC_BAD_PARAMETERS = [
    ({"sequence_id": ("double_param", 1.5)},
     "invalid value type for 'sequence_id' parameter, expected int64_param, uint64_param or string_param."),
    ({"sequence_id": ("bool_param", True)}, "invalid value type for 'sequence_id' parameter"),
    ({"sequence_id": ("int64_param", -1)}, "invalid value for 'sequence_id', expected value >= 0."),
    ({"sequence_start": ("int64_param", 1)}, "invalid value type for 'sequence_start' parameter, expected bool_param."),
    ({"sequence_end": ("string_param", "true")}, "invalid value type for 'sequence_end' parameter, expected bool_param."),
    ({"priority": ("string_param", "abc")},
     "invalid value type for 'priority' parameter, expected int64_param or uint64_param."),
    ({"priority": ("bool_param", True)}, "invalid value type for 'priority' parameter"),
    ({"priority": ("double_param", 2.5)}, "invalid value type for 'priority' parameter"),
    ({"priority": ("int64_param", -1)}, "invalid value for 'priority', expected value >= 0."),
    ({"timeout": ("double_param", 1.0)}, "invalid value type for 'timeout' parameter"),
    ({"timeout": ("bool_param", False)}, "invalid value type for 'timeout' parameter"),
    ({"timeout": ("int64_param", -5)}, "invalid value for 'timeout', expected value >= 0."),
    ({"triton_enable_empty_final_response": ("int64_param", 1)},
     "invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param."),
    # two bad ones: the error names the same one whatever order the client's map holds them in
    ({"timeout": ("string_param", "x"), "sequence_id": ("double_param", 1.5)},
     "invalid value type for 'sequence_id' parameter"),
    ({"sequence_id": ("double_param", 1.5), "timeout": ("string_param", "x")},
     "invalid value type for 'sequence_id' parameter"),
]


async def test_grpc_parameter_types_are_checked(repo, running):
    async with running(repo, allow_http=False) as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            for params, message in GRPC_BAD_PARAMETERS:
                error = await grpc_error(stub.ModelInfer(add_sub_request(**params)))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (params, error.details())
                assert message in error.details(), (params, error.details())
            request = add_sub_request()
            request.parameters["sequence_id"].SetInParent()  # present, but no field set
            error = await grpc_error(stub.ModelInfer(request))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            # The stream answers the same error in its message and stays open for the next request.
            bad = add_sub_request(sequence_id=("int64_param", -1))
            replies = [r async for r in stub.ModelStreamInfer(iter([bad, add_sub_request()]))]
            assert "invalid value for 'sequence_id'" in replies[0].error_message + replies[1].error_message
            assert sum(not r.error_message for r in replies) == 1
            # The types Triton's clients send are accepted: uint64 priority, int64 timeout, uint64/string ids.
            ok = add_sub_request(priority=("uint64_param", 1), timeout=("int64_param", 10_000_000))
            assert len((await stub.ModelInfer(ok)).raw_output_contents) == 2
            for field, value, corrid in (("uint64_param", 2**64 - 1, b"int:18446744073709551615"),
                                         ("string_param", "utt-1", b"str:utt-1")):
                request = pb.ModelInferRequest(model_name="sequence_echo")
                request.inputs.add(name="X", datatype="INT32", shape=[1])
                request.raw_input_contents.append(np.array([1], np.int32).tobytes())
                setattr(request.parameters["sequence_id"], field, value)
                request.parameters["sequence_start"].bool_param = True
                response = await stub.ModelInfer(request)
                assert corrid in response.raw_output_contents[0]


HTTP_BAD_PARAMETERS = [
    ({"sequence_id": 1.5}, "Unable to parse 'sequence_id'"),
    ({"sequence_id": True}, "Unable to parse 'sequence_id'"),
    ({"sequence_id": -1}, "Unable to parse 'sequence_id'"),
    ({"sequence_id": 2**64}, "Unable to parse 'sequence_id'"),
    ({"sequence_id": None}, "Unable to parse 'sequence_id'"),
    ({"sequence_start": 1}, "Unable to parse 'sequence_start'"),
    ({"priority": "abc"}, "Unable to parse 'priority'"),
    ({"priority": True}, "Unable to parse 'priority'"),
    ({"priority": 2.5}, "Unable to parse 'priority'"),
    ({"priority": -1}, "Unable to parse 'priority'"),
    ({"timeout": -5}, "Unable to parse 'timeout'"),
    ({"timeout": "10"}, "Unable to parse 'timeout'"),
    ({"binary_data_output": "yes"}, "Unable to parse 'binary_data_output'"),
]


async def test_http_parameter_rules_agree_with_grpc(repo, running):
    import aiohttp

    async with running(repo, allow_grpc=False) as server:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{server.http_port}") as http:
            inputs = [{"name": n, "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]} for n in ("INPUT0", "INPUT1")]
            for params, message in HTTP_BAD_PARAMETERS:
                async with http.post("/v2/models/add_sub/infer", json={"inputs": inputs, "parameters": params}) as r:
                    assert r.status == 400, params
                    assert message in (await r.json())["error"], params
            output = {"name": "OUTPUT0", "parameters": {"binary_data": 1}}
            async with http.post("/v2/models/add_sub/infer", json={"inputs": inputs, "outputs": [output]}) as r:
                assert r.status == 400 and "Unable to parse 'binary_data'" in (await r.json())["error"]
            params = {"priority": 1, "timeout": 10_000_000, "binary_data_output": False}
            async with http.post("/v2/models/add_sub/infer", json={"inputs": inputs, "parameters": params}) as r:
                assert r.status == 200


async def test_shared_memory_parameters_are_checked(repo, running):
    async with running(repo, allow_http=False) as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            cases = [
                ({"shared_memory_region": ("string_param", "r"), "shared_memory_byte_size": ("string_param", "16")},
                 "invalid value type for 'shared_memory_byte_size' parameter for tensor 'INPUT0', expected int64_param."),
                ({"shared_memory_region": ("string_param", "r")},
                 "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor "
                 "'INPUT0'"),
                ({"shared_memory_offset": ("int64_param", 0)},
                 "'shared_memory_offset' can not be specified without 'shared_memory_region' parameter"),
                ({"shared_memory_region": ("int64_param", 1), "shared_memory_byte_size": ("int64_param", 16)},
                 "invalid value type for 'shared_memory_region' parameter for tensor 'INPUT0', expected string_param."),
            ]
            for params, message in cases:
                request = add_sub_request()
                for key, (field, value) in params.items():
                    setattr(request.inputs[0].parameters[key], field, value)
                error = await grpc_error(stub.ModelInfer(request))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and message in error.details(), error.details()


# ---- 3. sizes, shapes and contents -------------------------------------------------------------------
async def test_raw_and_typed_contents_together_are_refused(repo, running):
    async with running(repo, allow_http=False) as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            request = add_sub_request()
            request.inputs[1].contents.fp32_contents.extend([9, 9, 9, 9])
            error = await grpc_error(stub.ModelInfer(request))
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert error.details() == (
                "contents field must not be specified when using raw_input_contents for 'INPUT1' for model 'add_sub'"
            )
            request = add_sub_request()
            request.inputs[0].parameters["shared_memory_region"].string_param = "r"
            request.inputs[0].parameters["shared_memory_byte_size"].int64_param = 16
            request.inputs[0].contents.fp32_contents.extend([9, 9, 9, 9])
            error = await grpc_error(stub.ModelInfer(request))
            assert "unexpected 'content' provided when using shared memory for input tensor 'INPUT0'" in error.details()


async def test_overflowing_shapes_are_invalid_argument(repo, running):
    import aiohttp

    huge = [0, 2**62, 2**62]
    async with running(repo) as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            for raw in (True, False):
                request = pb.ModelInferRequest(model_name="add_sub")
                for name in ("INPUT0", "INPUT1"):
                    request.inputs.add(name=name, datatype="FP32", shape=huge)
                    if raw:
                        request.raw_input_contents.append(b"")
                error = await grpc_error(stub.ModelInfer(request))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
                assert "overflows int64" in error.details()
        async with aiohttp.ClientSession(f"http://127.0.0.1:{server.http_port}") as http:
            for shape in (huge, [10**30]):
                body = {"inputs": [{"name": "INPUT0", "shape": shape, "datatype": "FP32", "data": []}]}
                async with http.post("/v2/models/add_sub/infer", json=body) as r:
                    assert r.status == 400 and "overflows int64" in (await r.json())["error"]
                header = b'{"inputs":[{"name":"INPUT0","shape":%s,"datatype":"FP32","parameters":{"binary_data_size":0}}]}' % (
                    str(shape).encode())
                async with http.post("/v2/models/add_sub/infer", data=header,
                                     headers={"Inference-Header-Content-Length": str(len(header))}) as r:
                    assert r.status == 400 and "overflows int64" in (await r.json())["error"]


async def test_deeply_nested_json_is_a_clear_400(repo, running):
    import aiohttp

    async with running(repo, allow_grpc=False) as server:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{server.http_port}") as http:
            for body in (b"[" * 100_000, b'{"inputs":' + b"[" * 100_000):
                async with http.post("/v2/models/add_sub/infer", data=body) as r:
                    assert r.status == 400
                    assert "failed to parse the request JSON buffer: nesting is too deep" in (await r.json())["error"]
            async with http.post("/v2/repository/index", data=b"{" * 50_000) as r:
                assert r.status == 400
            async with http.get("/v2/health/ready") as r:
                assert r.status == 200


async def read_to_close(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status_line = await reader.readline()
    rest = await reader.read()  # to EOF: the server closes the connection after a 413
    return int(status_line.split()[1]), rest


async def test_http_body_cap_is_enforced_before_buffering(repo, running):
    cap = 1 << 20
    async with running(repo, allow_grpc=False, http_max_input_size=cap) as server:
        # A declared Content-Length of 10^12: 413 at once, without sending any of the body.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
        writer.write(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000000000000\r\n\r\n")
        await writer.drain()
        status, rest = await asyncio.wait_for(read_to_close(reader), 5)
        writer.close()
        assert status == 413 and b"exceeds the maximum allowed value of 1048576 bytes" in rest
        # A chunked body of up to 1.1 GB: cut off soon after the cap; the server reads a small part of it.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.http_port)
        writer.write(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (64 * 1024, b" " * (64 * 1024))
        sent = 0

        async def send_forever() -> None:
            nonlocal sent
            while sent < 1_100_000_000:
                writer.write(chunk)
                await writer.drain()
                sent += 64 * 1024

        sender = asyncio.get_running_loop().create_task(send_forever())
        try:
            status_line = await asyncio.wait_for(reader.readline(), 30)
            sent_when_answered = sent
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
        rest = await asyncio.wait_for(reader.read(), 5)  # the server closes after its linger
        writer.close()
        assert status_line.startswith(b"HTTP/1.1 413") and b"exceeds the maximum allowed value" in rest
        assert sent_when_answered < 64 * cap, sent_when_answered  # socket buffers hold a few MB, not 1.1 GB
        # A gzip body that inflates past the cap (10 MiB of zeros in ~10 KB) is cut off as it inflates.
        import aiohttp
        import gzip

        async with aiohttp.ClientSession(f"http://127.0.0.1:{server.http_port}") as http:
            bomb = gzip.compress(b"0" * (10 << 20))
            async with http.post("/v2/models/add_sub/infer", data=bomb, headers={"Content-Encoding": "gzip"}) as r:
                assert r.status == 413
        # Under the cap, requests are served as before.
        client = http_aio.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            inputs = [http_aio.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(np.ones(4, np.float32))
            assert list((await client.infer("add_sub", inputs)).as_numpy("OUTPUT0")) == [2, 2, 2, 2]
        finally:
            await client.close()


def test_http_max_input_size_flag():
    args = build_parser().parse_args(["--model-repository", "/tmp"])
    assert settings_from_args(args).http_max_input_size == 64 << 20  # Triton's default
    args = build_parser().parse_args(["--model-repository", "/tmp", "--http-max-input-size", "4096"])
    assert settings_from_args(args).http_max_input_size == 4096


async def test_grpc_log_settings_types_are_checked(repo, running):
    """A string log_verbose_level used to be stored, then failed int() in every later LogSettings call."""
    async with running(repo, allow_http=False) as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            for key, field, value in (("log_verbose_level", "string_param", "abc"), ("log_info", "uint32_param", 1),
                                      ("log_file", "bool_param", True)):
                request = pb.LogSettingsRequest()
                setattr(request.settings[key], field, value)
                error = await grpc_error(stub.LogSettings(request))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
                assert f"log setting '{key}' expects" in error.details()
            request = pb.LogSettingsRequest()
            request.settings["log_verbose_level"].uint32_param = 1
            response = await stub.LogSettings(request)
            assert response.settings["log_verbose_level"].uint32_param == 1
            request.settings["log_verbose_level"].uint32_param = 0
            await stub.LogSettings(request)
