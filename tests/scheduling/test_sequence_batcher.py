"""Sequence batching over gRPC: implicit state per sequence, controls, idle eviction, errors, ensembles."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient

from tests.helpers.onnx_models import identity_model, model_folder
from tests.helpers.sequence_models import accumulator, py_accumulator, python_model

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


def x_input(value: float, name: str = "INPUT") -> list:
    inp = aioclient.InferInput(name, [1, 1], "FP32")
    inp.set_data_from_numpy(np.array([[value]], dtype=np.float32))
    return [inp]


async def stream_all(client, requests: list[dict]) -> list:
    """Send every request on one stream; return (result, error) in arrival order."""

    async def iterate():
        for request in requests:
            yield request

    out = []
    async for result, error in client.stream_infer(iterate()):
        out.append((result, error))
        if len(out) == len(requests):
            break
    return out


@pytest.fixture
def client_of():
    clients = []

    def make(server):
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        clients.append(client)
        return client

    yield make


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
        await client.close()


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
        await client.close()


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
        await client.close()


async def test_idle_sequences_are_evicted_and_their_state_freed(tmp_path: Path, running, client_of):
    accumulator(tmp_path, idle_us=100_000)
    async with running(tmp_path, allow_http=False) as server:
        client = client_of(server)
        first = await stream_all(client, [dict(model_name="accumulator", inputs=x_input(5), sequence_id=3,
                                               sequence_start=True)])
        assert first[0][1] is None
        scheduler = server.manager.get("accumulator").scheduler
        assert 3 in scheduler.sequences
        for _ in range(100):  # eviction runs on the batcher's own timer; wait for it (bounded)
            if 3 not in scheduler.sequences:
                break
            await asyncio.sleep(0.02)
        assert 3 not in scheduler.sequences
        late = await stream_all(client, [dict(model_name="accumulator", inputs=x_input(1), sequence_id=3)])
        assert "must specify the START flag" in str(late[0][1])
        await client.close()


async def test_live_sequence_cap(tmp_path: Path, running, client_of):
    accumulator(tmp_path)
    async with running(tmp_path, allow_http=False) as server:
        scheduler = server.manager.get("accumulator").scheduler
        scheduler.options = dataclasses.replace(scheduler.options, max_sequences=2)
        client = client_of(server)
        results = await stream_all(client, [
            dict(model_name="accumulator", inputs=x_input(1), sequence_id=i, sequence_start=True) for i in (1, 2, 3)
        ])
        errors = [str(e) for _, e in results if e is not None]
        assert len(errors) == 1 and "limit of 2 live sequences" in errors[0]
        await client.close()


FORMAT_CONFIG = """
    name: "formatter"
    backend: "python"
    max_batch_size: 16
    input [ { name: "VALUE", data_type: TYPE_FP32, dims: [ 1 ] } ]
    output [ { name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] } ]
    dynamic_batching { }
"""
FORMAT_SOURCE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()
            text = np.array([[f"sum={v:g}".encode() for v in row] for row in values], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]))
        return responses
'''
IDENTITY_CONFIG = """
name: "identity"
backend: "onnxruntime"
max_batch_size: 16
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 1 ] } ]
dynamic_batching { }
"""
ENSEMBLE_CONFIG = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 16
input [ { name: "X", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "TEXT", data_type: TYPE_STRING, dims: [ 1 ] } ]
ensemble_scheduling {
  step [
    { model_name: "py_accumulator" model_version: -1 input_map { key: "X" value: "X" }
      output_map { key: "SUM" value: "running_sum" } },
    { model_name: "identity" model_version: -1 input_map { key: "INPUT0" value: "running_sum" }
      output_map { key: "OUTPUT0" value: "copied" } },
    { model_name: "formatter" model_version: -1 input_map { key: "VALUE" value: "copied" }
      output_map { key: "TEXT" value: "TEXT" } }
  ]
}
"""


