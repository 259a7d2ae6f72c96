"""/metrics of a running server, parsed with prometheus_client's own text parser: Triton's counters move on
success and on failure (with Triton 2.51's `reason` label), and the pending gauge returns to zero."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import PYTHON_MODELS, copy_model
from tests.helpers.sequence_models import accumulator


def scrape(server) -> dict[tuple, float]:
    """{(family name, frozenset(labels)): value} of every sample the metrics port serves (keyed by family: the
    parser names a counter's samples `<family>_total`, while Triton's exposition has no suffix)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):  # raises on malformed exposition
        for sample in family.samples:
            samples[(family.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples, name: str, model: str, **labels) -> float:
    return samples[(name, frozenset({"model": model, "version": "1", **labels}.items()))]


def x_input(value: float, shape=(1,)) -> list:
    inp = aioclient.InferInput("X", list(shape), "FP32")
    inp.set_data_from_numpy(np.full(shape, value, dtype=np.float32))
    return inp


async def test_counters_move_on_success_and_failure_and_pending_returns_to_zero(tmp_path: Path, running):
    copy_model(tmp_path, PYTHON_MODELS / "raising")
    accumulator(tmp_path)
    async with running(tmp_path, allow_http=False) as server:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        before = await asyncio.to_thread(scrape, server)
        assert value(before, "nv_inference_request_success", "raising") == 0
        for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):
            assert value(before, "nv_inference_request_failure", "raising", reason=reason) == 0

        await client.infer("raising", [x_input(1.0)])
        for _ in range(2):  # the model raises: a backend failure
            with pytest.raises(Exception):
                await client.infer("raising", [x_input(-1.0)])
        with pytest.raises(Exception):  # refused before the model: wrong shape
            await client.infer("raising", [x_input(1.0, (3,))])
        # a stream of faults at a sequence model: no START, then ids and batches the batcher refuses
        acc = aioclient.InferInput("INPUT", [1, 1], "FP32")
        acc.set_data_from_numpy(np.ones((1, 1), np.float32))
        for kwargs in (dict(sequence_id=5), dict(sequence_id=0)):
            with pytest.raises(Exception):
                await client.infer("accumulator", [acc], **kwargs)
        await client.infer("accumulator", [acc], sequence_id=6, sequence_start=True, sequence_end=True)

        after = await asyncio.to_thread(scrape, server)
        assert value(after, "nv_inference_request_success", "raising") == 1
        assert value(after, "nv_inference_request_failure", "raising", reason="BACKEND") == 2
        assert value(after, "nv_inference_request_failure", "raising", reason="OTHER") == 1
        assert value(after, "nv_inference_count", "raising") == 1
        assert value(after, "nv_inference_exec_count", "raising") == 3  # the failed executions count too
        assert value(after, "nv_inference_request_success", "accumulator") == 1
        assert value(after, "nv_inference_request_failure", "accumulator", reason="OTHER") == 2
        assert value(after, "nv_inference_count", "accumulator") == 1
        for model in ("raising", "accumulator"):
            assert value(after, "nv_inference_pending_request_count", model) == 0
        assert value(after, "asr_server_live_sequences", "accumulator") == 0  # sequence 6 ended
        await client.infer("accumulator", [acc], sequence_id=7, sequence_start=True)
        assert value(await asyncio.to_thread(scrape, server), "asr_server_live_sequences", "accumulator") == 1
        await client.close()


def test_label_values_are_escaped_and_cut():
    from asr_server.metrics import MAX_LABEL_CHARS, _labels

    forged = 'x",version="9"} 1\nnv_inference_count{model="evil\\'
    text = f"# TYPE nv_inference_count counter\nnv_inference_count{_labels(model=forged, version='1')} 5\n"
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert len(samples) == 1 and samples[0].labels == {"model": forged, "version": "1"} and samples[0].value == 5
    long = _labels(model="m" * 10_000)
    assert len(long) < MAX_LABEL_CHARS + 20
