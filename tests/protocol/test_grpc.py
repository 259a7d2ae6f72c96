"""The gRPC service driven by the real tritonclient (sync and aio) over 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import json
import queue
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPO, PYTHON_MODELS, copy_model
from tests.helpers.onnx_models import identity_model, model_folder
from onnx import TensorProto

IDENTITY_FP16 = """
name: "identity_fp16"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "INPUT0", data_type: TYPE_FP16, dims: [ -1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP16, dims: [ -1 ] } ]
dynamic_batching { }
"""

BROKEN = """
name: "broken"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 3 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 3 ] } ]
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    copy_model(root, BUNDLED_REPO / "add_sub")
    copy_model(root, PYTHON_MODELS / "bytes_upper")
    copy_model(root, PYTHON_MODELS / "repeat_decoupled")
    model_folder(root, "identity_fp16", IDENTITY_FP16, identity_model, elem_type=TensorProto.FLOAT16, shape=["b", "n"])
    return root


@pytest.fixture
def running(running):
    """These tests need gRPC only."""
    return lambda *repos, **kw: running(*repos, **{"allow_http": False, **kw})


def add_sub_inputs(a: np.ndarray, b: np.ndarray, module=grpcclient):
    inputs = [module.InferInput("INPUT0", list(a.shape), "FP32"), module.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def client_for(server, module=aioclient):
    return module.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")


async def test_health_metadata_and_config(repo, running):
    async with running(repo) as server:
        client = client_for(server)
        assert await client.is_server_live()
        assert await client.is_server_ready()
        assert await client.is_model_ready("add_sub")
        assert not await client.is_model_ready("nope")
        meta = await client.get_server_metadata(as_json=True)
        assert meta["name"] == "triton" and "sequence" in meta["extensions"]
        model = await client.get_model_metadata("identity_fp16", as_json=True)
        assert model["versions"] == ["1"] and model["platform"] == "onnxruntime_onnx"
        assert model["inputs"] == [{"name": "INPUT0", "datatype": "FP16", "shape": ["-1", "-1"]}]
        config = (await client.get_model_config("add_sub", as_json=True))["config"]
        assert config["backend"] == "python" and config["input"][0]["name"] == "INPUT0"
        assert config["instance_group"][0]["kind"] == "KIND_CPU"
        index = await client.get_model_repository_index(as_json=True)
        assert {m["name"] for m in index["models"]} == {"add_sub", "bytes_upper", "repeat_decoupled", "identity_fp16"}
        assert all(m["state"] == "READY" for m in index["models"])
        await client.close()


async def test_fp32_bytes_fp16_round_trips_and_statistics(repo, running):
    async with running(repo) as server:
        client = client_for(server)
        a, b = np.array([1, 2, 3, 4], np.float32), np.array([0.5, 0.5, 1, 1], np.float32)
        result = await client.infer("add_sub", add_sub_inputs(a, b, aioclient))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)

        text = np.array([b"hello", "wörld".encode()], dtype=np.object_)
        inp = aioclient.InferInput("TEXT", [2], "BYTES")
        inp.set_data_from_numpy(text)
        result = await client.infer("bytes_upper", [inp])
        assert list(result.as_numpy("UPPER")) == [b"HELLO", "WÖRLD".encode()]
        np.testing.assert_array_equal(result.as_numpy("LENGTH"), [5, len("wörld".encode())])

        half = np.arange(10, dtype=np.float16).reshape(2, 5) / 3
        inp = aioclient.InferInput("INPUT0", [2, 5], "FP16")
        inp.set_data_from_numpy(half)
        result = await client.infer("identity_fp16", [inp], outputs=[aioclient.InferRequestedOutput("OUTPUT0")])
        out = result.as_numpy("OUTPUT0")
        assert out.dtype == np.float16 and out.shape == (2, 5)
        np.testing.assert_array_equal(out, half)

        stats = (await client.get_inference_statistics("identity_fp16", as_json=True))["model_stats"][0]
        assert stats["inference_count"] == "2" and stats["execution_count"] == "1"
        assert stats["inference_stats"]["success"]["count"] == "1"
        assert stats["batch_stats"][0]["batch_size"] == "2"
        all_stats = await client.get_inference_statistics(as_json=True)
        assert len(all_stats["model_stats"]) == 4
        await client.close()


async def test_sync_client_in_a_thread(repo, running):
    async with running(repo) as server:
        def call():
            client = client_for(server, grpcclient)
            try:
                a = np.ones(4, np.float32)
                return client.infer("add_sub", add_sub_inputs(a, 2 * a)).as_numpy("OUTPUT0")
            finally:
                client.close()

        np.testing.assert_array_equal(await asyncio.to_thread(call), np.full(4, 3, np.float32))