def pipeline_repo(root: Path) -> Path:
    py_accumulator(root)
    model_folder(root, "identity", IDENTITY_CONFIG, identity_model, shape=["batch", 1])
    python_model(root, "formatter", FORMAT_CONFIG, FORMAT_SOURCE)
    (root / "pipeline" / "1").mkdir(parents=True)
    (root / "pipeline" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    return root


async def test_ensemble_of_three_models_with_sequences(tmp_path: Path, running, client_of):
    pipeline_repo(tmp_path)
    requests = []
    for step in range(3):
        for seq in range(4):
            requests.append(dict(
                model_name="pipeline", inputs=x_input(seq + 1, "X"), request_id=f"{seq}:{step}",
                sequence_id=500 + seq, sequence_start=step == 0, sequence_end=step == 2,
            ))
    async with running(tmp_path, allow_http=False) as server:
        client = client_of(server)
        meta = await client.get_model_metadata("pipeline", as_json=True)
        assert meta["platform"] == "ensemble"
        results = await stream_all(client, requests)
        assert all(e is None for _, e in results), [str(e) for _, e in results if e][:2]
        got = {r.get_response().id: r.as_numpy("TEXT")[0, 0] for r, _ in results}
        for seq in range(4):
            for step in range(3):
                assert got[f"{seq}:{step}"] == f"sum={(seq + 1) * (step + 1)}".encode()
        # A failing step is reported on the ensemble request, naming the step; the stream goes on.
        bad = aioclient.InferInput("X", [1, 1], "FP32")
        bad.set_data_from_numpy(np.array([[1.0]], np.float32))
        results = await stream_all(client, [
            dict(model_name="pipeline", inputs=[bad], sequence_id=9),
            dict(model_name="pipeline", inputs=x_input(2, "X"), sequence_id=10, sequence_start=True, sequence_end=True),
        ])
        errors = [str(e) for _, e in results if e is not None]
        assert len(errors) == 1 and "step 0 ('py_accumulator')" in errors[0] and "START flag" in errors[0]
        ok = [r for r, e in results if e is None]
        assert ok[0].as_numpy("TEXT")[0, 0] == b"sum=2"
        stats = (await client.get_inference_statistics("pipeline", as_json=True))["model_stats"][0]
        assert stats["inference_stats"]["success"]["count"] == "13"
        assert stats["inference_stats"]["fail"]["count"] == "1"
        await client.close()


async def test_ensemble_with_missing_step_model_is_unavailable(tmp_path: Path, running, client_of):
    (tmp_path / "pipeline" / "1").mkdir(parents=True)
    (tmp_path / "pipeline" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    async with running(tmp_path, allow_http=False, exit_on_error=False) as server:
        client = client_of(server)
        index = {m["name"]: m for m in (await client.get_model_repository_index(as_json=True))["models"]}
        assert index["pipeline"]["state"] == "UNAVAILABLE"
        # Triton 2.51's words since cf1dc33 (an ensemble's load loads its steps, or names those it cannot)
        assert "contains models that are not available or ambiguous" in index["pipeline"]["reason"]
        assert "formatter" in index["pipeline"]["reason"]
        await client.close()


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
        await client.close()


SLOW_SEQUENCE_CONFIG = """
name: "slow_seq"
backend: "python"
max_batch_size: 1
input [ { name: "X", data_type: TYPE_FP32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 1 ] } ]
sequence_batching { max_sequence_idle_microseconds: 5000000 }
"""
SLOW_SEQUENCE_SOURCE = """
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.05)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X")
                                                              .as_numpy() * 2)]) for r in requests]
"""


async def test_stop_drains_queued_sequence_requests(tmp_path: Path, running, client_of):
    """Requests queued behind a busy instance when the scheduler stops are still answered (drained)."""
    python_model(tmp_path, "slow_seq", SLOW_SEQUENCE_CONFIG, SLOW_SEQUENCE_SOURCE)
    async with running(tmp_path, allow_http=False) as server:
        client = client_of(server)
        calls = [asyncio.ensure_future(client.infer("slow_seq", x_input(i + 1.0, "X"), sequence_id=70 + i,
                                                    sequence_start=True, sequence_end=True)) for i in range(4)]
        scheduler = server.manager.get("slow_seq").scheduler
        for _ in range(200):
            if scheduler.queued >= 2:
                break
            await asyncio.sleep(0.005)
        assert scheduler.queued >= 2  # one runs, the others wait for the single instance
        await scheduler.stop(drain_timeout_s=5.0)
        results = await asyncio.gather(*calls)
        assert sorted(float(r.as_numpy("Y")[0, 0]) for r in results) == [2.0, 4.0, 6.0, 8.0]
        await client.close()


# ---- hostile sequence ids and batches (issue 13) ---------------------------------------------------------


def _sequence_request(model: str, sequence_id, value: float = 1.0, name: str = "INPUT", batch: int = 1):
    from asr_server.messages import InferRequest, SequenceControl, Tensor

    data = np.full((batch, 1), value, dtype=np.float32)
    return InferRequest(model, inputs=[Tensor(name, "FP32", data)],
                        sequence=SequenceControl(sequence_id, start=True, end=True))


async def test_a_request_the_batcher_cannot_prepare_fails_alone_and_the_loop_goes_on(
        tmp_path: Path, running, client_of, caplog):
    """int64 -1 as a UINT64 CORRID used to raise OverflowError inside the loop task, which died holding the
    instance: every later request hung. Submitted past the core's checks (defence in depth)."""
    from asr_server.scheduling.pending import Pending, ResponseChannel

    py_accumulator(tmp_path)
    async with running(tmp_path, allow_http=False) as server:
        loaded = server.manager.get("py_accumulator")
        channel = ResponseChannel(asyncio.get_running_loop())
        loaded.scheduler.submit(Pending(_sequence_request("py_accumulator", -1, name="X"), channel))
        with pytest.raises(Exception) as failed:
            await asyncio.wait_for(channel.first(), 5)
        assert "OverflowError" in str(failed.value) and "sequence -1" in str(failed.value)
        assert "failed before execution" in caplog.text
        client = client_of(server)
        result = await asyncio.wait_for(client.infer("py_accumulator", x_input(3.0, "X"), sequence_id=5,
                                                     sequence_start=True, sequence_end=True), 5)
        assert float(result.as_numpy("SUM")[0, 0]) == 3.0
        assert await client.is_model_ready("py_accumulator")
        assert channel.dropped == 0  # resolved exactly once
        await client.close()


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
        await client.close()


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


async def test_a_batch_of_two_to_a_sequence_model_is_refused_as_triton_does(tmp_path: Path, running, client_of):
    accumulator(tmp_path)
    async with running(tmp_path, allow_http=False) as server:
        client = client_of(server)
        two = aioclient.InferInput("INPUT", [2, 1], "FP32")
        two.set_data_from_numpy(np.array([[1.0], [2.0]], dtype=np.float32))
        with pytest.raises(Exception) as refused:
            await client.infer("accumulator", [two], sequence_id=4, sequence_start=True)
        assert "StatusCode.INVALID_ARGUMENT" in str(refused.value)
        assert ("inference request to model 'accumulator' must specify batch-size 1 due to requirements of "
                "sequence batcher") in str(refused.value)
        await client.close()


async def test_the_heap_is_trimmed_when_the_last_sequence_is_freed(tmp_path: Path, running, client_of):
    """glibc keeps freed sequence state in its arenas; the batcher asks for malloc_trim when it holds no
    sequence any more, at most once per interval (bundled repo: 418 -> 340 MB after a burst of streams)."""
    from asr_server import heap

    if heap._malloc_trim is None:
        pytest.skip("malloc_trim is glibc's")
    accumulator(tmp_path, idle_us=100_000)
    async with running(tmp_path, allow_http=False) as server:
        client = client_of(server)
        scheduler = server.manager.get("accumulator").scheduler
        await client.infer("accumulator", x_input(1.0), sequence_id=1, sequence_start=True, sequence_end=True)
        assert scheduler.trimmer.trims == 1  # the only sequence ended
        await client.infer("accumulator", x_input(1.0), sequence_id=2, sequence_start=True, sequence_end=True)
        assert scheduler.trimmer.trims == 1  # not again within the interval
        scheduler.trimmer.interval_s = 0.0
        await client.infer("accumulator", x_input(1.0), sequence_id=3, sequence_start=True)
        assert scheduler.trimmer.trims == 1  # sequence 3 is live
        for _ in range(100):  # idle eviction runs on the batcher's own timer (bounded wait)
            if not scheduler.sequences:
                break
            await asyncio.sleep(0.02)
        assert not scheduler.sequences and scheduler.trimmer.trims == 2  # evicted: trimmed
        await client.close()


async def test_a_failure_while_forming_a_batch_fails_the_requests_taken_and_the_loop_goes_on(
        tmp_path: Path, running, client_of, caplog):
    """Any exception in the loop (here a request whose cancellation check raises) fails the requests it
    had taken, exactly once, is logged, and later requests are served."""
    from asr_server.scheduling.pending import Pending, ResponseChannel

    py_accumulator(tmp_path)
    async with running(tmp_path, allow_http=False) as server:
        scheduler = server.manager.get("py_accumulator").scheduler
        request = _sequence_request("py_accumulator", 11, name="X")

        def broken():
            raise RuntimeError("cancellation check failed")

        request.cancelled = broken
        channel = ResponseChannel(asyncio.get_running_loop())
        scheduler.submit(Pending(request, channel))
        with pytest.raises(Exception) as failed:
            await asyncio.wait_for(channel.first(), 5)
        assert "cancellation check failed" in str(failed.value)
        assert "sequence batcher of model 'py_accumulator' failed; 1 request(s) failed with it" in caplog.text
        assert 11 not in scheduler.sequences and scheduler.healthy
        client = client_of(server)
        result = await asyncio.wait_for(client.infer("py_accumulator", x_input(4.0, "X"), sequence_id=12,
                                                     sequence_start=True, sequence_end=True), 5)
        assert float(result.as_numpy("SUM")[0, 0]) == 4.0
        assert channel.dropped == 0
        await client.close()


async def test_a_request_the_python_backend_cannot_hand_to_the_model_fails_alone_in_its_batch(
        tmp_path: Path, running):
    """Issue 13: a float sequence_id failed the whole python-model batch (16 good streams got errors from one
    bad client). Submitted past the core's check, in one batch with two good sequences."""
    from asr_server.scheduling.pending import Pending, ResponseChannel

    py_accumulator(tmp_path)
    async with running(tmp_path, allow_http=False) as server:
        scheduler = server.manager.get("py_accumulator").scheduler
        loop = asyncio.get_running_loop()
        channels = {}
        for sequence_id, value in ((21, 1.0), (22.5, 2.0), (23, 3.0)):
            channels[sequence_id] = ResponseChannel(loop)
            scheduler.submit(Pending(_sequence_request("py_accumulator", sequence_id, value, name="X"),
                                     channels[sequence_id]))
        results = await asyncio.gather(*(asyncio.wait_for(c.first(), 5) for c in channels.values()),
                                       return_exceptions=True)
        stats = server.manager.get("py_accumulator").stats.snapshot()
        assert stats.execution_count == 1  # the three shared one batch
        assert float(results[0].output("SUM").data[0, 0]) == 1.0
        assert float(results[2].output("SUM").data[0, 0]) == 3.0
        assert results[1].code.name == "INVALID_ARGUMENT" and "got float" in results[1].message
