"""The sequence batcher driven through `submit()` with a fake accumulator model, plus a few gRPC tests.

Timing never depends on sleeps: queue delays and idle times run on an injected fake clock (the test moves
it and calls `poke()`, which examines the sequences at once), and executions are held inside the fake
model until the test releases them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.bounded import KEPT_STRING_MAX
from asr_server import heap
from asr_server.backends.base import Backend, ModelContext
from asr_server.errors import ErrorCode, ServerError
from asr_server.messages import InferRequest, InferResponse, SequenceControl, Tensor
from asr_server.model_stats import ModelStatistics
from asr_server.scheduling.instances import Instance, InstancePool
from asr_server.scheduling.pending import Pending, ResponseChannel
from asr_server.scheduling.sequence_batcher import MAX_LOOP_FAILURES, SequenceBatcher
from asr_server.scheduling.sequence_options import DEFAULT_MAX_SEQUENCES, sequence_options
from asr_server.scheduling.sequence_state import SharedControlTensors, control_inputs, control_tensors, corrid_value
from tests.helpers.grpc_streams import stream_all, x_input
from tests.helpers.sequence_models import accumulator, py_accumulator

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

WAIT_S = 10.0  # upper bound for something that must happen; never reached when the code is right

DELAY = "oldest { max_queue_delay_microseconds: 500000 }"  # a request may wait 0.5 s for other sequences
STATE = """state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ]
                     initial_state { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "zero" } } ]"""
CONTROLS = """control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] } ]"""


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0  # seconds

    def __call__(self) -> float:
        return self.now


@dataclasses.dataclass
class Seen:
    """One request as the fake model received it."""

    id: str
    values: dict[str, object]  # input name -> its single value
    shapes: dict[str, tuple]  # input name -> shape


class Model:
    """What the fake instances ran, and which instances are held inside `execute` (thread-safe)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, list[Seen]]] = []  # (instance name, requests), in start order
        self.held: set[str] = set()
        self._cond = threading.Condition()

    def hold(self, *instances: str) -> None:
        with self._cond:
            self.held.update(instances)

    def release(self) -> None:
        with self._cond:
            self.held.clear()
            self._cond.notify_all()

    def ran(self, instance: str, requests: list[Seen]) -> None:
        with self._cond:
            self.runs.append((instance, requests))
            self._cond.notify_all()
            assert self._cond.wait_for(lambda: instance not in self.held, WAIT_S), "the test never released it"

    def wait_runs(self, count: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.runs) >= count, WAIT_S), self.runs

    def ids(self) -> list[list[str]]:
        return [[seen.id for seen in requests] for _, requests in self.runs]

    def placement(self) -> dict[str, str]:
        """Request id -> the instance that ran it."""
        return {seen.id: instance for instance, requests in self.runs for seen in requests}

    def seen(self) -> list[Seen]:
        return [seen for _, requests in self.runs for seen in requests]


class Accumulator(Backend):
    """OUTPUT = STATE_OUT = STATE_IN + INPUT (OUTPUT = INPUT when the config declares no state)."""

    def __init__(self, context: ModelContext, model: Model) -> None:
        super().__init__(context)
        self.model = model

    def load(self) -> None:
        pass

    def execute(self, requests: Sequence[InferRequest], senders=None) -> list:
        self.model.ran(self.context.instance_name, [
            Seen(r.id, {t.name: t.data.reshape(-1)[0].item() for t in r.inputs},
                 {t.name: t.data.shape for t in r.inputs}) for r in requests])
        responses = []
        for request in requests:
            total = request.input("INPUT").data.copy()
            outputs = [Tensor("OUTPUT", "FP32", total)]
            state = request.find_input("STATE_IN")
            if state is not None:
                total += state.data
                outputs.append(Tensor("STATE_OUT", "FP32", total.copy()))
            responses.append(InferResponse("m", "1", outputs=outputs))
        return responses


