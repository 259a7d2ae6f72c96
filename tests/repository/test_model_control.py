"""Model control of ensembles as Triton does it (checked against tritonserver 2.51 in the last test):
an explicit load of an ensemble loads its steps first; RepositoryModelUnload's `unload_dependents` unloads the
steps loaded only along with the ensemble (not those loaded by name, nor those another loaded ensemble uses);
in poll mode an ensemble is loaded together with its steps whatever the names' order, and an ensemble whose
steps are missing is loaded on the poll that finds them.

The models are copies of model_repo's add_sub (python backend), chained two by two into ensembles whose names
sort before their steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import aiohttp
import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPO, copy_model
from tests.helpers import real_triton as rt

ENSEMBLE = """name: "{name}"
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }}, {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "S" data_type: TYPE_FP32 dims: [ 4 ] }}, {{ name: "D" data_type: TYPE_FP32 dims: [ 4 ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "{first}" model_version: -1 input_map {{ key: "INPUT0" value: "X" }} input_map {{ key: "INPUT1" value: "Y" }}
    output_map {{ key: "OUTPUT0" value: "s1" }} output_map {{ key: "OUTPUT1" value: "d1" }} }},
  {{ model_name: "{second}" model_version: -1 input_map {{ key: "INPUT0" value: "s1" }} input_map {{ key: "INPUT1" value: "d1" }}
    output_map {{ key: "OUTPUT0" value: "S" }} output_map {{ key: "OUTPUT1" value: "D" }} }}
] }}
"""
SETTLE_S = 30.0  # real Triton unloads a python model's stub in the background


def step(repo: Path, name: str) -> None:
    copy_model(repo, BUNDLED_REPO / "add_sub", name)


def ensemble(repo: Path, name: str, first: str, second: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(ENSEMBLE.format(name=name, first=first, second=second))


def explicit_repo(root: Path) -> Path:
    for name in ("step_a", "step_b", "step_c"):
        step(root, name)
    ensemble(root, "aaa_pipeline", "step_a", "step_b")
    ensemble(root, "other", "step_a", "step_c")
    ensemble(root, "broken", "step_a", "missing")
    ensemble(root, "loop_a", "step_a", "loop_b")
    ensemble(root, "loop_b", "step_b", "loop_a")
    return root


async def ready_set(client: aioclient.InferenceServerClient) -> set[str]:
    index = await client.get_model_repository_index(as_json=True)
    return {m["name"] for m in index.get("models", []) if m.get("state") == "READY"}


@contextlib.asynccontextmanager
async def explicit_server(running, root: Path):
    async with running(explicit_repo(root), allow_http=True, model_control_mode="explicit") as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            yield server, client
        finally:
            await client.close()


async def test_explicit_load_of_an_ensemble_loads_its_steps_first(tmp_path, running):
    async with explicit_server(running, tmp_path) as (_, client):
        await client.load_model("aaa_pipeline")
        assert await ready_set(client) == {"aaa_pipeline", "step_a", "step_b"}
        x = grpcclient.InferInput("X", [4], "FP32")
        x.set_data_from_numpy(np.array([1, 2, 3, 4], dtype=np.float32))
        y = grpcclient.InferInput("Y", [4], "FP32")
        y.set_data_from_numpy(np.ones(4, dtype=np.float32))
        result = await client.infer("aaa_pipeline", [x, y])
        # (x + y) + (x - y) = 2x, (x + y) - (x - y) = 2y
        assert result.as_numpy("S").tolist() == [2, 4, 6, 8] and result.as_numpy("D").tolist() == [2, 2, 2, 2]


async def test_ensemble_with_a_missing_or_circular_step_fails_alone(tmp_path, running):
    async with explicit_server(running, tmp_path) as (_, client):
        with pytest.raises(InferenceServerException) as missing:
            await client.load_model("broken")
        assert missing.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "ensemble broken contains models that are not available or ambiguous: missing" in missing.value.message()
        with pytest.raises(InferenceServerException) as cycle:
            await asyncio.wait_for(client.load_model("loop_a"), 20)  # refused, not a deadlock
        assert cycle.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "circular dependency between ensembles: loop_a -> loop_b -> loop_a" in cycle.value.message()
        await client.load_model("aaa_pipeline")  # the others still load
        assert "aaa_pipeline" in await ready_set(client)


async def test_unload_dependents_unloads_the_steps_loaded_with_the_ensemble_only(tmp_path, running):
    async with explicit_server(running, tmp_path) as (_, client):
        await client.load_model("aaa_pipeline")
        await client.unload_model("aaa_pipeline")  # without the parameter the steps stay
        assert await ready_set(client) == {"step_a", "step_b"}
        await client.load_model("aaa_pipeline")
        await client.unload_model("aaa_pipeline", unload_dependents=True)
        assert await ready_set(client) == set()
        # A step loaded by name stays; so does a step another loaded ensemble uses.
        await client.load_model("step_b")
        await client.load_model("aaa_pipeline")
        await client.load_model("other")
        await client.unload_model("aaa_pipeline", unload_dependents=True)
        assert await ready_set(client) == {"other", "step_a", "step_b", "step_c"}
        await client.unload_model("other", unload_dependents=True)
        assert await ready_set(client) == {"step_b"}
        await client.unload_model("never_loaded")  # nothing to do: success, as in Triton


async def test_unload_dependents_over_http_and_bad_values(tmp_path, running):
    async with explicit_server(running, tmp_path) as (server, client):
        await client.load_model("aaa_pipeline")
        base = f"http://127.0.0.1:{server.http_port}/v2/repository/models/aaa_pipeline/unload"
        async with aiohttp.ClientSession() as http:
            async with http.post(base, json={"parameters": {"unload_dependents": "yes"}}) as reply:
                assert reply.status == 400
                assert "'unload_dependents' must be a boolean" in (await reply.json())["error"]
            async with http.post(base, json={"parameters": {"unload_dependents": True}}) as reply:
                assert reply.status == 200
        assert await ready_set(client) == set()
        await client.load_model("aaa_pipeline")
        request = pb.RepositoryModelUnloadRequest(model_name="aaa_pipeline")
        request.parameters["unload_dependents"].string_param = "true"  # Triton wants a bool_param
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as wrong_type:
                await service_pb2_grpc.GRPCInferenceServiceStub(channel).RepositoryModelUnload(request)
        assert wrong_type.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert wrong_type.value.details() == "invalid value type for 'unload_dependents' parameter, expected bool_param."
        assert await ready_set(client) == {"aaa_pipeline", "step_a", "step_b"}


async def test_poll_mode_loads_an_ensemble_with_its_steps_and_when_they_appear(tmp_path, running):
    step(tmp_path, "zzz")
    async with running(tmp_path, allow_http=False, model_control_mode="poll", repository_poll_secs=0.1) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            # Added together; the ensemble's name sorts before its steps'.
            staged = tmp_path.parent / f"{tmp_path.name}_staged"
            staged.mkdir()
            step(staged, "step_a")
            step(staged, "step_b")
            ensemble(staged, "aaa_pipeline", "step_a", "step_b")
            for folder in staged.iterdir():
                folder.rename(tmp_path / folder.name)
            assert await settled(client, {"zzz", "aaa_pipeline", "step_a", "step_b"})
            # A step that is not there yet: the ensemble waits for it, and loads on the poll that finds it.
            ensemble(tmp_path, "bbb_pipeline", "step_a", "step_x")
            assert not await settled(client, {"zzz", "aaa_pipeline", "step_a", "step_b", "bbb_pipeline"}, 1.0)
            step(tmp_path, "step_x")
            assert await settled(client, {"zzz", "aaa_pipeline", "step_a", "step_b", "bbb_pipeline", "step_x"})
        finally:
            await client.close()


async def settled(client, expected: set[str], timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await ready_set(client) == expected:
            return True
        await asyncio.sleep(0.05)
    return False


def control_scenario(url: str) -> list[tuple[str, frozenset]]:
    """The model control steps above with a blocking client; after each, the READY models once settled."""
    client = grpcclient.InferenceServerClient(url)
    seen = []

    def settle(label: str) -> None:
        deadline = time.monotonic() + SETTLE_S
        while True:
            models = client.get_model_repository_index().models
            if not any(m.state in ("LOADING", "UNLOADING") for m in models) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        seen.append((label, frozenset(m.name for m in models if m.state == "READY")))

    def error(action) -> str:
        try:
            action()
        except InferenceServerException as exc:
            return f"{exc.status()} {exc.message().strip()}"
        return "OK"

    try:
        client.load_model("aaa_pipeline")
        settle("load ensemble")
        client.unload_model("aaa_pipeline")
        settle("unload")
        client.load_model("aaa_pipeline")
        client.unload_model("aaa_pipeline", unload_dependents=True)
        settle("unload_dependents")
        client.load_model("step_b")
        client.load_model("aaa_pipeline")
        client.load_model("other")
        client.unload_model("aaa_pipeline", unload_dependents=True)
        settle("explicit and shared steps stay")
        client.unload_model("other", unload_dependents=True)
        settle("shared step goes with the last ensemble")
        seen.append(("missing step", error(lambda: client.load_model("broken"))))
        seen.append(("unload a model never loaded", error(lambda: client.unload_model("never_loaded"))))
    finally:
        client.close()
    return seen


@pytest.mark.skipif(not rt.available(), reason=rt.SKIP_REASON)
@pytest.mark.timeout(180)
async def test_model_control_matches_real_triton(tmp_path, running):
    with rt.real_triton(explicit_repo(tmp_path / "triton"), extra_args=["--model-control-mode=explicit"]) as triton:
        theirs = control_scenario(triton.grpc_url)
    async with running(explicit_repo(tmp_path / "ours"), allow_http=False, model_control_mode="explicit") as server:
        ours = await asyncio.to_thread(control_scenario, f"127.0.0.1:{server.grpc_port}")
    assert ours == theirs
