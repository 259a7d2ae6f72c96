"""The in-process `triton_python_backend_utils` API, without a backend around it."""

from __future__ import annotations

import importlib
import json
import logging
import threading

import numpy as np
import pytest

import asr_server.backends.python  # noqa: F401 - registers the module under Triton's name
from asr_server.backends.python import triton_python_backend_utils as pb_utils
from asr_server.backends.python.api.routes import use_route
from asr_server.backends.python.importer import instance_api


def test_importable_under_tritons_name() -> None:
    assert importlib.import_module("triton_python_backend_utils") is pb_utils


# ---- tensors


def test_tensor_holds_a_contiguous_array() -> None:
    source = np.arange(12, dtype=np.float32).reshape(3, 4).T  # not C-contiguous
    tensor = pb_utils.Tensor("X", source)
    assert tensor.name() == "X" and tensor.is_cpu()
    assert tensor.shape() == [4, 3] and tensor.triton_dtype() == 11  # TRITONSERVER_TYPE_FP32
    assert tensor.as_numpy().flags.c_contiguous
    np.testing.assert_array_equal(tensor.as_numpy(), source)


def test_tensor_rejects_empty_name_and_unknown_dtype() -> None:
    with pytest.raises(pb_utils.TritonModelException, match="Tensor name cannot be an empty string"):
        pb_utils.Tensor("", np.zeros(1))
    with pytest.raises(pb_utils.TritonModelException, match="no Triton datatype"):
        pb_utils.Tensor("C", np.zeros(2, dtype=np.complex64))


def test_bytes_tensor_has_no_dlpack() -> None:
    tensor = pb_utils.Tensor("S", np.array([b"a", b"bc"], dtype=np.object_))
    assert tensor.triton_dtype() == 13
    with pytest.raises(pb_utils.TritonModelException, match="DLPack does not have support for string tensors"):
        tensor.to_dlpack()


def test_dlpack_round_trip_with_numpy() -> None:
    tensor = pb_utils.Tensor("X", np.array([[1, 2], [3, 4]], dtype=np.int64))
    again = pb_utils.Tensor.from_dlpack("Y", tensor.to_dlpack())  # a bare capsule
    assert again.name() == "Y" and again.as_numpy().tolist() == [[1, 2], [3, 4]]
    assert again.as_numpy().dtype == np.int64
    via_protocol = pb_utils.Tensor.from_dlpack("Z", tensor)  # an object with __dlpack__
    assert via_protocol.as_numpy().tolist() == [[1, 2], [3, 4]]


def test_dlpack_with_torch() -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.dlpack import from_dlpack, to_dlpack

    source = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    from_tensor = pb_utils.Tensor.from_dlpack("T", source)
    from_capsule = pb_utils.Tensor.from_dlpack("C", to_dlpack(source))
    assert from_tensor.as_numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert from_capsule.as_numpy().dtype == np.float32 and from_capsule.shape() == [2, 3]
    back = from_dlpack(pb_utils.Tensor("B", np.array([True, False])).to_dlpack())
    assert back.dtype == torch.bool and back.tolist() == [True, False]
    assert torch.from_dlpack(pb_utils.Tensor("F", np.ones(2, np.float16))).tolist() == [1.0, 1.0]


def test_read_only_inputs_reach_torch_as_copies_that_it_may_write() -> None:
    """Inputs decoded from the wire and the shared control inputs are read-only arrays: DLPack hands out a copy,
    so `torch.from_dlpack(...).add_(...)` works and cannot change the value the next request sees."""
    torch = pytest.importorskip("torch")
    from torch.utils.dlpack import from_dlpack

    from asr_server.messages import InferRequest, SequenceControl
    from asr_server.scheduling.sequence_state import ControlInput, control_tensors
    from tritonclient.grpc import model_config_pb2 as mc

    start = [ControlInput("START", mc.ModelSequenceBatching.Control.CONTROL_SEQUENCE_START, "INT32", (0, 1))]
    request = InferRequest("m", sequence=SequenceControl(5, start=True))
    control = control_tensors(start, request, batched=True)[0].data
    wire = np.frombuffer(np.array([1.5, 2.5], np.float32).tobytes(), np.float32)  # as request_from_pb decodes
    for array in (control, wire):
        tensor = pb_utils.Tensor._of_server_array("X", array)
        torch.from_dlpack(tensor).add_(40)
        from_dlpack(tensor.to_dlpack()).add_(40)
    assert control_tensors(start, request, batched=True)[0].data.tolist() == [[1]]
    assert wire.tolist() == [1.5, 2.5]
    with pytest.raises(ValueError):
        control.setflags(write=True)  # nor can a model make the shared array writeable again