def parse(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


class Harness:
    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self.model = Model()
        self.clock = FakeClock()
        self.stats = ModelStatistics()
        self.batcher: Optional[SequenceBatcher] = None
        self.pool: Optional[InstancePool] = None
        self._steps: dict[object, int] = {}

    def build(self, batching: str = "", max_batch_size: int = 4, instances: int = 1, parameters: str = "",
              fake_clock: bool = True) -> SequenceBatcher:
        config = parse(f'name: "m" max_batch_size: {max_batch_size} {parameters} sequence_batching {{ {batching} }}')
        backends = [Accumulator(ModelContext("m", 1, config, self.model_dir, self.model_dir / "1",
                                             instance_name=f"m_0_{i}"), self.model) for i in range(instances)]
        self.pool = InstancePool([Instance(b) for b in backends], self.stats, decoupled=False)
        self.batcher = SequenceBatcher(self.pool, sequence_options(config, self.model_dir),
                                       clock=self.clock if fake_clock else None)
        return self.batcher

    def advance(self, seconds: float) -> None:
        """Move the fake clock and let the batcher act on it."""
        self.clock.now += seconds
        self.batcher.poke()

    def send(self, sequence, value: float = 1.0, start: bool = False, end: bool = False, rows: int = 1,
             cancelled=None) -> ResponseChannel:
        """A request of `sequence`; its id is the sequence and its step number ("a0", "a1", ...)."""
        step = self._steps.get(sequence, 0)
        self._steps[sequence] = step + 1
        shape = (rows, 1) if self.batcher.options.batched else (1,)
        data = np.full(shape, value, np.float32)
        request = InferRequest("m", id=f"{sequence}{step}", inputs=[Tensor("INPUT", "FP32", data)],
                               sequence=SequenceControl(sequence, start, end))
        if cancelled is not None:
            request.cancelled = cancelled
        channel = ResponseChannel(asyncio.get_running_loop())
        self.batcher.submit(Pending(request, channel, rows))
        return channel

    async def started(self, count: int) -> None:
        await asyncio.to_thread(self.model.wait_runs, count)

    async def settled(self) -> None:
        """Wait until every batch started so far has finished and freed its sequences for their next request
        (no instance may be held). The batcher tracks each batch's completion (Scheduler._tasks); its own
        callback, which frees the sequences, runs before this wait's."""
        if self.batcher._tasks:
            await asyncio.wait(list(self.batcher._tasks), timeout=WAIT_S)


@pytest.fixture
async def h(tmp_path: Path):
    harness = Harness(tmp_path)
    yield harness
    harness.model.release()
    if harness.batcher is not None:
        harness.clock.now += 3600  # past every queue delay: draining sends what is queued
        await harness.batcher.stop(drain_timeout_s=WAIT_S)
        await asyncio.to_thread(harness.pool.shutdown)


async def result(channel: ResponseChannel) -> InferResponse:
    return await asyncio.wait_for(channel.first(), WAIT_S)


async def value(channel: ResponseChannel) -> float:
    return float((await result(channel)).outputs[0].data.reshape(-1)[0])


async def error_of(channel: ResponseChannel) -> ServerError:
    with pytest.raises(ServerError) as info:
        await asyncio.wait_for(channel.first(), WAIT_S)
    return info.value


async def start_sequences(h: Harness, names: str) -> None:
    """Start the sequences together and wait until their first steps are done (they share batches)."""
    channels = [h.send(name, start=True) for name in names]
    h.advance(h.batcher.options.max_delay_s)  # what cannot share the first batch leaves after it
    for channel in channels:
        await result(channel)
    await h.settled()


# ---- options -----------------------------------------------------------------------------------------


def test_options_are_read_once_from_the_config(tmp_path: Path):
    def options(text: str, max_batch_size: int = 8):
        return sequence_options(parse(f'name: "m" max_batch_size: {max_batch_size} {text}'), tmp_path)

    oldest = options(f"""sequence_batching {{ max_sequence_idle_microseconds: 250000 {CONTROLS} {STATE}
        oldest {{ max_queue_delay_microseconds: 2000 preferred_batch_size: [ 4 ] max_candidate_sequences: 16 }} }}""")
    assert (oldest.model, oldest.strategy, oldest.max_delay_s, oldest.idle_s) == ("m", "oldest", 0.002, 0.25)
    assert (oldest.max_batch_size, oldest.batched, oldest.max_sequences) == (8, True, DEFAULT_MAX_SEQUENCES)
    assert [(c.name, c.datatype, c.false_true) for c in oldest.controls] == [
        ("START", "INT32", (0, 1)), ("END", "FP32", (0.0, 1.0)), ("READY", "BOOL", (False, True)),
        ("CORRID", "UINT64", ())]
    assert [(s.input_name, s.output_name, s.datatype, s.dims) for s in oldest.states] == [
        ("STATE_IN", "STATE_OUT", "FP32", (1,))]
    direct = options("sequence_batching { direct { max_queue_delay_microseconds: 3000 } }", max_batch_size=0)
    assert (direct.strategy, direct.max_delay_s, direct.idle_s) == ("direct", 0.003, 1.0)  # Triton's 1 s default
    assert (direct.max_batch_size, direct.batched) == (1, False)
    neither = options("sequence_batching { }")
    assert (neither.strategy, neither.max_delay_s, neither.controls, neither.states) == ("direct", 0.0, (), ())
    capped = options('sequence_batching { } parameters { key: "max_sequences" value { string_value: "3" } }')
    assert capped.max_sequences == 3
    with pytest.raises(ServerError, match="parameter 'max_sequences' must be a positive integer, got '0' for m"):
        options('sequence_batching { } parameters { key: "max_sequences" value { string_value: "0" } }')
    with pytest.raises(dataclasses.FrozenInstanceError):
        oldest.idle_s = 5.0


# ---- control inputs and implicit state ---------------------------------------------------------------


async def test_control_inputs_carry_start_end_ready_and_the_correlation_id(h):
    h.build(CONTROLS)
    for flags in (dict(start=True), {}, dict(end=True)):
        await result(h.send(7, **flags))
        await h.settled()
    assert [{k: v for k, v in seen.values.items() if k != "INPUT"} for seen in h.model.seen()] == [
        {"START": 1, "END": 0.0, "READY": True, "CORRID": 7},
        {"START": 0, "END": 0.0, "READY": True, "CORRID": 7},
        {"START": 0, "END": 1.0, "READY": True, "CORRID": 7},
    ]
    assert {shape for seen in h.model.seen() for shape in seen.shapes.values()} == {(1, 1)}
    assert not h.batcher.sequences  # its END ran: freed


async def test_a_model_that_does_not_batch_gets_controls_and_state_without_a_batch_dimension(h):
    h.build(f"{CONTROLS} {STATE}", max_batch_size=0)
    await result(h.send(3, 2.0, start=True))
    await h.settled()
    assert await value(h.send(3, 5.0, end=True)) == 7.0
    assert {shape for seen in h.model.seen() for shape in seen.shapes.values()} == {(1,)}


def test_control_tensors_are_shared_read_only_arrays_of_the_declared_types():
    """Every streamed chunk carries the same control values: their arrays are made once and shared, so they
    are read-only (as the inputs decoded from the wire are), and equal values of different declared types
    (START int32 1, READY bool True) stay apart."""
    config = mc.ModelConfig()
    text_format.Parse(f"sequence_batching {{ {CONTROLS} }}", config)
    controls = control_inputs(config)

    def tensors(sequence_id, **flags):
        request = InferRequest("m", sequence=SequenceControl(sequence_id, **flags))
        return {t.name: t for t in control_tensors(controls, request, batched=True)}

    first, again, other = tensors(7, start=True), tensors(7, start=True), tensors(8)
    assert {name: (t.datatype, t.data.dtype.name, t.data.tolist()) for name, t in first.items()} == {
        "START": ("INT32", "int32", [[1]]), "END": ("FP32", "float32", [[0.0]]),
        "READY": ("BOOL", "bool", [[True]]), "CORRID": ("UINT64", "uint64", [[7]])}
    assert all(again[name].data is first[name].data for name in first)
    assert other["CORRID"].data.tolist() == [[8]] and other["START"].data.tolist() == [[0]]
    with pytest.raises(ValueError):
        first["START"].data[0, 0] = 5


def test_each_sequence_step_shares_its_control_tensors_and_the_table_stays_bounded(monkeypatch):
    """The batcher's controls come from a table: a stream's chunks reuse the tensors made for the same
    (id, START, END), other flags or ids get their own, and past the limit the table starts again."""
    config = mc.ModelConfig()
    text_format.Parse(f"sequence_batching {{ {CONTROLS} }}", config)
    shared = SharedControlTensors(control_inputs(config), batched=True)

    def tensors(sequence_id, **flags):
        return shared(InferRequest("m", sequence=SequenceControl(sequence_id, **flags)))

    middle = tensors(7)
    assert tensors(7) is middle
    assert [t.data.tolist() for t in middle] == [[[0]], [[0.0]], [[True]], [[7]]]
    assert tensors(7, end=True) is not middle and tensors(7, end=True)[1].data.tolist() == [[1.0]]
    assert tensors("7") is not middle  # a string id (hashed for UINT64) is another sequence than 7
    monkeypatch.setattr(SharedControlTensors, "LIMIT", 3)
    for sequence_id in range(100, 110):
        tensors(sequence_id)
    assert len(shared._made) <= 3 and tensors(109)[3].data.tolist() == [[109]]


def test_ids_stay_out_of_the_table_when_no_control_reads_them_and_long_ids_are_not_kept():
    """Without a CORRID control, every sequence shares the tensors of its flags (the table holds no id); with
    one, a long string id's tensors are made per request, so no client string of any length is kept."""
    config = mc.ModelConfig()
    text_format.Parse('sequence_batching { control_input { name: "START" control {'
                      ' kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } } }', config)
    flags_only = SharedControlTensors(control_inputs(config), batched=True)
    first = flags_only(InferRequest("m", sequence=SequenceControl("a" * 10_000, start=True)))
    assert flags_only(InferRequest("m", sequence=SequenceControl(12, start=True))) is first
    assert list(flags_only._made) == [(True, False)]
    config = mc.ModelConfig()
    text_format.Parse(f"sequence_batching {{ {CONTROLS} }}", config)
    by_id = SharedControlTensors(control_inputs(config), batched=True)
    long_id = "b" * (KEPT_STRING_MAX + 1)
    made = by_id(InferRequest("m", sequence=SequenceControl(long_id)))
    assert made[3].data.tolist() == [[corrid_value(long_id, "UINT64")]] and not by_id._made
    short = by_id(InferRequest("m", sequence=SequenceControl("short")))
    assert by_id(InferRequest("m", sequence=SequenceControl("short"))) is short and len(by_id._made) == 1


def test_a_string_correlation_id_in_a_bytes_control_is_never_kept():
    config = mc.ModelConfig()
    text_format.Parse('''sequence_batching { control_input { name: "CORRID" control {
        kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } } }''', config)
    shared = SharedControlTensors(control_inputs(config), batched=False)
    request = InferRequest("m", sequence=SequenceControl("utterance-1"))
    first = shared(request)
    assert first[0].data.tolist() == [b"utterance-1"] and shared(request) is not first and not shared._made


def test_string_correlation_ids_reach_the_model_as_bytes_or_hashed_to_uint64():
    assert corrid_value("utterance-1", "BYTES") == b"utterance-1" and corrid_value(5, "BYTES") == b"5"
    hashed = corrid_value("utterance-1", "UINT64")
    assert 0 <= hashed < 2**64 and hashed == corrid_value("utterance-1", "UINT64")  # stable across calls
    assert hashed != corrid_value("utterance-2", "UINT64")
    assert corrid_value(42, "UINT64") == 42


async def test_implicit_state_carries_each_sequences_running_sum_between_its_steps(h):
    h.build(STATE)
    a0, b0 = h.send("a", 1.0, start=True), h.send("b", 10.0, start=True)
    assert [await value(a0), await value(b0)] == [1.0, 10.0]
    await h.settled()
    a1, b1 = h.send("a", 2.0), h.send("b", 20.0, end=True)
    outputs = [await result(a1), await result(b1)]
    assert [float(o.outputs[0].data[0, 0]) for o in outputs] == [3.0, 30.0]
    assert all([t.name for t in o.outputs] == ["OUTPUT"] for o in outputs)  # the state never reaches the client
    assert h.model.ids() == [["a0", "b0"], ["a1", "b1"]]  # the sequences shared batches
    assert [seen.values["STATE_IN"] for seen in h.model.seen()] == [0.0, 0.0, 1.0, 10.0]
    await h.settled()
    assert list(h.batcher.sequences) == ["a"]  # b ended and was freed
    assert await value(h.send("a", 5.0, start=True)) == 5.0  # a new START begins from the initial state


async def test_a_sequences_steps_run_one_at_a_time_in_order(h):
    h.build(STATE)
    channels = [h.send("a", 1.0, start=True), h.send("a", 2.0), h.send("a", 3.0, end=True),
                h.send("b", 5.0, start=True)]
    assert [await value(c) for c in channels] == [1.0, 3.0, 6.0, 5.0]
    assert h.model.ids() == [["a0", "b0"], ["a1"], ["a2"]]


async def test_the_initial_state_comes_from_the_configs_data_file(h, tmp_path: Path):
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "ten").write_bytes(np.float32(10.0).tobytes())
    h.build(STATE.replace('zero_data: true name: "zero"', 'data_file: "ten" name: "ten"'))
    assert await value(h.send(1, 1.0, start=True)) == 11.0


