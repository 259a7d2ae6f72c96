"""The dynamic batcher driven through `submit()` with a recording fake backend, plus one gRPC test.

Timing never depends on sleeps: delays and queue timeouts run on an injected fake clock (the test moves it
and calls `poke()`), and batch completion is controlled with threading events the fake backend waits on.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.backends.base import Backend, ModelContext
from asr_server.errors import ErrorCode, ServerError
from asr_server.scheduling.dynamic_batcher import DynamicBatcher
from asr_server.scheduling.instances import Instance, InstancePool
from asr_server.scheduling.pending import Pending, ResponseChannel
from asr_server.model_stats import ModelStatistics
from asr_server.messages import InferRequest, InferResponse, Tensor
from tests.helpers.onnx_models import identity_model, model_folder

WAIT_S = 10.0  # upper bound for a thread event that must happen; never reached when the code is right


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0  # seconds

    def __call__(self) -> float:
        return self.now


class Recorder:
    """What the fake instances executed, shared by all of them (thread-safe)."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list[str]]] = []  # (instance name, request ids), in start order
        self.gates: dict[str, threading.Event] = {}  # per instance; execute waits for its gate
        self.fail = False
        self._cond = threading.Condition()

    def started(self, instance: str, ids: list[str]) -> None:
        with self._cond:
            self.batches.append((instance, ids))
            self._cond.notify_all()

    def wait_started(self, count: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.batches) >= count, WAIT_S), self.batches

    @property
    def ids(self) -> list[list[str]]:
        return [ids for _, ids in self.batches]

    def block(self, instance: str) -> None:
        self.gates[instance].clear()

    def unblock(self, instance: Optional[str] = None) -> None:
        for name, gate in self.gates.items():
            if instance in (None, name):
                gate.set()


class FakeBackend(Backend):
    """Echoes INPUT0 as OUTPUT0; waits on its gate; raises when the recorder says so."""

    def __init__(self, context: ModelContext, recorder: Recorder) -> None:
        super().__init__(context)
        self.recorder = recorder
        recorder.gates[context.instance_name] = threading.Event()
        recorder.gates[context.instance_name].set()

    def load(self) -> None:
        pass

    def execute(self, requests: Sequence[InferRequest], senders=None) -> list:
        name = self.context.instance_name
        self.recorder.started(name, [r.id for r in requests])
        assert self.recorder.gates[name].wait(WAIT_S), "test never released the instance"
        if self.recorder.fail:
            raise RuntimeError("model exploded")
        return [
            InferResponse("m", "1", outputs=[Tensor("OUTPUT0", "FP32", r.input("INPUT0").data)]) for r in requests
        ]


class RaggedBackend(FakeBackend):
    ragged_batching = True


def make_config(max_batch_size: int = 8, batching: str = "") -> mc.ModelConfig:
    return text_format.Parse(
        f'name: "m" max_batch_size: {max_batch_size} dynamic_batching {{ {batching} }}', mc.ModelConfig()
    )


class Harness:
    def __init__(self) -> None:
        self.recorder = Recorder()
        self.clock = FakeClock()
        self.batcher: Optional[DynamicBatcher] = None
        self.pool: Optional[InstancePool] = None
        self.stats = ModelStatistics()

    def build(self, batching: str = "", max_batch_size: int = 8, instances: int = 1,
              backend: type[FakeBackend] = FakeBackend, fake_clock: bool = True) -> DynamicBatcher:
        config = make_config(max_batch_size, batching)
        backends = [
            backend(ModelContext("m", 1, config, Path("."), Path("."), instance_name=f"m_0_{i}"), self.recorder)
            for i in range(instances)
        ]
        self.pool = InstancePool([Instance(b) for b in backends], self.stats, decoupled=False)
        self.batcher = DynamicBatcher(self.pool, config, ragged=backend.ragged_batching,
                                      clock=self.clock if fake_clock else None)
        return self.batcher

    def submit(self, rid: str, batch: int = 1, width: int = 4, **request_fields) -> ResponseChannel:
        data = np.full((batch, width), float(len(rid)), dtype=np.float32)
        request = InferRequest("m", id=rid, inputs=[Tensor("INPUT0", "FP32", data)], **request_fields)
        channel = ResponseChannel(asyncio.get_running_loop())
        self.batcher.submit(Pending(request, channel, batch))
        return channel

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds
        self.batcher.poke()

    async def started(self, count: int) -> None:
        await asyncio.to_thread(self.recorder.wait_started, count)

    async def instance_free(self) -> None:
        """Wait until an instance has delivered its batch's results and is idle again."""
        instance = await asyncio.wait_for(self.pool.acquire(), WAIT_S)
        self.pool.release(instance)