def test_serialize_and_deserialize_bytes() -> None:
    encoded = pb_utils.serialize_byte_tensor(np.array([b"ab", "ü", b""], dtype=np.object_))
    assert encoded == b"\x02\x00\x00\x00ab\x02\x00\x00\x00\xc3\xbc\x00\x00\x00\x00"
    assert pb_utils.deserialize_bytes_tensor(encoded).tolist() == [b"ab", "ü".encode(), b""]
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) == b""


def test_datatype_helpers() -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.numpy_to_triton_type(np.int64) == 9
    assert pb_utils.numpy_to_triton_type(np.dtype("S3")) == 13
    assert pb_utils.triton_to_numpy_type(10) is np.float16
    assert pb_utils.triton_to_numpy_type(14) is None  # BF16: numpy has no such type


# ---- errors and logging


def test_triton_error_codes_and_message() -> None:
    codes = [
        "UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED", "ALREADY_EXISTS", "CANCELLED",
    ]
    assert [getattr(pb_utils.TritonError, name) for name in codes] == list(range(8))
    error = pb_utils.TritonError("bad shape", pb_utils.TritonError.INVALID_ARG)
    assert error.message() == "bad shape" and error.code() == pb_utils.TritonError.INVALID_ARG
    assert pb_utils.TritonError("x").code() == pb_utils.TritonError.INTERNAL
    assert issubclass(pb_utils.TritonModelException, pb_utils.TritonError)


def test_logger_writes_to_python_logging(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="asr_server.python_model"):
        pb_utils.Logger.log_info("i")
        pb_utils.Logger.log_warn("w")
        pb_utils.Logger.log_error("e")
        pb_utils.Logger.log_verbose("v")
        pb_utils.Logger.log("x", pb_utils.Logger.LogLevel.ERROR)
        pb_utils.Logger.log("default")
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "asr_server.python_model"] == [
        (logging.INFO, "i"),
        (logging.WARNING, "w"),
        (logging.ERROR, "e"),
        (logging.DEBUG, "v"),
        (logging.ERROR, "x"),
        (logging.INFO, "default"),
    ]


# ---- requests, responses, senders


def test_bls_request_fields() -> None:
    x = pb_utils.Tensor("X", np.zeros(2, np.float32))
    request = pb_utils.InferenceRequest(
        model_name="m",
        requested_output_names=["Y"],
        inputs=[x],
        correlation_id="seq-1",
        flags=pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
        parameters={"beam": 4, "lang": "en", "final": True},
    )
    assert request.inputs() == [x] and request.requested_output_names() == ["Y"]
    assert request.correlation_id() == "seq-1" and request.flags() == 1 and request.request_id() == ""
    assert json.loads(request.parameters()) == {"beam": 4, "lang": "en", "final": True}
    assert not request.is_cancelled()
    with pytest.raises(pb_utils.TritonModelException, match="Correlation ID must be integer or string"):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[], correlation_id=1.5)
    with pytest.raises(pb_utils.TritonModelException, match="bool/int/str"):
        pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[], parameters={"p": 0.5})


def test_response_accessors() -> None:
    y = pb_utils.Tensor("Y", np.ones(1))
    response = pb_utils.InferenceResponse(output_tensors=[y], parameters={"k": "v"})
    assert not response.has_error() and response.error() is None
    assert pb_utils.get_output_tensor_by_name(response, "Y") is y
    assert pb_utils.get_output_tensor_by_name(response, "Z") is None
    assert json.loads(response.parameters()) == {"k": "v"}
    failed = pb_utils.InferenceResponse(error=pb_utils.TritonError("nope"))
    assert failed.has_error() and failed.error().message() == "nope" and failed.output_tensors() == []


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[object, bool]] = []

    def __call__(self, response, final: bool) -> None:
        self.sent.append((response, final))


def test_non_decoupled_sender_allows_one_response() -> None:
    recorder = Recorder()
    sender = pb_utils.InferenceResponseSender(recorder, decoupled=False, cancelled=lambda: False)
    with pytest.raises(pb_utils.TritonModelException, match="cannot send complete final before sending a response"):
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    response = pb_utils.InferenceResponse([])
    sender.send(response, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(pb_utils.TritonModelException, match="cannot send more than one response"):
        sender.send(response)
    assert recorder.sent == [(response, True)]


def test_sender_argument_checks() -> None:
    sender = pb_utils.InferenceResponseSender(Recorder(), decoupled=True, cancelled=lambda: True)
    with pytest.raises(pb_utils.TritonModelException, match="Unsupported flag"):
        sender.send(pb_utils.InferenceResponse([]), flags=4)
    with pytest.raises(pb_utils.TritonModelException, match="must be provided when the response flags is set to zero"):
        sender.send()
    assert sender.is_cancelled()


# ---- routes


class FakeRoute:
    model_dir = "/models/fake/1"

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def infer(self, request, decoupled):
        self.calls.append((request._model_name, decoupled))
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([len(self.calls)]))])

    async def infer_async(self, request, decoupled):
        return self.infer(request, decoupled)