# ---- when a batch leaves -----------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["oldest", "direct"])
async def test_a_request_waits_up_to_the_queue_delay_for_the_other_sequences_of_its_instance(h, strategy):
    h.build(f"{strategy} {{ max_queue_delay_microseconds: 500000 }}")
    a0, b0 = h.send("a", start=True), h.send("b", start=True)
    await result(a0), await result(b0)  # no other live sequence could send: they left at once
    await h.settled()
    a1 = h.send("a")
    h.advance(0.4)
    assert h.batcher.queued == 1  # b is live and may still send
    b1 = h.send("b")
    h.batcher.poke()
    assert h.batcher.queued == 0  # every live sequence of the instance has sent: nothing to wait for
    await result(a1), await result(b1)
    await h.settled()
    a2 = h.send("a")
    h.advance(0.49)
    assert h.batcher.queued == 1
    h.advance(0.02)  # a2 has waited the delay
    await result(a2)
    assert h.model.ids() == [["a0", "b0"], ["a1", "b1"], ["a2"]]


async def test_without_a_queue_delay_a_request_leaves_at_once(h):
    h.build("")  # no strategy named: direct, Triton's default, with no delay
    await start_sequences(h, "ab")
    await result(h.send("a"))
    assert h.model.ids()[-1] == ["a1"]