@pytest.fixture
async def h():
    harness = Harness()
    yield harness
    harness.recorder.unblock()
    if harness.batcher is not None:
        await harness.batcher.stop(drain_timeout_s=WAIT_S)
        await asyncio.to_thread(harness.pool.shutdown)


async def result(channel: ResponseChannel) -> InferResponse:
    return await asyncio.wait_for(channel.first(), WAIT_S)


async def error_of(channel: ResponseChannel) -> ServerError:
    with pytest.raises(ServerError) as info:
        await asyncio.wait_for(channel.first(), WAIT_S)
    return info.value


async def test_batches_fill_up_to_max_batch_size_while_the_instance_is_busy(h):
    h.build(max_batch_size=4)
    h.recorder.block("m_0_0")
    channels = [h.submit("r0")]  # no delay: sent at once, alone
    await h.started(1)
    channels += [h.submit(f"r{i}") for i in range(1, 11)]
    assert h.batcher.queued == 10
    h.recorder.unblock()
    outs = [await result(c) for c in channels]
    assert all(o.outputs[0].data.shape == (1, 4) for o in outs)
    assert h.recorder.ids == [["r0"], ["r1", "r2", "r3", "r4"], ["r5", "r6", "r7", "r8"], ["r9", "r10"]]
    assert all(c.dropped == 0 for c in channels)


async def test_request_batch_sizes_count_towards_max_batch_size(h):
    h.build(max_batch_size=4, batching="max_queue_delay_microseconds: 1000000")
    a, b, c = h.submit("a", batch=3), h.submit("b", batch=2), h.submit("c", batch=1)
    # a alone is 3 < 4, but b does not fit behind it: the batch cannot grow, so it leaves at once.
    await result(a)
    assert h.recorder.ids[0] == ["a"]
    h.advance(1.0)
    await result(b), await result(c)
    assert h.recorder.ids == [["a"], ["b", "c"]]
    assert h.stats.snapshot().inference_count == 6


async def test_queue_delay_holds_a_partial_batch_until_it_expires(h):
    h.build(max_batch_size=8, batching="max_queue_delay_microseconds: 500000")
    first = h.submit("r0")
    h.advance(0.2)
    second = h.submit("r1")
    h.advance(0.29)  # 0.49 s after the oldest arrived
    assert h.batcher.queued == 2 and h.recorder.batches == []
    h.advance(0.01)  # the oldest has waited 0.5 s
    assert h.batcher.queued == 0
    await result(first), await result(second)
    assert h.recorder.ids == [["r0", "r1"]]


async def test_a_preferred_size_is_sent_without_waiting(h):
    h.build(max_batch_size=8, batching="preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 1000000")
    channels = [h.submit("r0"), h.submit("r1"), h.submit("r2")]
    await result(channels[0]), await result(channels[1])
    assert h.recorder.ids == [["r0", "r1"]] and h.batcher.queued == 1
    h.advance(1.0)
    await result(channels[2])
    assert h.recorder.ids == [["r0", "r1"], ["r2"]]


