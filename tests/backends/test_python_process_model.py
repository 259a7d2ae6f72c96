"""Python model instances in processes of their own (config parameter instance_process, process_model.py):
the same answers as in the server's process, in Triton's words, and the child goes away with its model."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest

from asr_server.backends.python import PythonBackend
from asr_server.backends.python import triton_python_backend_utils as pb_utils
from asr_server.errors import ErrorCode, ServerError
from asr_server.messages import SequenceControl, Tensor
from tests.backends.test_python_backend import BUNDLED_REPO, FIXTURES, fp32, make_context, read_config, request


def in_process(model_dir: Path, value: str = "1") -> PythonBackend:
    config = read_config(model_dir)
    config.parameters["instance_process"].string_value = value
    backend = PythonBackend(make_context(model_dir, config=config))
    backend.load()
    return backend


@pytest.fixture
def loaded():
    backends: list[PythonBackend] = []

    def load(model_dir: Path) -> PythonBackend:
        backends.append(in_process(model_dir))
        return backends[-1]

    yield load
    for backend in backends:
        backend.unload()


def test_the_model_runs_in_a_child_process_and_answers_as_in_ours(loaded) -> None:
    backend = loaded(BUNDLED_REPO / "add_sub")
    assert backend._model.pid not in (None, os.getpid())
    a, b = [1.0, 2.0, 3.0, 4.0], [0.5, 0.5, 4.0, -1.0]
    first, second = backend.execute([request("add_sub", fp32("INPUT0", a), fp32("INPUT1", b), id="r1"),
                                     request("add_sub", fp32("INPUT0", b), fp32("INPUT1", a))])
    assert first.id == "r1" and first.model_name == "add_sub" and first.final
    np.testing.assert_array_equal(first.output("OUTPUT0").data, np.array([1.5, 2.5, 7.0, 3.0], np.float32))
    assert first.output("OUTPUT0").datatype == "FP32"
    np.testing.assert_array_equal(second.output("OUTPUT1").data, np.array([-0.5, -1.5, 1.0, -5.0], np.float32))


def test_an_error_response_fails_only_its_request_with_its_code(loaded) -> None:
    backend = loaded(FIXTURES / "batch_errors")
    results = backend.execute([request("batch_errors", fp32("X", [4.0, 9.0])),
                               request("batch_errors", fp32("X", [1.0, -1.0]))])
    assert results[0].output("SQRT").data.tolist() == [2.0, 3.0]
    assert isinstance(results[1], ServerError) and results[1].code is ErrorCode.INVALID_ARGUMENT
    assert results[1].message == "X must not be negative"


def test_raising_and_miscounting_models_are_worded_as_in_ours(loaded) -> None:
    backend = loaded(FIXTURES / "raising")
    for result in backend.execute([request("raising", fp32("X", [-1.0])), request("raising", fp32("X", [2.0]))]):
        assert isinstance(result, ServerError) and result.code is ErrorCode.INTERNAL
        assert "ValueError: boom: negative input" in result.message and "raising_0_0" in result.message
    for result in backend.execute([request("raising", fp32("X", [1.0])), request("raising", fp32("X", [2.0]))]):
        assert "InferenceRequest(s) size is:2, and InferenceResponse(s) size is:1" in result.message
    (ok,) = backend.execute([request("raising", fp32("X", [3.0]))])
    assert ok.output("Y").data.tolist() == [3.0]


def test_sequence_fields_reach_the_child(loaded) -> None:
    backend = loaded(FIXTURES / "sequence_echo")
    x = Tensor("X", "INT32", np.array([1], np.int32))
    first, second = backend.execute([
        request("sequence_echo", x, id="a", sequence=SequenceControl(id=42, start=True)),
        request("sequence_echo", x, id="b", sequence=SequenceControl(id="utt-7", start=True, end=True),
                cancelled=lambda: True)])
    assert first.output("CORRID").data.tolist() == [b"int:42"]
    assert first.output("FLAGS").data.tolist() == [pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START]
    assert first.output("REQUEST_ID").data.tolist() == [b"a"] and first.output("CANCELLED").data.tolist() == [False]
    assert second.output("CORRID").data.tolist() == [b"str:utt-7"]
    assert second.output("FLAGS").data.tolist() == [3] and second.output("CANCELLED").data.tolist() == [True]


def test_bls_from_the_child_fails_with_a_reason(loaded) -> None:
    backend = loaded(FIXTURES / "bls_caller")
    x = fp32("INPUT0", [1.0, 2.0, 3.0, 4.0])
    (result,) = backend.execute([request("bls_caller", x, fp32("INPUT1", [1.0, 1.0, 1.0, 1.0]))])
    assert isinstance(result, ServerError) and "BLS is not available to a model run in its own process" in result.message


def test_a_decoupled_model_is_refused_at_load() -> None:
    with pytest.raises(ServerError, match="decoupled python model cannot run in its own process"):
        in_process(FIXTURES / "repeat_decoupled")


def test_unload_ends_the_child_and_a_dead_child_fails_its_batches() -> None:
    backend = in_process(BUNDLED_REPO / "add_sub")
    process = backend._model._process
    backend.unload()
    assert process.poll() is not None  # finalized and gone
    backend = in_process(BUNDLED_REPO / "add_sub")
    try:
        os.kill(backend._model.pid, signal.SIGKILL)
        backend._model._process.wait(timeout=10)
        (result,) = backend.execute([request("add_sub", fp32("INPUT0", [1.0] * 4), fp32("INPUT1", [1.0] * 4))])
        assert isinstance(result, ServerError) and result.code is ErrorCode.INTERNAL
        assert "is gone" in result.message
    finally:
        backend.unload()


def test_the_parameter_off_keeps_the_model_in_the_server_process(tmp_path) -> None:
    backend = in_process(BUNDLED_REPO / "add_sub", value="0")
    try:
        assert not hasattr(backend._model, "pid")
    finally:
        backend.unload()