async def test_a_full_batch_leaves_without_waiting_for_the_delay(h):
    h.build(DELAY, max_batch_size=2)
    await start_sequences(h, "abc")
    a1, b1 = h.send("a"), h.send("b")
    h.batcher.poke()
    assert h.batcher.queued == 0  # c may still send, but the batch is full
    await result(a1), await result(b1)
    assert h.model.ids() == [["a0", "b0"], ["c0"], ["a1", "b1"]]


async def test_a_preferred_batch_size_does_not_send_a_batch_early(h):
    """Triton's oldest strategy would send [a1, b1] at once (2 is preferred); this batcher waits for c or the
    delay. Pinned so that honouring preferred sizes is a deliberate change (see sequence_options)."""
    h.build("oldest { max_queue_delay_microseconds: 500000 preferred_batch_size: [ 2 ] }")
    await start_sequences(h, "abc")
    a1, b1 = h.send("a"), h.send("b")
    h.batcher.poke()
    assert h.batcher.queued == 2
    h.advance(0.51)
    await result(a1), await result(b1)
    assert h.model.ids()[-1] == ["a1", "b1"]


async def test_max_candidate_sequences_does_not_limit_a_batch(h):
    """Every live sequence is a candidate (no backlog; see sequence_options): four sequences share one batch
    although max_candidate_sequences is 2."""
    h.build("oldest { max_candidate_sequences: 2 max_queue_delay_microseconds: 500000 }")
    await start_sequences(h, "abcd")
    assert h.model.ids() == [["a0", "b0", "c0", "d0"]]


async def test_requests_arriving_one_by_one_wait_for_the_armed_timer_and_the_last_sender_goes_at_once(h):
    """Under paced load requests arrive one by one while a batch forms: only the first is examined (it arms
    the timer); the others join without a scheduling step each, and still leave together at the deadline. A
    request from the last sequence of its instance that could still send makes its batch leave at once."""
    h.build(f"{DELAY} max_sequence_idle_microseconds: 60000000", max_batch_size=8)
    await start_sequences(h, "abcdef")
    steps = []
    step = h.batcher._step
    h.batcher._step = lambda: steps.append(1) or step()
    for name in "abcd":
        h.send(name)
        await asyncio.sleep(0)  # the loop's turn: a scheduled examination would run here
        h.clock.now += 0.01
    assert len(steps) == 1 and len(h.model.runs) == 1  # only the first arrival was examined; nothing left
    h.advance(h.batcher.options.max_delay_s)
    await h.started(2)
    assert h.model.ids()[1] == ["a1", "b1", "c1", "d1"]
    await h.settled()
    for name in "abcde":
        h.send(name)
        await asyncio.sleep(0)
    assert len(h.model.runs) == 2  # f may still send: they wait for it
    h.send("f")  # no other sequence of the instance can send now: the batch goes without waiting
    await h.started(3)
    assert h.model.ids()[2] == ["a2", "b2", "c2", "d2", "e1", "f1"]