async def test_largest_preferred_prefix_wins(h):
    h.build(max_batch_size=8, batching="preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 1000000")
    h.recorder.block("m_0_0")
    channels = [h.submit("r0", batch=1)]  # r0 alone is no preferred size: waits
    h.advance(1.0)
    await h.started(1)
    channels += [h.submit(f"r{i}") for i in range(1, 6)]  # five queued behind the busy instance
    h.recorder.unblock()
    for c in channels[:5]:
        await result(c)
    assert h.recorder.ids[1] == ["r1", "r2", "r3", "r4"] and h.batcher.queued == 1
    h.advance(1.0)
    await result(channels[5])


async def test_requests_of_different_shapes_are_not_mixed(h):
    h.build(max_batch_size=8, batching="max_queue_delay_microseconds: 1000000")
    channels = [h.submit("a", width=4), h.submit("b", width=6), h.submit("c", width=4)]
    h.advance(1.0)
    outs = [await result(c) for c in channels]
    assert [o.outputs[0].data.shape for o in outs] == [(1, 4), (1, 6), (1, 4)]
    assert h.recorder.ids == [["a", "c"], ["b"]]


async def test_ragged_backends_get_mixed_shapes_in_one_batch(h):
    h.build(max_batch_size=8, batching="max_queue_delay_microseconds: 1000000", backend=RaggedBackend)
    channels = [h.submit("a", width=4), h.submit("b", width=6), h.submit("c", width=4)]
    h.advance(1.0)
    for c in channels:
        await result(c)
    assert h.recorder.ids == [["a", "b", "c"]]


async def test_higher_priority_levels_batch_first(h):
    h.build(max_batch_size=1, batching="priority_levels: 3 default_priority_level: 2")
    h.recorder.block("m_0_0")
    channels = [h.submit("busy")]
    await h.started(1)
    channels += [h.submit("low", priority=3), h.submit("default"), h.submit("high", priority=1)]
    h.recorder.unblock()
    for c in channels:
        await result(c)
    assert h.recorder.ids == [["busy"], ["high"], ["default"], ["low"]]


async def test_priority_above_the_levels_is_invalid(h):
    h.build(batching="priority_levels: 2 default_priority_level: 1")
    error = await error_of(h.submit("x", priority=3))
    assert error.code is ErrorCode.INVALID_ARGUMENT and "priority" in error.message
    assert h.batcher.queued == 0


async def test_reject_policy_fails_requests_that_waited_too_long(h):
    h.build(max_batch_size=1, batching="""
        default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 10000000
                               allow_timeout_override: true }""")
    h.recorder.block("m_0_0")
    busy = h.submit("busy")
    await h.started(1)
    short = h.submit("short", timeout_us=1000)  # overrides the 10 s default with 1 ms
    longer = h.submit("longer", timeout_us=60_000_000)  # may not lengthen it: stays 10 s
    default = h.submit("default")
    h.advance(0.002)
    error = await error_of(short)
    assert (error.code, error.message) == (ErrorCode.UNAVAILABLE, "Request timeout expired")
    assert h.batcher.queued == 2
    h.advance(10.0)
    for channel in (longer, default):
        assert (await error_of(channel)).message == "Request timeout expired"
    h.recorder.unblock()
    await result(busy)
    assert h.recorder.ids == [["busy"]]
    assert all(c.dropped == 0 for c in (busy, short, longer, default))
    stats = h.stats.snapshot()
    assert stats.fail.count == 3 and stats.failures_by_reason == {"REJECTED": 3}


async def test_delay_policy_keeps_expired_requests_behind_the_ones_in_time(h):
    h.build(max_batch_size=1, batching="""
        default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 1000 }""")
    h.recorder.block("m_0_0")
    channels = [h.submit("busy")]
    await h.started(1)
    channels.append(h.submit("late"))
    h.advance(0.002)  # "late" has expired: it loses its place
    channels.append(h.submit("fresh"))
    h.recorder.unblock()
    for c in channels:
        await result(c)  # DELAY never fails a request
    assert h.recorder.ids == [["busy"], ["fresh"], ["late"]]


