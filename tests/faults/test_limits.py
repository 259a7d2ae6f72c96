"""Bounds one client cannot push past: live sequences per sequence-batched model (the model's `max_sequences`
parameter, RESOURCE_EXHAUSTED) and queued requests per model (dynamic_batching's max_queue_size, Triton's
UNAVAILABLE "Exceeds maximum queue size")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import tritonclient.grpc.aio as aioclient

from tests.faults.conftest import ADD_SUB_SUM, add_sub, outcome, seconds_input
from tests.helpers.fault_models import executions, sleepy
from tests.helpers.waiting import wait_until
from tests.helpers.sequence_models import accumulator

MAX_SEQUENCES = 'parameters { key: "max_sequences" value { string_value: "%s" } }\n'


def acc_input(value: float) -> list:
    tensor = aioclient.InferInput("INPUT", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[value]], np.float32))
    return [tensor]


def capped_accumulator(repo: Path, cap: str) -> None:
    config = accumulator(repo) / "config.pbtxt"
    config.write_text(config.read_text() + MAX_SEQUENCES % cap)


async def test_live_sequences_beyond_the_models_cap_are_refused(repo: Path, running):
    capped_accumulator(repo, "2")
    async with running(repo, allow_http=False) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")

        def step(sequence_id: int, start: bool = False, end: bool = False):
            return outcome(client.infer("accumulator", acc_input(1.0), sequence_id=sequence_id,
                                        sequence_start=start, sequence_end=end))

        assert not isinstance(await step(1, start=True), tuple)
        assert not isinstance(await step(2, start=True), tuple)
        refused = await step(3, start=True)
        assert refused == ("error", "StatusCode.RESOURCE_EXHAUSTED",
                           "model 'accumulator' has reached its limit of 2 live sequences"), refused
        # Live sequences go on; ending one makes room for a new one; other models are untouched.
        assert (await step(1)).as_numpy("OUTPUT").tolist() == [[2.0]]
        assert not isinstance(await step(2, end=True), tuple)
        assert (await step(3, start=True)).as_numpy("OUTPUT").tolist() == [[1.0]]
        assert await add_sub(client) == ADD_SUB_SUM
        await client.close()


async def test_a_malformed_sequence_cap_fails_the_models_load(repo: Path, running):
    capped_accumulator(repo, "many")
    async with running(repo, allow_http=False, exit_on_error=False) as server:
        entry = server.manager.entry("accumulator")
        assert not entry.versions
        assert "parameter 'max_sequences' must be a positive integer, got 'many' for accumulator" in entry.reason


async def test_requests_beyond_max_queue_size_are_refused_and_the_rest_answered(repo: Path, running):
    sleepy(repo, batching="max_queue_delay_microseconds: 0 default_queue_policy { max_queue_size: 2 }")
    async with running(repo, allow_http=False) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        # busy for long enough that two requests queue and a third is refused inside it on a loaded machine
        running_call = asyncio.create_task(client.infer("sleepy", seconds_input(3.0, batched=True)))
        assert await wait_until(lambda: executions(repo / "sleepy") == 1)  # the instance is busy: the next queue
        queued = [asyncio.create_task(outcome(client.infer("sleepy", seconds_input(0.0, batched=True))))
                  for _ in range(2)]
        assert await wait_until(lambda: server.manager.get("sleepy").scheduler.queued == 2)
        over = await outcome(client.infer("sleepy", seconds_input(0.0, batched=True)))
        assert over == ("error", "StatusCode.UNAVAILABLE", "Exceeds maximum queue size"), over
        assert await add_sub(client) == ADD_SUB_SUM
        assert (await running_call).as_numpy("OUT").tolist() == [[3.0]]
        assert [r.as_numpy("OUT").tolist() for r in await asyncio.gather(*queued)] == [[[0.0]], [[0.0]]]
        await client.close()