async def test_the_batchers_own_timer_sends_after_the_delay_without_a_poke(h):
    h.build("oldest { max_queue_delay_microseconds: 1000 }", fake_clock=False)
    a0, b0 = h.send("a", start=True), h.send("b", start=True)
    await result(a0), await result(b0)
    await h.settled()
    await result(h.send("a"))  # b never sends: the 1 ms timer sent a1 alone
    assert h.model.ids() == [["a0", "b0"], ["a1"]]


# ---- instances ---------------------------------------------------------------------------------------


async def test_each_sequence_runs_on_the_instance_its_start_was_assigned(h):
    h.build(STATE, instances=2)
    for step in range(3):
        channels = {name: h.send(name, float(i + 1), start=step == 0, end=step == 2) for i, name in enumerate("abcd")}
        assert {name: await value(c) for name, c in channels.items()} == {
            name: (i + 1) * (step + 1.0) for i, name in enumerate("abcd")}
        await h.settled()
    instances = {}
    for request_id, instance in h.model.placement().items():
        instances.setdefault(request_id[0], set()).add(instance)
    assert all(len(used) == 1 for used in instances.values()), instances
    assert sorted(used.pop() for used in instances.values()) == ["m_0_0", "m_0_0", "m_0_1", "m_0_1"]  # round robin


async def test_a_sequence_waits_for_its_own_busy_instance_while_another_is_idle(h):
    h.build(instances=2)
    await start_sequences(h, "xy")  # x on m_0_1, y on m_0_0 (round robin)
    h.model.hold("m_0_1")
    x1 = h.send("x")
    await h.started(2)
    z0 = h.send("z", start=True)  # the third sequence: m_0_1 again
    h.batcher.poke()
    assert h.batcher.queued == 1 and h.pool.idle_count == 1
    x2 = h.send("x", start=True)  # x restarts once x1 has run, on its own instance
    h.model.release()
    for channel in (x1, z0, x2):
        await result(channel)
    await h.settled()
    assert h.model.placement() == {"x0": "m_0_1", "y0": "m_0_0", "x1": "m_0_1", "z0": "m_0_1", "x2": "m_0_1"}
    assert h.model.ids()[2:] == [["x1"], ["z0", "x2"]]


# ---- sequences' lives --------------------------------------------------------------------------------


async def test_requests_that_belong_to_no_sequence_are_refused(h):
    h.build()
    for sequence_id in (0, ""):
        error = await error_of(h.send(sequence_id, start=True))
        assert error.code is ErrorCode.INVALID_ARGUMENT
        assert error.message == "inference request to model 'm' must specify a non-zero or non-empty correlation ID"
    error = await error_of(h.send(5))
    assert error.message == ("inference request for sequence 5 to model 'm' must specify the START flag on the "
                             "first request of the sequence")
    error = await error_of(h.send(6, start=True, rows=2))
    assert error.message == ("inference request to model 'm' must specify batch-size 1 due to requirements of "
                             "sequence batcher")
    ended = h.send(8, start=True, end=True)
    after_end = await error_of(h.send(8))  # its END is queued: the sequence takes no more requests
    assert "must specify the START flag" in after_end.message
    await result(ended)
    assert h.stats.snapshot().failures_by_reason == {"OTHER": 5}
    assert not h.model.ids()[1:] and h.model.ids() == [["80"]]


async def test_a_start_right_after_an_end_begins_a_new_sequence_that_lives_on(h):
    """A client may reuse an id as soon as it has sent END (perf_analyzer's id range wraps): the START that
    queues behind the END begins a new sequence, which the END must not free."""
    h.build(STATE)
    await result(h.send(4, 1.0, start=True))
    await h.settled()
    old_end, new_start = h.send(4, 2.0, end=True), h.send(4, 5.0, start=True)
    assert [await value(old_end), await value(new_start)] == [3.0, 5.0]
    await h.settled()
    assert 4 in h.batcher.sequences
    assert await value(h.send(4, 1.0, end=True)) == 6.0


async def test_a_sequence_silent_for_the_idle_time_is_freed(h):
    h.build("max_sequence_idle_microseconds: 200000")
    await result(h.send(3, start=True))
    await h.settled()
    h.advance(0.19)
    assert 3 in h.batcher.sequences
    h.advance(0.02)  # 0.21 s since its last request
    assert 3 not in h.batcher.sequences
    assert "must specify the START flag" in (await error_of(h.send(3))).message


async def test_a_running_or_queued_sequence_is_never_idle(h):
    h.build("max_sequence_idle_microseconds: 100000", max_batch_size=1, instances=2)
    await start_sequences(h, "xy")  # x on m_0_1, y on m_0_0
    h.model.hold("m_0_1")
    x1 = h.send("x")
    await h.started(3)
    z0 = h.send("z", start=True)  # queued behind x1 on m_0_1
    h.advance(1.0)
    assert set(h.batcher.sequences) == {"x", "z"}  # y was silent: freed
    h.model.release()
    await result(x1), await result(z0)


