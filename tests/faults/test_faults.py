"""Fault suite: a model that raises, one that hangs, one that crashes at load, unload and poll-mode reload under
traffic, clients that disconnect mid-request and mid-stream. In each the rest of the server keeps serving, and
the failing requests get Triton's codes."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc.aio as aioclient

from tests.conftest import PYTHON_MODELS, copy_model
from tests.faults.conftest import ADD_SUB_SUM, add_sub, outcome, seconds_input
from tests.helpers.fault_models import crash_at_load, executions, sleepy
from tests.helpers.waiting import wait_until
from tests.helpers.sequence_models import accumulator


def client_of(server) -> aioclient.InferenceServerClient:
    return aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")


def x_input(value: float) -> list:
    tensor = aioclient.InferInput("X", [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], np.float32))
    return [tensor]


async def test_a_model_that_raises_fails_only_its_own_requests(repo: Path, running):
    copy_model(repo, PYTHON_MODELS / "raising")
    async with running(repo, allow_http=False) as server:
        client = client_of(server)
        calls = [outcome(client.infer("raising", x_input(-1.0))) for _ in range(5)]
        calls += [add_sub(client) for _ in range(10)]
        results = await asyncio.gather(*calls)
        for failed in results[:5]:
            assert failed[:2] == ("error", "StatusCode.INTERNAL") and "boom: negative input" in failed[2], failed
        assert results[5:] == [ADD_SUB_SUM] * 10
        # The model itself still answers good requests.
        assert (await client.infer("raising", x_input(2.0))).as_numpy("Y").tolist() == [2.0]
        await client.close()


HANG_S = 4.0


async def test_a_hanging_model_holds_only_its_own_requests(repo: Path, running):
    # Queue policy: REJECT requests that waited past their own `timeout` (Triton's allow_timeout_override).
    sleepy(repo, "hang", batching="max_queue_delay_microseconds: 0 default_queue_policy { timeout_action: REJECT "
                                  "allow_timeout_override: true }")
    async with running(repo, allow_http=False) as server:
        client = client_of(server)
        # A hang long enough that what follows fits inside it with room on a loaded machine; a healthy model
        # that waited for it would take the rest of it (over HANG_S - 1 s).
        hanging = asyncio.create_task(client.infer("hang", seconds_input(HANG_S, batched=True), client_timeout=30))
        assert await wait_until(lambda: executions(repo / "hang") == 1)  # the instance is busy now
        started = time.monotonic()
        # The client's deadline passes: DEADLINE_EXCEEDED for that caller, nothing else.
        late = await outcome(client.infer("hang", seconds_input(0.0, batched=True), client_timeout=0.2))
        assert late[:2] == ("error", "StatusCode.DEADLINE_EXCEEDED"), late
        # The request's own queue timeout (microseconds) passes: Triton's UNAVAILABLE "Request timeout expired".
        queued = await outcome(client.infer("hang", seconds_input(0.0, batched=True), timeout=100_000))
        assert queued == ("error", "StatusCode.UNAVAILABLE", "Request timeout expired"), queued
        # Meanwhile the other model answers at once.
        assert await asyncio.gather(*[add_sub(client) for _ in range(5)]) == [ADD_SUB_SUM] * 5
        assert time.monotonic() - started < HANG_S - 1.0, "the healthy model waited for the hanging one"
        assert (await hanging).as_numpy("OUT").tolist() == [[HANG_S]]
        # Once the hang is over the model serves again.
        assert (await client.infer("hang", seconds_input(0.0, batched=True))).as_numpy("OUT").tolist() == [[0.0]]
        await client.close()


async def test_a_model_that_crashes_at_load_leaves_the_others_serving(repo: Path, running):
    crash_at_load(repo)
    async with running(repo, allow_http=False, exit_on_error=False) as server:
        client = client_of(server)
        assert await add_sub(client) == ADD_SUB_SUM
        assert not await client.is_model_ready("crash_at_load")
        assert await client.is_server_live()
        index = {m["name"]: m for m in (await client.get_model_repository_index(as_json=True))["models"]}
        assert index["crash_at_load"]["state"] == "UNAVAILABLE"
        assert "crashed while loading" in index["crash_at_load"]["reason"]
        failed = await outcome(client.infer("crash_at_load", x_input(1.0)))
        assert failed == ("error", "StatusCode.NOT_FOUND",
                          "Request for unknown model: 'crash_at_load' has no available versions"), failed
        await client.close()


async def test_unload_during_traffic_answers_every_request_and_spares_other_models(repo: Path, running):
    sleepy(repo)
    async with running(repo, allow_http=False, model_control_mode="explicit",
                       load_models=("add_sub", "sleepy")) as server:
        client = client_of(server)
        calls = [asyncio.create_task(outcome(client.infer("sleepy", seconds_input(0.02), client_timeout=10)))
                 for _ in range(20)]
        healthy = [asyncio.create_task(add_sub(client)) for _ in range(20)]
        assert await wait_until(lambda: executions(repo / "sleepy") >= 2)  # traffic is running
        await client.unload_model("sleepy")
        results = await asyncio.wait_for(asyncio.gather(*calls), 15)  # no request is left hanging
        answered = [r for r in results if not isinstance(r, tuple)]
        refused = [r for r in results if isinstance(r, tuple)]
        assert all(r.as_numpy("OUT").tolist() == [np.float32(0.02)] for r in answered)
        # Accepted requests drain; later ones are refused with Triton's codes, never INTERNAL or a hang.
        assert all(r[1] in ("StatusCode.UNAVAILABLE", "StatusCode.NOT_FOUND") for r in refused), refused
        assert answered, "the requests accepted before the unload were dropped"
        assert await asyncio.gather(*healthy) == [ADD_SUB_SUM] * 20
        failed = await outcome(client.infer("sleepy", seconds_input(0.0)))
        assert failed[1] == "StatusCode.NOT_FOUND"
        await client.load_model("sleepy")
        assert (await client.infer("sleepy", seconds_input(0.0))).as_numpy("OUT").tolist() == [0.0]
        await client.close()


async def test_poll_mode_reload_during_traffic_drops_no_request(repo: Path, running):
    async with running(repo, allow_http=False, model_control_mode="poll", repository_poll_secs=0.1) as server:
        client = client_of(server)
        stop = asyncio.Event()
        results: list = []

        async def traffic():
            while not stop.is_set():
                results.append(await outcome(add_sub(client)))

        workers = [asyncio.create_task(traffic()) for _ in range(4)]
        # A new version appears: the poller loads it and swaps it in while the old one serves.
        shutil.copytree(repo / "add_sub" / "1", repo / "add_sub" / "2")
        config = repo / "add_sub" / "config.pbtxt"
        os.utime(config, (time.time() + 5, time.time() + 5))
        assert await wait_until(lambda: client.is_model_ready("add_sub", "2"))
        assert await wait_until(lambda: _not(client.is_model_ready("add_sub", "1")))
        answered = len(results)
        assert await wait_until(lambda: len(results) >= answered + 20)  # some traffic on the new version
        stop.set()
        await asyncio.gather(*workers)
        assert len(results) > 10
        assert all(r == ADD_SUB_SUM for r in results), [r for r in results if r != ADD_SUB_SUM][:3]
        await client.close()


async def _not(coro) -> bool:
    return not await coro


async def test_client_disconnect_mid_request_frees_the_instance(repo: Path, running):
    sleepy(repo)
    async with running(repo, allow_http=False) as server:
        client = client_of(server)
        call = asyncio.create_task(client.infer("sleepy", seconds_input(0.5)))
        assert await wait_until(lambda: executions(repo / "sleepy") == 1)
        call.cancel()  # the client goes away while its request runs
        await asyncio.gather(call, return_exceptions=True)
        assert await add_sub(client) == ADD_SUB_SUM
        other = client_of(server)
        answer = await other.infer("sleepy", seconds_input(0.0), client_timeout=5)
        assert answer.as_numpy("OUT").tolist() == [0.0]
        await other.close()
        await client.close()


async def test_client_disconnect_mid_stream_frees_the_sequence(repo: Path, running):
    accumulator(repo, idle_us=300_000)
    async with running(repo, allow_http=False) as server:
        scheduler = server.manager.get("accumulator").scheduler
        client = client_of(server)
        answered = asyncio.Event()
        never = asyncio.Event()

        async def requests():
            yield dict(model_name="accumulator", inputs=acc_input(1.0), sequence_id=7, sequence_start=True)
            await never.wait()

        async def consume():
            async for _result, _error in client.stream_infer(requests()):
                answered.set()

        stream = asyncio.create_task(consume())
        await asyncio.wait_for(answered.wait(), 10)
        assert 7 in scheduler.sequences
        stream.cancel()  # the client drops the stream without END
        await asyncio.gather(stream, return_exceptions=True)
        await client.close()
        never.set()
        # The abandoned sequence is freed after max_sequence_idle_microseconds; other streams go on meanwhile.
        other = client_of(server)
        got = []

        async def sequence():
            for i, value in enumerate((1.0, 2.0, 3.0)):
                yield dict(model_name="accumulator", inputs=acc_input(value), sequence_id=8,
                           sequence_start=i == 0, sequence_end=i == 2)

        async for result, error in other.stream_infer(sequence()):
            got.append(error or result.as_numpy("OUTPUT").tolist())
        assert got == [[[1.0]], [[3.0]], [[6.0]]]

        async def freed():
            return 7 not in scheduler.sequences

        assert await wait_until(freed, 5)
        assert await add_sub(other) == ADD_SUB_SUM
        await other.close()


def acc_input(value: float) -> list:
    tensor = aioclient.InferInput("INPUT", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[value]], np.float32))
    return [tensor]
