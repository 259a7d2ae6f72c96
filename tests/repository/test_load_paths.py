"""RepositoryModelLoad with untrusted names and `file:` paths: nothing outside the repository is loaded, nothing
outside the temporary model folder is written, and temporary folders go away with their model."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPO, copy_model

# A python model whose initialize() leaves a marker: proof that its code ran.
MARKER_MODEL = """
import pathlib
class TritonPythonModel:
    def initialize(self, args):
        pathlib.Path({marker!r}).write_text("ran")
    def execute(self, requests):
        return []
"""
ADD_SUB_PY = (BUNDLED_REPO / "add_sub" / "1" / "model.py").read_bytes()


def add_sub_config(name: str) -> str:
    return json.dumps({
        "name": name, "backend": "python", "max_batch_size": 0,
        "input": [{"name": f"INPUT{i}", "data_type": "TYPE_FP32", "dims": [4]} for i in (0, 1)],
        "output": [{"name": f"OUTPUT{i}", "data_type": "TYPE_FP32", "dims": [4]} for i in (0, 1)],
    })


async def expect_error(coro, code: grpc.StatusCode, text: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        await coro
    assert info.value.status() == f"StatusCode.{code.name}", info.value
    assert text in info.value.message(), info.value.message()


async def infer_add_sub(client, name: str) -> np.ndarray:
    a = np.arange(4, dtype=np.float32)
    inputs = [aioclient.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    return (await client.infer(name, inputs)).as_numpy("OUTPUT0")


@pytest.fixture
def layout(tmp_path: Path, monkeypatch):
    """repo/ with add_sub, a model folder `evil` beside the repository, and a private temp folder."""
    repo = tmp_path / "repo"
    repo.mkdir()
    copy_model(repo, BUNDLED_REPO / "add_sub")
    evil = tmp_path / "evil"
    (evil / "1").mkdir(parents=True)
    (evil / "config.pbtxt").write_text('name: "evil"\nbackend: "python"\nmax_batch_size: 0\n'
                                       'input [{name: "X", data_type: TYPE_FP32, dims: [1]}]\n'
                                       'output [{name: "Y", data_type: TYPE_FP32, dims: [1]}]\n')
    (evil / "1" / "model.py").write_text(MARKER_MODEL.format(marker=str(tmp_path / "marker")))
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where the server's mkdtemp() puts `file:` loads
    return tmp_path


def temp_folders(root: Path) -> list[Path]:
    return sorted((root / "tmp").glob("asr_server_model_*"))


@pytest.mark.parametrize("name", ["../evil", "..", ".", "", "{root}/evil", "a/b", "a\\b", "evil\0", "x" * 300])
async def test_load_refuses_names_that_are_not_a_plain_folder_name(layout: Path, running, name: str):
    name = name.format(root=layout)
    async with running(layout / "repo", model_control_mode="explicit", allow_http=False) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        # Triton 2.51's answer for a name that is not a folder of the repository.
        with pytest.raises(InferenceServerException) as info:
            await client.load_model(name)
        assert info.value.status() == "StatusCode.INTERNAL"
        # Triton 2.51's words, and no path of this machine (a 300-character name once leaked it in an OSError)
        assert info.value.message() == f"failed to load '{name}', failed to poll from model repository"
        assert not (layout / "marker").exists(), "a model.py outside the repository ran"
        assert await client.is_server_live()
        await client.close()


async def test_http_load_refuses_an_encoded_traversing_name(layout: Path, running):
    import aiohttp

    async with running(layout / "repo", model_control_mode="explicit") as server:
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{server.http_port}/v2/repository/models/..%2Fevil/load"
            async with session.post(url) as reply:
                assert reply.status == 500
                assert "failed to poll from model repository" in (await reply.json())["error"]
    assert not (layout / "marker").exists()


@pytest.mark.parametrize("path", ["../escaped", "1/../../escaped", "{root}/escaped", "..", "", "1/..\\..\\escaped"])
async def test_file_parameters_that_leave_the_model_folder_write_nothing(layout: Path, running, path: str):
    path = path.format(root=layout)
    async with running(layout / "repo", model_control_mode="explicit", allow_http=False) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        files = {"file:1/model.py": ADD_SUB_PY, f"file:{path}": b"attacker bytes"}
        await expect_error(client.load_model("dyn", config=add_sub_config("dyn"), files=files),
                           grpc.StatusCode.INVALID_ARGUMENT, f"Invalid file parameter 'file:{path}'")
        assert not list(layout.rglob("escaped")), "bytes were written outside the model folder"
        assert temp_folders(layout) == []
        await client.close()


async def test_traversing_name_with_file_parameters_writes_nothing(layout: Path, running):
    async with running(layout / "repo", model_control_mode="explicit", allow_http=False) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        files = {"file:1/model.py": MARKER_MODEL.format(marker=str(layout / "marker")).encode()}
        await expect_error(client.load_model("../pwned", config=add_sub_config("pwned"), files=files),
                           grpc.StatusCode.INTERNAL, "failed to poll from model repository")
        assert not (layout / "pwned").exists() and not (layout / "marker").exists()
        assert temp_folders(layout) == []
        await client.close()


async def test_temporary_folders_of_file_loads_are_removed(layout: Path, running):
    config = add_sub_config("dyn")
    async with running(layout / "repo", model_control_mode="explicit", allow_http=False) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        await client.load_model("dyn", config=config, files={"file:1/model.py": ADD_SUB_PY})
        np.testing.assert_array_equal(await infer_add_sub(client, "dyn"), 2 * np.arange(4, dtype=np.float32))
        first = temp_folders(layout)
        assert len(first) == 1
        # A reload replaces the folder; the old one goes once the new versions serve.
        await client.load_model("dyn", config=config, files={"file:1/model.py": ADD_SUB_PY})
        second = temp_folders(layout)
        assert len(second) == 1 and second != first
        await client.unload_model("dyn")
        assert temp_folders(layout) == []
        # A failed load leaves nothing behind either.
        broken = {"file:1/model.py": b"raise RuntimeError('broken at import')"}
        await expect_error(client.load_model("dyn", config=config, files=broken), grpc.StatusCode.INTERNAL,
                           "broken at import")
        assert temp_folders(layout) == []
        # A model still loaded at shutdown: its folder goes with the server.
        await client.load_model("dyn", config=config, files={"file:1/model.py": ADD_SUB_PY})
        assert len(temp_folders(layout)) == 1
        await client.close()
    assert temp_folders(layout) == []


async def test_load_parameters_of_the_wrong_type_are_refused(layout: Path, running):
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc

    async with running(layout / "repo", model_control_mode="explicit", allow_http=False) as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            request = pb.RepositoryModelLoadRequest(model_name="add_sub")
            request.parameters["config"].int64_param = 1  # was read as "" and ignored
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.RepositoryModelLoad(request)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "expected string_param" in info.value.details()
            request = pb.RepositoryModelLoadRequest(model_name="add_sub")
            request.parameters["config"].string_param = add_sub_config("add_sub")
            request.parameters["file:1/model.py"].string_param = "print('hi')"  # was written as an empty file
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.RepositoryModelLoad(request)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "'file:1/model.py', expected bytes_param" in info.value.details()
            assert temp_folders(layout) == []


def test_an_initial_state_file_must_stay_in_the_models_initial_state_folder(tmp_path: Path):
    from tritonclient.grpc import model_config_pb2 as mc

    from asr_server.errors import ErrorCode, ServerError
    from asr_server.scheduling.sequence_state import state_specs

    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "zeros.bin").write_bytes(bytes(16))
    (tmp_path / "secret.bin").write_bytes(bytes(16))
    config = mc.ModelConfig(name="m")
    state = config.sequence_batching.state.add(input_name="S_IN", output_name="S_OUT", data_type=mc.TYPE_FP32,
                                               dims=[4])
    init = state.initial_state.add(name="init", data_type=mc.TYPE_FP32, dims=[4])
    init.data_file = "zeros.bin"
    assert state_specs(config, tmp_path)[0].initial.tolist() == [0, 0, 0, 0]
    for outside in (str(tmp_path / "secret.bin"), "../secret.bin", "/etc/hostname"):
        init.data_file = outside
        with pytest.raises(ServerError, match="must be inside") as info:
            state_specs(config, tmp_path)
        assert info.value.code == ErrorCode.INVALID_ARGUMENT