async def expect_error(coro, code: grpc.StatusCode, text: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        await coro
    assert info.value.status() == f"StatusCode.{code.name}", info.value
    assert text in info.value.message(), info.value.message()


async def test_error_cases_have_triton_codes_and_words(repo, running):
    async with running(repo) as server:
        client = client_for(server)
        a = np.ones(4, np.float32)
        await expect_error(client.infer("nope", add_sub_inputs(a, a, aioclient)), grpc.StatusCode.NOT_FOUND,
                           "Request for unknown model: 'nope' is not found")
        await expect_error(client.infer("add_sub", add_sub_inputs(a, a, aioclient), model_version="7"),
                           grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'add_sub' version 7 is not found")
        wrong = aioclient.InferInput("INPUT0", [4], "FP64")
        wrong.set_data_from_numpy(np.ones(4, np.float64))
        ok = aioclient.InferInput("INPUT1", [4], "FP32")
        ok.set_data_from_numpy(a)
        await expect_error(client.infer("add_sub", [wrong, ok]), grpc.StatusCode.INVALID_ARGUMENT,
                           "inference input 'INPUT0' data-type is 'FP64', but model 'add_sub' expects 'FP32'")
        await expect_error(client.infer("add_sub", add_sub_inputs(np.ones(3, np.float32), np.ones(3, np.float32), aioclient)),
                           grpc.StatusCode.INVALID_ARGUMENT, "unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [4], got [3]")
        await expect_error(client.infer("add_sub", add_sub_inputs(a, a, aioclient)[:1]), grpc.StatusCode.INVALID_ARGUMENT,
                           "expected 2 inputs but got 1 inputs for model 'add_sub'")
        extra = aioclient.InferInput("EXTRA", [4], "FP32")
        extra.set_data_from_numpy(a)
        await expect_error(client.infer("add_sub", add_sub_inputs(a, a, aioclient) + [extra]),
                           grpc.StatusCode.INVALID_ARGUMENT, "unexpected inference input 'EXTRA' for model 'add_sub'")
        big = aioclient.InferInput("INPUT0", [9, 3], "FP16")
        big.set_data_from_numpy(np.zeros((9, 3), np.float16))
        await expect_error(client.infer("identity_fp16", [big]), grpc.StatusCode.INVALID_ARGUMENT,
                           "inference request batch-size must be <= 8 for 'identity_fp16'")
        inp = aioclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([1], np.int32))
        await expect_error(client.infer("repeat_decoupled", [inp]), grpc.StatusCode.UNIMPLEMENTED,
                           "ModelInfer RPC doesn't support models with decoupled transaction policy")
        await expect_error(client.get_inference_statistics("nope"), grpc.StatusCode.INVALID_ARGUMENT,
                           "requested model 'nope' is not available")
        assert await client.is_server_ready()  # nothing above broke the server
        await client.close()


async def test_malformed_bytes_and_oversize_messages(repo, running):
    from tritonclient.grpc import service_pb2 as pb, service_pb2_grpc

    async with running(repo, max_message_bytes=64 * 1024) as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            request = pb.ModelInferRequest(model_name="bytes_upper")
            request.inputs.add(name="TEXT", datatype="BYTES", shape=[1])
            request.raw_input_contents.append(b"\x10\x00\x00\x00abc")  # claims 16 bytes, has 3
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ModelInfer(request)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "exceeds the remaining 3 bytes of input 'TEXT'" in info.value.details()

            request = pb.ModelInferRequest(model_name="add_sub")
            request.inputs.add(name="INPUT0", datatype="FP32", shape=[4])
            request.raw_input_contents.append(b"\x00" * 12)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ModelInfer(request)
            assert "unexpected total byte size 12 for input 'INPUT0', expecting 16" in info.value.details()

            request = pb.ModelInferRequest(model_name="add_sub")
            request.inputs.add(name="INPUT0", datatype="FP32", shape=[4])
            request.raw_input_contents.append(b"\x00" * (128 * 1024))
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ModelInfer(request)
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_typed_contents_are_accepted(repo, running):
    from tritonclient.grpc import service_pb2 as pb, service_pb2_grpc

    async with running(repo) as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            request = pb.ModelInferRequest(model_name="add_sub")
            for name, values in (("INPUT0", [1, 2, 3, 4]), ("INPUT1", [4, 3, 2, 1])):
                tensor = request.inputs.add(name=name, datatype="FP32", shape=[4])
                tensor.contents.fp32_contents.extend(values)
            response = await stub.ModelInfer(request)
            out = np.frombuffer(response.raw_output_contents[0], np.float32)
            np.testing.assert_array_equal(out, [5, 5, 5, 5])


def test_stream_survives_bad_requests_then_serves_good_ones(repo):
    """Sync tritonclient stream in its own server process-thread: three bad requests, then good ones."""
    import threading

    from tests.conftest import running_server

    ready = threading.Event()
    stop = None
    holder = {}

    def serve():
        async def main():
            nonlocal stop
            stop = asyncio.Event()
            async with running_server(repo, allow_http=False) as server:
                holder["port"] = server.grpc_port
                ready.set()
                await stop.wait()

        loop = asyncio.new_event_loop()
        holder["loop"] = loop
        loop.run_until_complete(main())
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(30)
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{holder['port']}")
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        a = np.ones(4, np.float32)
        client.async_stream_infer("nope", add_sub_inputs(a, a), request_id="bad1")
        client.async_stream_infer("add_sub", add_sub_inputs(np.ones(3, np.float32), np.ones(3, np.float32)), request_id="bad2")
        wrong = grpcclient.InferInput("INPUT0", [4], "INT32")
        wrong.set_data_from_numpy(np.ones(4, np.int32))
        client.async_stream_infer("add_sub", [wrong, add_sub_inputs(a, a)[1]], request_id="bad3")
        errors = [results.get(timeout=10) for _ in range(3)]
        assert all(result is None and error is not None for result, error in errors)
        messages = sorted(str(error) for _, error in errors)
        assert any("Request for unknown model: 'nope' is not found" in m for m in messages)
        assert any("data-type is 'INT32'" in m for m in messages)
        for i in range(3):
            client.async_stream_infer("add_sub", add_sub_inputs(a * i, a), request_id=f"good{i}")
        goods = [results.get(timeout=10) for _ in range(3)]
        assert all(error is None for _, error in goods)
        sums = sorted(float(result.as_numpy("OUTPUT0")[0]) for result, _ in goods)
        assert sums == [1.0, 2.0, 3.0]
        # A decoupled model on the same stream: three responses then the empty final one (asked for).
        inp = grpcclient.InferInput("IN", [1], "INT32")
        inp.set_data_from_numpy(np.array([10], np.int32))
        client.async_stream_infer("repeat_decoupled", [inp], enable_empty_final_response=True)
        got = [results.get(timeout=10) for _ in range(4)]
        assert all(error is None for _, error in got)
        finals = [r.get_response().parameters["triton_final_response"].bool_param for r, _ in got]
        assert finals == [False, False, False, True]
        assert [int(r.as_numpy("OUT")[0]) for r, _ in got[:3]] == [10, 11, 12]
    finally:
        client.stop_stream()
        client.close()
        holder["loop"].call_soon_threadsafe(stop.set)
        thread.join(10)


async def test_explicit_load_unload_with_override(repo, running):
    async with running(repo, model_control_mode="explicit", load_models=("add_sub",)) as server:
        client = client_for(server)
        assert await client.is_model_ready("add_sub")
        assert not await client.is_model_ready("bytes_upper")
        index = {m["name"]: m for m in (await client.get_model_repository_index(as_json=True))["models"]}
        assert index["bytes_upper"].get("state", "") == ""
        await client.load_model("bytes_upper")
        assert await client.is_model_ready("bytes_upper")
        await client.unload_model("add_sub")
        assert not await client.is_model_ready("add_sub")
        index = {m["name"]: m for m in (await client.get_model_repository_index(as_json=True))["models"]}
        assert index["add_sub"]["state"] == "UNAVAILABLE"
        # A config override: the same ONNX file served as a model with max_batch_size 2.
        override = {
            "name": "identity_fp16", "backend": "onnxruntime", "max_batch_size": 2,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP16", "dims": [-1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP16", "dims": [-1]}],
        }
        await client.load_model("identity_fp16", config=json.dumps(override))
        config = (await client.get_model_config("identity_fp16", as_json=True))["config"]
        assert config["max_batch_size"] == 2
        await expect_error(client.load_model("doesnotexist"), grpc.StatusCode.INTERNAL,
                           "failed to load 'doesnotexist', failed to poll from model repository")
        await client.close()