async def test_new_sequences_beyond_max_sequences_are_refused_until_one_ends(h):
    h.build(parameters='parameters { key: "max_sequences" value { string_value: "2" } }')
    a0, b0, c0 = h.send("a", start=True), h.send("b", start=True), h.send("c", start=True)
    error = await error_of(c0)
    assert (error.code, error.message) == (ErrorCode.RESOURCE_EXHAUSTED,
                                           "model 'm' has reached its limit of 2 live sequences")
    await result(a0), await result(b0)
    await h.settled()
    await result(h.send("a", start=True))  # a restart is no new sequence
    await h.settled()
    await result(h.send("b", end=True))
    await h.settled()
    await result(h.send("c", start=True))  # b's end made room
    assert set(h.batcher.sequences) == {"a", "c"}


async def test_the_heap_is_trimmed_when_the_last_sequence_is_freed(h):
    """glibc keeps freed sequence state in its arenas; the batcher asks for malloc_trim when it holds no
    sequence any more, at most once per interval (bundled repo: 418 -> 340 MB after a burst of streams)."""
    if heap._malloc_trim is None:
        pytest.skip("malloc_trim is glibc's")
    h.build("max_sequence_idle_microseconds: 100000")
    trimmer = h.batcher.trimmer
    await result(h.send(1, start=True, end=True))
    await h.settled()
    assert trimmer.trims == 1  # the only sequence ended
    await result(h.send(2, start=True, end=True))
    await h.settled()
    assert trimmer.trims == 1  # not again within the interval
    trimmer.interval_s = 0.0
    await result(h.send(3, start=True))
    await h.settled()
    assert trimmer.trims == 1  # sequence 3 is live
    h.advance(0.2)
    assert not h.batcher.sequences and trimmer.trims == 2  # freed when idle: trimmed


# ---- failures ----------------------------------------------------------------------------------------


async def test_a_request_cancelled_in_the_queue_fails_and_its_sequence_goes_on(h):
    h.build(STATE)
    flag = {"cancelled": False}
    h.model.hold("m_0_0")
    a0 = h.send("a", 1.0, start=True)
    await h.started(1)
    a1 = h.send("a", 2.0, cancelled=lambda: flag["cancelled"])
    a2 = h.send("a", 4.0)
    flag["cancelled"] = True
    h.model.release()
    assert await value(a0) == 1.0
    assert (await error_of(a1)).code is ErrorCode.CANCELLED
    assert await value(a2) == 5.0  # the cancelled step never ran
    assert a1.dropped == 0 and h.stats.snapshot().failures_by_reason == {"CANCELED": 1}


async def test_a_request_that_cannot_be_prepared_fails_alone_with_its_sequence(h, caplog):
    """A UINT64 CORRID cannot hold -1 (the core refuses such ids first; this is defence in depth): that
    request fails, the sequence is dropped with what it had queued, the batch goes on without it."""
    h.build(CONTROLS)
    bad, bad_next, good = h.send(-1, start=True), h.send(-1), h.send(5, start=True)
    error = await error_of(bad)
    assert error.code is ErrorCode.INVALID_ARGUMENT
    assert "sequence -1" in error.message and "cannot be prepared: OverflowError" in error.message
    assert "sequence -1 of model 'm' failed on an earlier request" in (await error_of(bad_next)).message
    await result(good)
    assert h.model.ids() == [["50"]] and -1 not in h.batcher.sequences
    assert "failed before execution" in caplog.text
    assert bad.dropped == bad_next.dropped == 0


async def test_a_failing_step_fails_the_requests_it_took_and_batching_goes_on(h, caplog):
    h.build()

    def broken() -> bool:
        raise RuntimeError("cancellation check failed")

    bad = h.send(11, start=True, cancelled=broken)
    assert "cancellation check failed" in (await error_of(bad)).message
    assert "sequence batcher of model 'm' failed; 1 request(s) failed with it" in caplog.text
    assert 11 not in h.batcher.sequences and h.batcher.healthy
    await result(h.send(12, start=True))
    assert bad.dropped == 0


async def test_failing_steps_that_free_nothing_stop_the_batcher(h, caplog):
    h.build()
    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("bug in the batcher")

    h.batcher.table.heads_by_instance = broken
    error = await error_of(h.send(1, start=True))
    assert (error.code, error.message) == (ErrorCode.UNAVAILABLE, "model 'm' is not ready: its sequence batcher "
                                                                  "stopped (RuntimeError: bug in the batcher)")
    assert len(calls) == MAX_LOOP_FAILURES and not h.batcher.healthy
    assert not h.batcher.sequences
    assert (await error_of(h.send(2, start=True))).code is ErrorCode.UNAVAILABLE  # refused at once
    assert len(calls) == MAX_LOOP_FAILURES


# ---- stopping ----------------------------------------------------------------------------------------


async def test_stop_drains_queued_sequence_requests(h):
    """Requests queued behind a busy instance when the scheduler stops are still run."""
    h.build(max_batch_size=1)
    h.model.hold("m_0_0")
    channels = [h.send(70 + i, float(i + 1), start=True, end=True) for i in range(4)]
    await h.started(1)
    assert h.batcher.queued == 3  # one runs, the others wait for the single instance
    stopping = asyncio.create_task(h.batcher.stop(drain_timeout_s=WAIT_S))
    await asyncio.sleep(0)  # one turn of the loop: stop() has stopped accepting and is draining
    assert (await error_of(h.send(99, start=True))).message == "model is being unloaded"
    h.model.release()
    await stopping
    assert [await value(c) for c in channels] == [1.0, 2.0, 3.0, 4.0]
    assert h.model.ids() == [["700"], ["710"], ["720"], ["730"]]


