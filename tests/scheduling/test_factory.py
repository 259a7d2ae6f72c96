"""scheduling.factory.make_scheduler: every model's Scheduler, ensembles included, comes from one place."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.backends.base import Backend, ModelContext
from asr_server.errors import ErrorCode, ServerError
from asr_server.messages import InferRequest, InferResponse, Tensor
from asr_server.model_stats import ModelStatistics
from asr_server.scheduling.base import DirectScheduler, Scheduler
from asr_server.scheduling.dynamic_batcher import DynamicBatcher
from asr_server.scheduling.ensemble import EnsembleScheduler
from asr_server.scheduling.factory import make_scheduler
from asr_server.scheduling.instances import Instance, InstancePool
from asr_server.scheduling.pending import Pending, ResponseChannel

ENSEMBLE = """
name: "pipeline" platform: "ensemble" max_batch_size: 0
input { name: "IN" data_type: TYPE_FP32 dims: [ 2 ] }
output { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] }
ensemble_scheduling { step { model_name: "double" model_version: -1
                             input_map { key: "X" value: "IN" } output_map { key: "Y" value: "OUT" } } }
"""


class Doubling:
    """A ServerPort that serves one model, `double`, and records what it was asked."""

    def __init__(self) -> None:
        self.requests: list[InferRequest] = []

    def infer(self, request: InferRequest) -> list[InferResponse]:
        raise AssertionError("an ensemble runs on the loop: it must use infer_async")

    async def infer_async(self, request: InferRequest) -> list[InferResponse]:
        self.requests.append(request)
        x = request.input("X").data
        return [InferResponse("double", "1", outputs=[Tensor("Y", "FP32", x * 2)])]


class Idle(Backend):
    def load(self) -> None: ...

    def execute(self, requests, senders=None):
        return [InferResponse("m", "1") for _ in requests]


def pool_of(config: mc.ModelConfig) -> InstancePool:
    context = ModelContext(config.name, 1, config, Path("."), Path("."), instance_name=f"{config.name}_0")
    return InstancePool([Instance(Idle(context))], ModelStatistics(), decoupled=False)


async def test_an_ensemble_is_a_scheduler_made_by_the_factory_and_runs_its_steps_through_the_port() -> None:
    config = text_format.Parse(ENSEMBLE, mc.ModelConfig())
    port, stats = Doubling(), ModelStatistics()
    scheduler = make_scheduler(config, Path("."), stats, port=port)
    assert isinstance(scheduler, EnsembleScheduler) and isinstance(scheduler, Scheduler)
    assert scheduler.pool is None and scheduler.queued == 0 and scheduler.healthy

    channel = ResponseChannel(asyncio.get_running_loop())
    data = np.array([1.5, -2.0], np.float32)
    scheduler.submit(Pending(InferRequest("pipeline", id="r", inputs=[Tensor("IN", "FP32", data)]), channel))
    response = await asyncio.wait_for(channel.first(), 10)
    assert response.output("OUT").data.tolist() == [3.0, -4.0]
    assert [(r.model_name, r.input("X").data.tolist()) for r in port.requests] == [("double", [1.5, -2.0])]
    assert stats.snapshot().success.count == 1

    await scheduler.stop(drain_timeout_s=10)  # the base class's stop: refuses what comes after
    refused = ResponseChannel(asyncio.get_running_loop())
    scheduler.submit(Pending(InferRequest("pipeline", inputs=[Tensor("IN", "FP32", data)]), refused))
    with pytest.raises(ServerError) as raised:
        await asyncio.wait_for(refused.first(), 10)
    assert raised.value.code == ErrorCode.UNAVAILABLE


async def test_an_ensemble_without_a_port_fails_its_requests_with_the_step_named() -> None:
    config = text_format.Parse(ENSEMBLE, mc.ModelConfig())
    scheduler = make_scheduler(config, Path("."), ModelStatistics())
    channel = ResponseChannel(asyncio.get_running_loop())
    scheduler.submit(Pending(InferRequest("pipeline", inputs=[Tensor("IN", "FP32", np.zeros(2, np.float32))]),
                             channel))
    with pytest.raises(ServerError, match="step 0 \\('double'\\)"):
        await asyncio.wait_for(channel.first(), 10)


def test_models_with_instances_get_the_scheduler_their_config_asks_for() -> None:
    batched = text_format.Parse('name: "m" max_batch_size: 4 dynamic_batching { }', mc.ModelConfig())
    plain = text_format.Parse('name: "m" max_batch_size: 4', mc.ModelConfig())
    for config, expected in ((batched, DynamicBatcher), (plain, DirectScheduler)):
        pool = pool_of(config)
        try:
            scheduler = make_scheduler(config, Path("."), pool.stats, pool=pool, backend=Idle)
            assert type(scheduler) is expected and scheduler.pool is pool
        finally:
            pool.shutdown()
    with pytest.raises(ValueError, match="needs its instance pool"):
        make_scheduler(plain, Path("."), ModelStatistics())