async def test_broken_model_is_unavailable_while_others_serve(repo, running):
    broken = repo / "broken"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text(BROKEN)
    (broken / "1" / "model.onnx").write_bytes(b"this is not an onnx model")
    async with running(repo, exit_on_error=False) as server:
        client = client_for(server)
        assert not await client.is_server_ready()  # strict readiness
        assert not await client.is_model_ready("broken")
        index = {m["name"]: m for m in (await client.get_model_repository_index(as_json=True))["models"]}
        assert index["broken"]["state"] == "UNAVAILABLE" and index["broken"]["reason"]
        a = np.ones(4, np.float32)
        result = await client.infer("add_sub", add_sub_inputs(a, a, aioclient))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)
        await expect_error(client.infer("broken", []), grpc.StatusCode.NOT_FOUND, "'broken' has no available versions")
        await client.close()


async def test_log_trace_and_cuda_shared_memory(repo, running):
    async with running(repo) as server:
        client = client_for(server)
        settings = await client.update_log_settings({"log_verbose_level": 1}, as_json=True)
        assert settings["settings"]["log_verbose_level"]["uint32_param"] == 1
        trace = await client.update_trace_settings(settings={"trace_rate": "50"}, as_json=True)
        assert trace["settings"]["trace_rate"]["value"] == ["50"]
        trace = await client.get_trace_settings(model_name="add_sub", as_json=True)
        assert trace["settings"]["trace_rate"]["value"] == ["50"]
        status = await client.get_cuda_shared_memory_status(as_json=True)
        assert status.get("regions", {}) == {}
        await expect_error(client.register_cuda_shared_memory("r", base64.b64encode(b"handle"), 0, 16), grpc.StatusCode.UNAVAILABLE,
                           "no CUDA device")
        await client.close()


