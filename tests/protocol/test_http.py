"""The HTTP/REST endpoint driven by the real tritonclient.http (aio and sync) and by raw JSON over 127.0.0.1."""

from __future__ import annotations

import asyncio
import gzip
import json
import struct
import textwrap
from pathlib import Path

import aiohttp
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from asr_server.server import Server
from asr_server.settings import ServerSettings
from tests.conftest import BUNDLED_REPO, PYTHON_MODELS, copy_model

ECHO_CONFIG = """
name: "echo_bytes"
backend: "python"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_STRING, dims: [ -1 ] } ]
output [ { name: "OUT", data_type: TYPE_STRING, dims: [ -1 ] } ]
"""

ECHO_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]
"""

DECOUPLED_CONFIG = """
name: "count_decoupled"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "N", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "I", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""

DECOUPLED_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for i in range(int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy()[0])):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("I", np.array([i], np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

A = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
B = np.array([0.5, 0.5, 1.0, 1.0], np.float32)


def write_model(repo: Path, name: str, config: str, model: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(textwrap.dedent(config))
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(model))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    copy_model(root, BUNDLED_REPO / "add_sub")
    write_model(root, "echo_bytes", ECHO_CONFIG, ECHO_MODEL)
    write_model(root, "count_decoupled", DECOUPLED_CONFIG, DECOUPLED_MODEL)
    return root


def settings(repo: Path, **overrides) -> ServerSettings:
    base = dict(
        model_repositories=(repo,), grpc_address="127.0.0.1", grpc_port=0, http_address="127.0.0.1", http_port=0,
        metrics_address="127.0.0.1", metrics_port=0, exit_timeout_secs=2.0,
    )
    return ServerSettings(**{**base, **overrides})


def add_sub_inputs(a: np.ndarray, b: np.ndarray, binary: bool = True, module=aioclient):
    inputs = [module.InferInput("INPUT0", list(a.shape), "FP32"), module.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs


async def expect_error(coro, status: int, text: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        await coro
    assert info.value.status() == str(status), info.value
    assert text in info.value.message(), info.value.message()


async def test_health_metadata_config_and_index(repo):
    async with Server(settings(repo)) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            assert await client.is_server_live()
            assert await client.is_server_ready()
            assert await client.is_model_ready("add_sub")
            assert await client.is_model_ready("add_sub", "1")
            assert not await client.is_model_ready("nope")
            meta = await client.get_server_metadata()
            assert meta["name"] == "triton" and "binary_tensor_data" in meta["extensions"]
            model = await client.get_model_metadata("add_sub")
            assert model == {
                "name": "add_sub", "versions": ["1"], "platform": "python",
                "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4]},
                           {"name": "INPUT1", "datatype": "FP32", "shape": [4]}],
                "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [4]},
                            {"name": "OUTPUT1", "datatype": "FP32", "shape": [4]}],
            }
            config = await client.get_model_config("add_sub")
            assert config["name"] == "add_sub" and config["backend"] == "python"
            assert config["max_batch_size"] == 0  # defaults are written, as Triton does
            assert config["input"][0]["dims"] == [4]  # int64 as numbers, not gRPC JSON's strings
            assert config["input"][0]["data_type"] == "TYPE_FP32"
            assert config["instance_group"][0]["kind"] == "KIND_CPU" and config["instance_group"][0]["count"] == 1
            decoupled = await client.get_model_config("count_decoupled")
            assert decoupled["model_transaction_policy"]["decoupled"] is True
            index = await client.get_model_repository_index()
            assert sorted(index, key=lambda m: m["name"]) == [
                {"name": "add_sub", "version": "1", "state": "READY"},
                {"name": "count_decoupled", "version": "1", "state": "READY"},
                {"name": "echo_bytes", "version": "1", "state": "READY"},
            ]
        finally:
            await client.close()


async def test_infer_binary_json_bytes_and_statistics(repo):
    async with Server(settings(repo)) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            result = await client.infer("add_sub", add_sub_inputs(A, B), request_id="r1")  # binary both ways
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
            assert result.get_response()["id"] == "r1"
            assert result.get_output("OUTPUT0")["parameters"] == {"binary_data_size": 16}

            outputs = [aioclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
            result = await client.infer("add_sub", add_sub_inputs(A, 2 * B, binary=False), outputs=outputs)
            assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
            assert result.get_output("OUTPUT1")["data"] == [0.0, 1.0, 1.0, 2.0]
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - 2 * B)

            result = await client.infer("add_sub", add_sub_inputs(A, B), model_version="1",
                                        request_compression_algorithm="gzip", response_compression_algorithm="gzip")
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)

            text = np.array(["hello".encode(), "wörld".encode(), b"\xff\x00raw"], dtype=np.object_)
            inp = aioclient.InferInput("IN", [3], "BYTES")
            inp.set_data_from_numpy(text)
            result = await client.infer("echo_bytes", [inp])
            assert list(result.as_numpy("OUT")) == list(text)  # binary keeps non-UTF-8 bytes intact

            words = np.array(["hello".encode(), "wörld".encode()], dtype=np.object_)
            inp = aioclient.InferInput("IN", [2], "BYTES")
            inp.set_data_from_numpy(words, binary_data=False)
            result = await client.infer("echo_bytes", [inp], outputs=[aioclient.InferRequestedOutput("OUT", binary_data=False)])
            assert result.get_output("OUT")["data"] == ["hello", "wörld"]

            stats = (await client.get_inference_statistics("add_sub"))["model_stats"]
            assert len(stats) == 1 and stats[0]["name"] == "add_sub" and stats[0]["version"] == "1"
            assert stats[0]["inference_count"] == 3 and stats[0]["execution_count"] == 3  # numbers, not strings
            assert stats[0]["inference_stats"]["success"]["count"] == 3
            assert stats[0]["inference_stats"]["success"]["ns"] > 0
            assert stats[0]["inference_stats"]["fail"] == {"count": 0, "ns": 0}
            assert stats[0]["batch_stats"][0]["batch_size"] == 1
            assert stats[0]["batch_stats"][0]["compute_infer"]["count"] == 3
            assert stats[0]["last_inference"] > 0
            everything = await client.get_inference_statistics()
            assert [s["name"] for s in everything["model_stats"]] == ["add_sub", "count_decoupled", "echo_bytes"]
            assert (await client.get_inference_statistics("add_sub", "1"))["model_stats"][0]["inference_count"] == 3
        finally:
            await client.close()


async def test_error_statuses_and_messages(repo, caplog):
    async with Server(settings(repo)) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            await expect_error(client.infer("nope", add_sub_inputs(A, A)), 404,
                               "Request for unknown model: 'nope' is not found")
            await expect_error(client.get_model_metadata("nope"), 404, "Request for unknown model: 'nope' is not found")
            wrong = aioclient.InferInput("INPUT0", [4], "FP64")
            wrong.set_data_from_numpy(A.astype(np.float64))
            await expect_error(client.infer("add_sub", [wrong, add_sub_inputs(A, A)[1]]), 400,
                               "inference input 'INPUT0' data-type is 'FP64', but model 'add_sub' expects 'FP32'")
            short = np.ones(3, np.float32)
            await expect_error(client.infer("add_sub", add_sub_inputs(short, short)), 400,
                               "unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [4], got [3]")
            half = aioclient.InferInput("INPUT0", [4], "FP16")
            half.set_data_from_numpy(A.astype(np.float16), binary_data=False)
            await expect_error(client.infer("add_sub", [half, add_sub_inputs(A, A)[1]]), 400,
                               "receiving FP16 data via JSON is not supported")
            count = aioclient.InferInput("N", [1], "INT32")
            count.set_data_from_numpy(np.array([2], np.int32))
            await expect_error(client.infer("count_decoupled", [count]), 501,
                               "HTTP end point doesn't support models with decoupled transaction policy")
            await expect_error(client.get_inference_statistics("nope"), 400, "requested model 'nope' is not available")
            await expect_error(client.load_model("add_sub"), 503, "explicit model load / unload is not allowed")
            await expect_error(client.register_cuda_shared_memory("r", b"aGFuZGxl", 0, 16), 503, "no CUDA device")
            await expect_error(client.get_system_shared_memory_status("nope"), 404,
                               "Unable to find system shared memory region: 'nope'")
            assert await client.get_cuda_shared_memory_status() == []
            assert await client.is_server_ready()  # nothing above hurt the server
        finally:
            await client.close()
    # A client mistake is one warning line, without a traceback.
    lines = [r for r in caplog.records if "Request for unknown model: 'nope'" in r.getMessage()]
    assert lines and all(r.levelname == "WARNING" and r.exc_info is None for r in lines)


async def test_raw_json_like_curl(repo):
    async with Server(settings(repo)) as server, aiohttp.ClientSession(f"http://127.0.0.1:{server.http_port}") as http:
        async with http.get("/v2/health/ready") as response:
            assert response.status == 200 and await response.read() == b""
        body = {
            "id": "curl-1",
            "inputs": [
                {"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [[1, 2], [3, 4]]},  # nested lists too
                {"name": "INPUT1", "shape": [4], "datatype": "FP32", "data": [1, 1, 1, 1]},
            ],
        }
        async with http.post("/v2/models/add_sub/infer", json=body) as response:
            assert response.status == 200 and response.content_type == "application/json"
            assert "Inference-Header-Content-Length" not in response.headers
            answer = await response.json()
        assert answer == {
            "model_name": "add_sub", "model_version": "1", "id": "curl-1",
            "outputs": [
                {"name": "OUTPUT0", "datatype": "FP32", "shape": [4], "data": [2.0, 3.0, 4.0, 5.0]},
                {"name": "OUTPUT1", "datatype": "FP32", "shape": [4], "data": [0.0, 1.0, 2.0, 3.0]},
            ],
        }
        # Binary input by hand: a BYTES tensor as (4-byte little-endian length, bytes) after the JSON header.
        raw = b"".join(struct.pack("<I", len(w)) + w for w in (b"ab", b"cde"))
        header = json.dumps({
            "inputs": [{"name": "IN", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": len(raw)}}],
            "parameters": {"binary_data_output": True},
        }).encode()
        async with http.post("/v2/models/echo_bytes/infer", data=header + raw,
                             headers={"Inference-Header-Content-Length": str(len(header))}) as response:
            assert response.status == 200 and response.content_type == "application/octet-stream"
            length = int(response.headers["Inference-Header-Content-Length"])
            content = await response.read()
        assert json.loads(content[:length])["outputs"][0]["parameters"] == {"binary_data_size": len(raw)}
        assert content[length:] == raw
        body["parameters"] = {"sequence_id": -3}
        async with http.post("/v2/models/add_sub/infer", json=body) as response:
            assert response.status == 400
            assert "Unable to parse 'sequence_id'" in (await response.json())["error"]
        # Malformed requests: Triton's JSON error shape with a 400.
        async with http.post("/v2/models/add_sub/infer", data=b"{not json") as response:
            assert response.status == 400 and "failed to parse the request JSON" in (await response.json())["error"]
        async with http.post("/v2/models/add_sub/infer", data=header + raw[:-1],
                             headers={"Inference-Header-Content-Length": str(len(header))}) as response:
            assert response.status == 400
        async with http.post("/v2/models/echo_bytes/infer", data=header + raw + b"extra",
                             headers={"Inference-Header-Content-Length": str(len(header))}) as response:
            assert response.status == 400
            assert "unexpected additional input data for model 'echo_bytes'" in (await response.json())["error"]
        # Large JSON bodies and JSON outputs are converted in a worker thread: same answer.
        words = [f"w{i}" for i in range(20_000)]
        big = {"inputs": [{"name": "IN", "shape": [len(words)], "datatype": "BYTES", "data": words}]}
        async with http.post("/v2/models/echo_bytes/infer", json=big) as response:
            assert response.status == 200 and (await response.json())["outputs"][0]["data"] == words
        async with http.get("/v2/no/such/route") as response:
            assert response.status == 404 and "error" in await response.json()
        async with http.get("/v2/models/stats") as response:
            assert [s["name"] for s in (await response.json())["model_stats"]] == ["add_sub", "count_decoupled", "echo_bytes"]
        gz = gzip.compress(json.dumps(body | {"parameters": {}}).encode())
        async with http.post("/v2/models/add_sub/infer", data=gz, headers={"Content-Encoding": "gzip"}) as response:
            assert response.status == 200 and (await response.json())["outputs"][0]["data"] == [2.0, 3.0, 4.0, 5.0]


async def test_logging_and_trace_settings(repo):
    async with Server(settings(repo)) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            log = await client.get_log_settings()
            assert log["log_verbose_level"] == 0 and log["log_info"] is True and log["log_format"] == "default"
            log = await client.update_log_settings({"log_verbose_level": 1, "log_info": False})
            assert log["log_verbose_level"] == 1 and log["log_info"] is False
            assert (await client.get_log_settings())["log_verbose_level"] == 1
            await expect_error(client.update_log_settings({"log_info": "yes"}), 400, "log setting 'log_info' expects a boolean")
            await expect_error(client.update_log_settings({"log_colour": True}), 400, "unknown log setting 'log_colour'")

            trace = await client.get_trace_settings()
            assert trace["trace_level"] == ["OFF"] and trace["trace_rate"] == "1000"
            trace = await client.update_trace_settings(settings={"trace_rate": "50", "trace_level": ["TIMESTAMPS"]})
            assert trace["trace_rate"] == "50" and trace["trace_level"] == ["TIMESTAMPS"]
            model = await client.update_trace_settings("add_sub", settings={"trace_count": "7"})
            assert model["trace_count"] == "7" and model["trace_rate"] == "50"  # the model inherits global values
            assert (await client.get_trace_settings())["trace_count"] == "-1"
            model = await client.update_trace_settings("add_sub", settings={"trace_count": None})
            assert model["trace_count"] == "-1"
            await expect_error(client.get_trace_settings("nope"), 400, "Request for unknown model : nope")
            await expect_error(client.update_trace_settings(settings={"trace_colour": "red"}), 400, "unknown trace setting")
        finally:
            await client.close()


async def test_explicit_load_unload_with_config_override(repo):
    async with Server(settings(repo, model_control_mode="explicit", load_models=("add_sub",))) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            assert not await client.is_model_ready("echo_bytes")
            index = {m["name"]: m for m in await client.get_model_repository_index()}
            assert index["echo_bytes"] == {"name": "echo_bytes"}  # known, never loaded: name only, as Triton
            await client.load_model("echo_bytes")
            assert await client.is_model_ready("echo_bytes")
            override = {
                "name": "add_sub", "backend": "python", "max_batch_size": 0,
                "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                          {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]}],
                "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                           {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]}],
                "parameters": {"note": {"string_value": "overridden"}},
            }
            await client.load_model("add_sub", config=json.dumps(override))
            config = await client.get_model_config("add_sub")
            assert config["parameters"] == {"note": {"string_value": "overridden"}}
            await client.unload_model("echo_bytes")
            assert not await client.is_model_ready("echo_bytes")
            index = {m["name"]: m for m in await client.get_model_repository_index()}
            assert index["echo_bytes"]["state"] == "UNAVAILABLE" and index["echo_bytes"]["reason"] == "unloaded"
            await expect_error(client.load_model("doesnotexist"), 500,
                               "failed to load 'doesnotexist', failed to poll from model repository")
        finally:
            await client.close()


async def test_system_shared_memory_and_sync_client(repo):
    import tritonclient.utils.shared_memory as shm

    async with Server(settings(repo)) as server:
        url = f"127.0.0.1:{server.http_port}"

        def run() -> tuple[np.ndarray, np.ndarray, list, list]:
            client = httpclient.InferenceServerClient(url)
            in_handle = shm.create_shared_memory_region("in_region", "/asr_http_in", 32)
            out_handle = shm.create_shared_memory_region("out_region", "/asr_http_out", 32)
            try:
                shm.set_shared_memory_region(in_handle, [A, B])
                client.register_system_shared_memory("in_region", "/asr_http_in", 32)
                client.register_system_shared_memory("out_region", "/asr_http_out", 32)
                status = client.get_system_shared_memory_status()
                inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
                inputs[0].set_shared_memory("in_region", 16)
                inputs[1].set_shared_memory("in_region", 16, offset=16)
                outputs = [httpclient.InferRequestedOutput("OUTPUT0"), httpclient.InferRequestedOutput("OUTPUT1")]
                outputs[0].set_shared_memory("out_region", 16)
                outputs[1].set_shared_memory("out_region", 16, offset=16)
                result = client.infer("add_sub", inputs, outputs=outputs)
                assert result.get_output("OUTPUT1")["parameters"]["shared_memory_offset"] == 16
                total = shm.get_contents_as_numpy(out_handle, np.float32, [4]).copy()  # a view of the region otherwise
                diff = shm.get_contents_as_numpy(out_handle, np.float32, [4], offset=16).copy()
                client.unregister_system_shared_memory("in_region")
                after_one = client.get_system_shared_memory_status()
                client.unregister_system_shared_memory()
                return total, diff, status, after_one + client.get_system_shared_memory_status()
            finally:
                shm.destroy_shared_memory_region(in_handle)
                shm.destroy_shared_memory_region(out_handle)
                client.close()

        total, diff, status, after = await asyncio.to_thread(run)
        np.testing.assert_array_equal(total, A + B)
        np.testing.assert_array_equal(diff, A - B)
        assert sorted(status, key=lambda r: r["name"]) == [
            {"name": "in_region", "key": "/asr_http_in", "offset": 0, "byte_size": 32},
            {"name": "out_region", "key": "/asr_http_out", "offset": 0, "byte_size": 32},
        ]
        assert after == [{"name": "out_region", "key": "/asr_http_out", "offset": 0, "byte_size": 32}]


async def test_sequence_parameters_reach_the_model(repo):
    copy_model(repo, PYTHON_MODELS / "sequence_echo")
    async with Server(settings(repo)) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        try:
            x = aioclient.InferInput("X", [1], "INT32")
            x.set_data_from_numpy(np.array([1], np.int32))
            result = await client.infer("sequence_echo", [x], request_id="q1", sequence_id=42, sequence_start=True)
            assert list(result.as_numpy("CORRID")) == [b"int:42"]
            assert list(result.as_numpy("FLAGS")) == [1]  # START
            assert list(result.as_numpy("REQUEST_ID")) == [b"q1"]
            outputs = [aioclient.InferRequestedOutput("FLAGS"), aioclient.InferRequestedOutput("CORRID", binary_data=False)]
            result = await client.infer("sequence_echo", [x], sequence_id="utt-7", sequence_end=True, outputs=outputs)
            assert result.get_output("CORRID")["data"] == ["str:utt-7"]
            assert list(result.as_numpy("FLAGS")) == [2]  # END
            assert [o["name"] for o in result.get_response()["outputs"]] == ["FLAGS", "CORRID"]
        finally:
            await client.close()