async def test_stop_fails_what_is_still_queued_when_the_drain_times_out(h):
    h.build(max_batch_size=1)
    h.model.hold("m_0_0")
    running, stuck = h.send(1, start=True), h.send(2, start=True)
    await h.started(1)
    await h.batcher.stop(drain_timeout_s=0.05)  # the instance stays held past the drain timeout
    error = await error_of(stuck)
    assert (error.code, error.message) == (ErrorCode.UNAVAILABLE, "model was unloaded before the request ran")
    h.model.release()
    await result(running)
    assert stuck.dropped == 0 and not h.batcher.sequences


async def test_stop_leaves_no_wake_up_behind(h):
    """A live sequence arms the idle timer; once the batcher stops nothing may hold it (and the unloaded
    model) alive until that deadline."""
    h.build("max_sequence_idle_microseconds: 600000000")
    await result(h.send(5, start=True))
    await h.settled()
    assert h.batcher._timer is not None  # the idle deadline of sequence 5, 600 s away
    await h.batcher.stop(drain_timeout_s=WAIT_S)
    assert h.batcher._timer is None and h.batcher._pump_soon is None


# ---- through the real server -------------------------------------------------------------------------


async def test_implicit_state_running_sums_of_50_interleaved_sequences(tmp_path: Path, running, client_of):
    accumulator(tmp_path)
    sequences, steps = 50, 5
    requests = []
    for step in range(steps):
        for seq in range(sequences):
            requests.append(dict(
                model_name="accumulator", inputs=x_input((seq + 1) * (step + 1)), request_id=f"{seq}:{step}",
                sequence_id=1000 + seq, sequence_start=step == 0, sequence_end=step == steps - 1,
            ))
    async with running(tmp_path, allow_http=False) as server:
        client = client_of(server)
        results = await stream_all(client, requests)
        assert all(error is None for _, error in results), [e for _, e in results if e][:3]
        got = {r.get_response().id: float(r.as_numpy("OUTPUT")[0, 0]) for r, _ in results}
        for seq in range(sequences):
            for step in range(steps):
                expected = (seq + 1) * sum(k + 1 for k in range(step + 1))
                assert got[f"{seq}:{step}"] == expected, (seq, step)
        stats = (await client.get_inference_statistics("accumulator", as_json=True))["model_stats"][0]
        assert int(stats["inference_count"]) == sequences * steps
        assert int(stats["execution_count"]) < sequences * steps  # sequences shared batches
        scheduler = server.manager.get("accumulator").scheduler
        assert scheduler.sequences == {}  # every sequence ended and was freed


async def test_each_sequence_stays_on_one_of_several_instances(tmp_path: Path, running, client_of):
    # py_accumulator keeps its sums in the instance: a step that ran on the other instance would not find
    # its sequence's sum (Triton routes every request of a sequence to the same instance).
    py_accumulator(tmp_path, instances=3)
    sequences, steps = 30, 4
    requests = [dict(model_name="py_accumulator", inputs=x_input(float(seq + 1), "X"), request_id=f"{seq}:{step}",
                     sequence_id=500 + seq, sequence_start=step == 0, sequence_end=step == steps - 1)
                for step in range(steps) for seq in range(sequences)]
    async with running(tmp_path, allow_http=False) as server:
        client = client_of(server)
        scheduler = server.manager.get("py_accumulator").scheduler
        results = await stream_all(client, requests)
        assert all(error is None for _, error in results), [e for _, e in results if e][:3]
        got = {r.get_response().id: float(r.as_numpy("SUM")[0, 0]) for r, _ in results}
        assert got == {f"{seq}:{step}": (seq + 1) * (step + 1) for seq in range(sequences) for step in range(steps)}
        assert scheduler.sequences == {}
        assert scheduler.pool.idle_count == 3


async def test_sequence_errors_and_restart(tmp_path: Path, running, client_of):
    accumulator(tmp_path)
    async with running(tmp_path, allow_http=False) as server:
        client = client_of(server)
        results = await stream_all(client, [
            dict(model_name="accumulator", inputs=x_input(1), sequence_id=0),
            dict(model_name="accumulator", inputs=x_input(1), sequence_id=7),
            dict(model_name="accumulator", inputs=x_input(2), sequence_id=8, sequence_start=True),
            dict(model_name="accumulator", inputs=x_input(3), sequence_id=8, sequence_start=True),
            dict(model_name="accumulator", inputs=x_input(4), sequence_id="words", sequence_start=True, sequence_end=True),
        ])
        errors = [str(error) for _, error in results if error is not None]
        assert any("must specify a non-zero or non-empty correlation ID" in e for e in errors)
        assert any("must specify the START flag on the first request of the sequence" in e for e in errors)
        values = sorted(float(r.as_numpy("OUTPUT")[0, 0]) for r, e in results if e is None)
        # A second START restarts sequence 8 from zero; string ids work too.
        assert values == [2.0, 3.0, 4.0]