async def test_system_shared_memory_inputs_and_outputs(repo, running):
    import tritonclient.utils.shared_memory as shm

    async with running(repo) as server:
        client = client_for(server)
        size = 16
        in_handle = shm.create_shared_memory_region("in_region", "/asr_test_in", 2 * size)
        out_handle = shm.create_shared_memory_region("out_region", "/asr_test_out", 2 * size)
        try:
            a, b = np.array([1, 2, 3, 4], np.float32), np.array([10, 20, 30, 40], np.float32)
            shm.set_shared_memory_region(in_handle, [a, b])
            await client.register_system_shared_memory("in_region", "/asr_test_in", 2 * size)
            await client.register_system_shared_memory("out_region", "/asr_test_out", 2 * size)
            status = await client.get_system_shared_memory_status(as_json=True)
            assert set(status["regions"]) == {"in_region", "out_region"}
            inputs = [aioclient.InferInput("INPUT0", [4], "FP32"), aioclient.InferInput("INPUT1", [4], "FP32")]
            inputs[0].set_shared_memory("in_region", size)
            inputs[1].set_shared_memory("in_region", size, offset=size)
            outputs = [aioclient.InferRequestedOutput("OUTPUT0"), aioclient.InferRequestedOutput("OUTPUT1")]
            outputs[0].set_shared_memory("out_region", size)
            outputs[1].set_shared_memory("out_region", size, offset=size)
            await client.infer("add_sub", inputs, outputs=outputs)
            total = shm.get_contents_as_numpy(out_handle, np.float32, [4])
            np.testing.assert_array_equal(total, a + b)
            diff = shm.get_contents_as_numpy(out_handle, np.float32, [4], offset=size)
            np.testing.assert_array_equal(diff, a - b)
            await expect_error(client.register_system_shared_memory("in_region", "/asr_test_in", 8),
                               grpc.StatusCode.ALREADY_EXISTS, "already in manager")
            await client.unregister_system_shared_memory()
            status = await client.get_system_shared_memory_status(as_json=True)
            assert status.get("regions", {}) == {}
        finally:
            shm.destroy_shared_memory_region(in_handle)
            shm.destroy_shared_memory_region(out_handle)
        await client.close()


async def test_model_of_an_unsupported_backend_is_unavailable_with_its_reason(repo, running):
    pipeline = repo / "pipeline"
    (pipeline / "1").mkdir(parents=True)
    (pipeline / "config.pbtxt").write_text(
        'name: "pipeline"\nbackend: "dali"\nmax_batch_size: 4\n'
        'input [ { name: "X", data_type: TYPE_UINT8, dims: [ -1 ] } ]\n'
        'output [ { name: "Y", data_type: TYPE_FP32, dims: [ 3 ] } ]\n'
    )
    # A TensorRT engine that cannot load here (no TensorRT, or these bytes are no engine) fails alone too.
    engine = repo / "engine"
    (engine / "1").mkdir(parents=True)
    (engine / "1" / "model.plan").write_bytes(b"not an engine")
    (engine / "config.pbtxt").write_text(
        'name: "engine"\nplatform: "tensorrt_plan"\nmax_batch_size: 4\n'
        'input [ { name: "X", data_type: TYPE_FP32, dims: [ 3 ] } ]\n'
        'output [ { name: "Y", data_type: TYPE_FP32, dims: [ 3 ] } ]\n'
    )
    async with running(repo, exit_on_error=False) as server:
        client = client_for(server)
        index = {m["name"]: m for m in (await client.get_model_repository_index(as_json=True))["models"]}
        assert index["pipeline"]["state"] == "UNAVAILABLE"
        assert "unknown backend 'dali'" in index["pipeline"]["reason"]
        assert index["engine"]["state"] == "UNAVAILABLE"
        assert "unable to load model 'engine'" in index["engine"]["reason"]
        assert await client.is_model_ready("add_sub")
        await client.close()