def test_exec_and_get_model_dir_outside_any_model_raise() -> None:
    request = pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[])
    with pytest.raises(pb_utils.TritonModelException, match="outside a loaded python model"):
        request.exec()
    with pytest.raises(pb_utils.TritonModelException, match="outside a loaded python model"):
        pb_utils.get_model_dir()


def test_a_request_built_during_a_call_into_a_model_takes_that_models_route() -> None:
    route = FakeRoute()
    with use_route(route):
        request = pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[])
        assert pb_utils.get_model_dir() == "/models/fake/1"
    response = request.exec(decoupled=True)  # after the call: the request keeps its route
    assert route.calls == [("m", True)]
    assert pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy().tolist() == [1]


def test_a_models_own_thread_uses_the_route_its_api_copy_is_bound_to() -> None:
    routes = [FakeRoute(), FakeRoute()]
    routes[1].model_dir = "/models/other/1"
    results: list = []

    def worker(api) -> None:  # stands in for a model's own thread: no call into the model is under way
        request = api.InferenceRequest(model_name="other", requested_output_names=[], inputs=[])
        results.append((api.get_model_dir(), request.exec()))

    threads = [threading.Thread(target=worker, args=(instance_api(route),)) for route in routes]
    for thread in threads:
        thread.start()
        thread.join(timeout=10)
    assert sorted(dir for dir, _ in results) == ["/models/fake/1", "/models/other/1"]
    assert [route.calls for route in routes] == [[("other", False)], [("other", False)]]
    assert not any(response.has_error() for _, response in results)


def test_an_instances_api_copy_shares_the_classes_of_the_shared_module() -> None:
    api = instance_api(FakeRoute())
    assert set(pb_utils.__all__) <= set(vars(api))
    assert api.Tensor is pb_utils.Tensor and api.InferenceResponse is pb_utils.InferenceResponse
    request = api.InferenceRequest(model_name="m", requested_output_names=[], inputs=[])
    assert isinstance(request, pb_utils.InferenceRequest)


def test_the_route_of_the_call_wins_over_the_bound_one() -> None:
    """A shared helper that kept one instance's API copy still reaches the model that calls it."""
    bound, calling = FakeRoute(), FakeRoute()
    api = instance_api(bound)
    with use_route(calling):
        api.InferenceRequest(model_name="m", requested_output_names=[], inputs=[]).exec()
    assert calling.calls == [("m", False)] and bound.calls == []


async def test_async_exec_uses_the_route() -> None:
    route = FakeRoute()
    with use_route(route):
        request = pb_utils.InferenceRequest(model_name="a", requested_output_names=[], inputs=[])
    response = await request.async_exec()
    assert route.calls == [("a", False)] and not response.has_error()


# ---- model config helpers


def base_config() -> dict:
    partial_input = {"name": "A", "data_type": "TYPE_INVALID", "dims": []}
    return {"name": "m", "max_batch_size": 0, "input": [partial_input], "output": []}


def test_model_config_completes_a_partial_input() -> None:
    config = pb_utils.ModelConfig(json.dumps(base_config()))
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [3]})
    config.add_output({"name": "B", "data_type": "TYPE_FP32", "dims": [3]})
    config.set_model_transaction_policy({"decoupled": True})
    assert config.as_dict()["input"] == [{"name": "A", "data_type": "TYPE_FP32", "dims": [3]}]
    assert pb_utils.get_output_config_by_name(config.as_dict(), "B")["dims"] == [3]
    assert pb_utils.get_input_config_by_name(config.as_dict(), "Z") is None
    assert pb_utils.using_decoupled_model_transaction_policy(config.as_dict())
    with pytest.raises(ValueError, match="trying to change decoupled property"):
        config.set_model_transaction_policy({"decoupled": False})


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "format": "NCHW"}, "contains property other than"),
        ({"name": "X", "dims": [1]}, "is missing 'data_type' property"),
        ({"name": "X", "data_type": "TYPE_FP32"}, "is missing 'dims' property"),
    ],
)
def test_model_config_rejects_bad_inputs(spec: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pb_utils.ModelConfig(base_config()).add_input(spec)