async def test_max_queue_size_rejects_when_full(h):
    h.build(max_batch_size=1, batching="default_queue_policy { max_queue_size: 2 }")
    h.recorder.block("m_0_0")
    busy = h.submit("busy")  # running, not queued
    await h.started(1)
    queued = [h.submit("q1"), h.submit("q2")]
    error = await error_of(h.submit("q3"))
    assert (error.code, error.message) == (ErrorCode.UNAVAILABLE, "Exceeds maximum queue size")
    h.recorder.unblock()
    for c in [busy, *queued]:
        await result(c)


async def test_priority_queue_policy_applies_per_level(h):
    h.build(max_batch_size=1, batching="""
        priority_levels: 2 default_priority_level: 2
        priority_queue_policy { key: 1 value { max_queue_size: 1 } }""")
    h.recorder.block("m_0_0")
    busy = h.submit("busy")
    await h.started(1)
    ok = [h.submit("h1", priority=1), h.submit("d1"), h.submit("d2")]
    assert (await error_of(h.submit("h2", priority=1))).message == "Exceeds maximum queue size"
    h.recorder.unblock()
    for c in [busy, *ok]:
        await result(c)


@pytest.mark.parametrize("preserve", [True, False])
async def test_preserve_ordering_across_instances_finishing_in_reverse(h, preserve):
    h.build(max_batch_size=4, instances=2, batching=f"preserve_ordering: {str(preserve).lower()}")
    h.recorder.block("m_0_0")
    h.recorder.block("m_0_1")
    first = h.submit("first")
    await h.started(1)
    second = h.submit("second")
    await h.started(2)
    assert {name for name, _ in h.recorder.batches} == {"m_0_0", "m_0_1"}
    second_instance = h.recorder.batches[1][0]
    first_instance = h.recorder.batches[0][0]
    done_order: list[str] = []
    tasks = {}
    for name, channel in (("first", first), ("second", second)):
        tasks[name] = asyncio.ensure_future(result(channel))
        tasks[name].add_done_callback(lambda _t, name=name: done_order.append(name))
    h.recorder.unblock(second_instance)
    await h.instance_free()  # the second batch's results have been handed over
    for _ in range(3):
        await asyncio.sleep(0)  # let a delivered result reach its awaiting task
    assert tasks["second"].done() is not preserve
    h.recorder.unblock(first_instance)
    await asyncio.gather(*tasks.values())
    assert done_order == (["first", "second"] if preserve else ["second", "first"])
    assert first.dropped == 0 and second.dropped == 0


async def test_cancelled_request_leaves_the_queue_with_cancelled(h):
    h.build(max_batch_size=1)
    h.recorder.block("m_0_0")
    busy = h.submit("busy")
    await h.started(1)
    flag = {"cancelled": False}
    victim = h.submit("victim", cancelled=lambda: flag["cancelled"])
    survivor = h.submit("survivor")
    flag["cancelled"] = True
    h.batcher.poke()
    error = await error_of(victim)
    assert error.code is ErrorCode.CANCELLED
    h.recorder.unblock()
    await result(busy), await result(survivor)
    assert h.recorder.ids == [["busy"], ["survivor"]]
    assert victim.dropped == 0 and victim.closed


async def test_a_failing_batch_fails_each_request_exactly_once(h):
    h.build(max_batch_size=8, batching="max_queue_delay_microseconds: 1000000 preserve_ordering: true")
    h.recorder.fail = True
    channels = [h.submit(f"r{i}") for i in range(3)]
    h.advance(1.0)
    for channel in channels:
        error = await error_of(channel)
        assert error.code is ErrorCode.INTERNAL and "model exploded" in error.message
    await h.instance_free()
    assert all(c.closed and c.dropped == 0 for c in channels)
    assert h.recorder.ids == [["r0", "r1", "r2"]]
    stats = h.stats.snapshot()
    assert stats.execution_count == 1 and stats.fail.count == 3 and stats.inference_count == 0