TORCH_ACCUMULATOR_CONFIG = """
name: "torch_accumulator"
backend: "pytorch"
max_batch_size: 16
input [ { name: "INPUT", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUTPUT", data_type: TYPE_FP32, dims: [ 1 ] } ]
sequence_batching {
  oldest { max_candidate_sequences: 16 max_queue_delay_microseconds: 2000 }
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ]
            initial_state { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "zero" } } ]
}
"""


async def test_implicit_state_with_a_torchscript_model(tmp_path: Path, running, client_of):
    torch = pytest.importorskip("torch", reason="the pytorch backend needs torch")

    class Accumulate(torch.nn.Module):
        def forward(self, INPUT: torch.Tensor, STATE_IN: torch.Tensor) -> dict[str, torch.Tensor]:
            total = STATE_IN + INPUT
            return {"OUTPUT": total, "STATE_OUT": total}

    model_dir = tmp_path / "torch_accumulator"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(TORCH_ACCUMULATOR_CONFIG)
    torch.jit.script(Accumulate()).save(str(model_dir / "1" / "model.pt"))
    requests = [
        dict(model_name="torch_accumulator", inputs=x_input(seq + 1), request_id=f"{seq}:{step}",
             sequence_id=70 + seq, sequence_start=step == 0, sequence_end=step == 3)
        for step in range(4) for seq in range(8)
    ]
    async with running(tmp_path, allow_http=False) as server:
        client = client_of(server)
        results = await stream_all(client, requests)
        assert all(e is None for _, e in results), [str(e) for _, e in results if e][:2]
        got = {r.get_response().id: float(r.as_numpy("OUTPUT")[0, 0]) for r, _ in results}
        for seq in range(8):
            for step in range(4):
                assert got[f"{seq}:{step}"] == (seq + 1) * (step + 1)
        stats = (await client.get_inference_statistics("torch_accumulator", as_json=True))["model_stats"][0]
        assert int(stats["execution_count"]) < 32


# ---- hostile sequence ids and batches ---------------------------------------------------------


def _sequence_request(model: str, sequence_id, amount: float = 1.0, name: str = "INPUT", batch: int = 1):
    data = np.full((batch, 1), amount, dtype=np.float32)
    return InferRequest(model, inputs=[Tensor(name, "FP32", data)],
                        sequence=SequenceControl(sequence_id, start=True, end=True))


async def test_a_batcher_loop_that_cannot_go_on_marks_the_model_not_ready(tmp_path: Path, running, client_of,
                                                                          caplog):
    accumulator(tmp_path)
    async with running(tmp_path, allow_http=False) as server:
        client = client_of(server)
        scheduler = server.manager.get("accumulator").scheduler

        def broken():
            raise RuntimeError("bug in the batcher")

        scheduler.table.heads_by_instance = broken
        with pytest.raises(Exception) as first:
            await asyncio.wait_for(client.infer("accumulator", x_input(1.0), sequence_id=1, sequence_start=True), 5)
        assert "not ready" in str(first.value) and "bug in the batcher" in str(first.value)
        assert "UNAVAILABLE" in str(first.value)
        assert not await client.is_model_ready("accumulator")
        assert not await client.is_server_ready()
        assert "sequence batcher of model 'accumulator' failed" in caplog.text
        with pytest.raises(Exception) as later:  # answered at once, never left hanging
            await asyncio.wait_for(client.infer("accumulator", x_input(1.0), sequence_id=2, sequence_start=True), 5)
        assert "UNAVAILABLE" in str(later.value)


@pytest.mark.parametrize("sequence_id", [1.5, True, -1, 2**64])
async def test_sequence_ids_that_are_not_uint64_or_string_are_refused_before_the_model(
        tmp_path: Path, running, sequence_id):
    py_accumulator(tmp_path)
    async with running(tmp_path, allow_http=False) as server:
        with pytest.raises(Exception) as refused:
            await server.core.infer(_sequence_request("py_accumulator", sequence_id, name="X"))
        assert refused.value.code.name == "INVALID_ARGUMENT"
        assert "sequence_id" in refused.value.message
        ok = await server.core.infer(_sequence_request("py_accumulator", 9, 2.0, name="X"))
        assert float(ok.output("SUM").data[0, 0]) == 2.0


async def test_a_request_the_python_backend_cannot_hand_to_the_model_fails_alone_in_its_batch(
        tmp_path: Path, running):
    """A float sequence_id failed the whole python-model batch (16 good streams got errors from one
    bad client). Submitted past the core's check, in one batch with two good sequences."""
    py_accumulator(tmp_path)
    async with running(tmp_path, allow_http=False) as server:
        scheduler = server.manager.get("py_accumulator").scheduler
        loop = asyncio.get_running_loop()
        channels = {}
        for sequence_id, amount in ((21, 1.0), (22.5, 2.0), (23, 3.0)):
            channels[sequence_id] = ResponseChannel(loop)
            scheduler.submit(Pending(_sequence_request("py_accumulator", sequence_id, amount, name="X"),
                                     channels[sequence_id]))
        results = await asyncio.gather(*(asyncio.wait_for(c.first(), 5) for c in channels.values()),
                                       return_exceptions=True)
        stats = server.manager.get("py_accumulator").stats.snapshot()
        assert stats.execution_count == 1  # the three shared one batch
        assert float(results[0].output("SUM").data[0, 0]) == 1.0
        assert float(results[2].output("SUM").data[0, 0]) == 3.0
        assert results[1].code.name == "INVALID_ARGUMENT" and "got float" in results[1].message