async def test_two_instances_run_two_batches_at_once(h):
    h.build(max_batch_size=2, instances=2)
    h.recorder.block("m_0_0")
    h.recorder.block("m_0_1")
    a = h.submit("a")
    b = h.submit("b")
    # Both executions are inside the backend at the same time: with one instance at a time the second
    # would never start while the first is blocked.
    await h.started(2)
    assert sorted(name for name, _ in h.recorder.batches) == ["m_0_0", "m_0_1"]
    h.recorder.unblock()
    await result(a), await result(b)


async def test_statistics_count_inferences_executions_and_batch_sizes(h):
    h.build(max_batch_size=4)
    h.recorder.block("m_0_0")
    channels = [h.submit("r0", batch=2)]
    await h.started(1)
    channels += [h.submit("r1"), h.submit("r2", batch=3), h.submit("r3", batch=2), h.submit("r4", batch=2)]
    h.recorder.unblock()
    for c in channels:
        await result(c)
    assert h.recorder.ids == [["r0"], ["r1", "r2"], ["r3", "r4"]]
    stats = h.stats.snapshot()
    assert stats.inference_count == 10
    assert stats.execution_count == 3
    assert stats.success.count == 5
    assert {size: b.compute_infer.count for size, b in stats.batch.items()} == {2: 1, 4: 2}


async def test_real_clock_delay_sends_without_a_poke(h):
    h.build(max_batch_size=8, batching="max_queue_delay_microseconds: 1000", fake_clock=False)
    a, b = h.submit("a"), h.submit("b")
    await result(a), await result(b)  # the batcher's own timer sent them
    assert h.recorder.ids == [["a", "b"]]


async def test_unload_runs_what_it_can_and_fails_the_rest(h):
    h.build(max_batch_size=1, batching="preserve_ordering: true")
    h.recorder.block("m_0_0")
    busy = h.submit("busy")
    await h.started(1)
    stuck = h.submit("stuck")
    await h.batcher.stop(drain_timeout_s=0.05)  # the instance stays blocked past the drain timeout
    error = await error_of(stuck)
    assert error.code is ErrorCode.UNAVAILABLE
    assert (await error_of(h.submit("late"))).code is ErrorCode.UNAVAILABLE
    h.recorder.unblock()
    await result(busy)
    assert stuck.dropped == 0


# ---- through the real server ----------------------------------------------------------------------

BATCHED_IDENTITY = """
name: "batched"
backend: "onnxruntime"
max_batch_size: 16
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU, count: 1 } ]
dynamic_batching { max_queue_delay_microseconds: 500000 }
"""


async def test_grpc_concurrent_requests_share_executions(tmp_path: Path, running):
    model_folder(tmp_path, "batched", BATCHED_IDENTITY, identity_model, shape=["batch", 4])
    async with running(tmp_path, allow_http=False) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            async def one(i: int) -> np.ndarray:
                data = np.full((1, 4), i, dtype=np.float32)
                inp = aioclient.InferInput("INPUT0", [1, 4], "FP32")
                inp.set_data_from_numpy(data)
                out = await client.infer("batched", [inp], request_id=str(i))
                return out.as_numpy("OUTPUT0")

            outs = await asyncio.gather(*(one(i) for i in range(16)))
            for i, out in enumerate(outs):
                np.testing.assert_array_equal(out, np.full((1, 4), i, dtype=np.float32))
            stats = (await client.get_inference_statistics("batched", as_json=True))["model_stats"][0]
            assert int(stats["inference_count"]) == 16
            assert int(stats["execution_count"]) < 16
        finally:
            await client.close()
