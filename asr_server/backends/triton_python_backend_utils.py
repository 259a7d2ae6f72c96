"""Triton python_backend's `triton_python_backend_utils` API, served in process.

A `model.py` written for Triton (`import triton_python_backend_utils as pb_utils`) runs here unchanged:
the python backend registers this module under that name before it imports a model file.

Where Triton crosses a process boundary (stub <-> server, shared memory), we pass Python objects:
a `Tensor` holds the numpy array it was given (BYTES tensors: `np.object_` arrays of `bytes`), and the
backend converts to the server's types only at the edges (`asr_server/backends/python.py`).

This module knows nothing about the server core. Work that needs the server (BLS inference,
`get_model_dir`) goes through a *route*: an object the python backend installs around every call into a
model (`_use_route`), found again from a model's own threads through a marker in its module globals,
and finally through the last loaded model (`_set_fallback_route`).
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import json
import logging
import sys
import threading
from typing import Any, Callable, Iterable, Iterator, Optional, Protocol, Sequence, Union

import numpy as np
from tritonclient.utils import deserialize_bytes_tensor as _deserialize_bytes
from tritonclient.utils import serialize_byte_tensor as _serialize_bytes

# --------------------------------------------------------------------------------------------------
# Flags and constants (values from tritonserver.h)

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class MemoryType(enum.IntEnum):
    """Where a tensor should live; this server keeps every tensor in CPU memory."""

    TRITONSERVER_MEMORY_GPU = 1
    TRITONSERVER_MEMORY_CPU = 0


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU


class PreferredMemory:
    """Accepted for BLS requests; outputs always come back in CPU memory here."""

    def __init__(self, preferred_memory_type: MemoryType, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


# --------------------------------------------------------------------------------------------------
# Datatypes

TRITON_STRING_TO_NUMPY: dict[str, type] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# TRITONSERVER_DataType codes (what `Tensor.triton_dtype()` and the *_triton_type helpers use).
_NUMPY_BY_TRITONSERVER_CODE: dict[int, type] = {
    1: np.bool_, 2: np.uint8, 3: np.uint16, 4: np.uint32, 5: np.uint64, 6: np.int8, 7: np.int16,
    8: np.int32, 9: np.int64, 10: np.float16, 11: np.float32, 12: np.float64, 13: np.object_,
}
_TRITONSERVER_CODE_BY_DTYPE: dict[np.dtype, int] = {
    np.dtype(t): code for code, t in _NUMPY_BY_TRITONSERVER_CODE.items()
}
_TRITONSERVER_TYPE_BYTES = 13


def triton_string_to_numpy(triton_type_string: str) -> type:
    """Config enum name ("TYPE_FP32") -> numpy scalar type (np.float32)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Optional[type]:
    """TRITONSERVER_DataType code -> numpy scalar type; None for codes numpy cannot hold (BF16)."""
    return _NUMPY_BY_TRITONSERVER_CODE.get(data_type)


def numpy_to_triton_type(data_type: Any) -> Optional[int]:
    """numpy dtype -> TRITONSERVER_DataType code; bytes and str arrays are BYTES."""
    dtype = np.dtype(data_type)
    if dtype.kind in ("O", "S", "U"):
        return _TRITONSERVER_TYPE_BYTES
    return _TRITONSERVER_CODE_BY_DTYPE.get(dtype)


def serialize_byte_tensor(input_tensor: np.ndarray) -> bytes:
    """BYTES array -> the wire form: each element as (4-byte little-endian length, bytes), C order."""
    if input_tensor.size == 0:
        return b""
    return _serialize_bytes(input_tensor).item()


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    """The wire form -> a flat `np.object_` array of `bytes`."""
    return _deserialize_bytes(encoded_tensor)


# --------------------------------------------------------------------------------------------------
# Errors and logging


class TritonError(Exception):
    """An error a model reports, in a response (`InferenceResponse(error=...)`) or when raised.

    Triton's TritonError is not an exception; this one is, so that the errors this module raises
    (a `TritonModelException`) are also TritonErrors that carry a code.
    """

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        if message is None:
            raise TypeError("TritonError message must not be None")
        super().__init__(message)
        self._message = str(message)
        self._code = int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._message!r}, code={self._code})"


class TritonModelException(TritonError):
    """Raised by this module when a model misuses the API (Triton raises it for the same cases)."""


_model_log = logging.getLogger("asr_server.python_model")


class Logger:
    """Triton's model logger, writing to Python logging (`asr_server.python_model`)."""

    class LogLevel(enum.IntEnum):
        INFO = 0
        WARNING = 1
        ERROR = 2
        VERBOSE = 3

    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    _LEVELS = {
        LogLevel.INFO: logging.INFO,
        LogLevel.WARNING: logging.WARNING,
        LogLevel.ERROR: logging.ERROR,
        LogLevel.VERBOSE: logging.DEBUG,
    }

    @staticmethod
    def log(message: str, level: "Logger.LogLevel" = LogLevel.INFO) -> None:
        _model_log.log(Logger._LEVELS.get(level, logging.INFO), "%s", message)

    @staticmethod
    def log_info(message: str) -> None:
        _model_log.info("%s", message)

    @staticmethod
    def log_warn(message: str) -> None:
        _model_log.warning("%s", message)

    @staticmethod
    def log_error(message: str) -> None:
        _model_log.error("%s", message)

    @staticmethod
    def log_verbose(message: str) -> None:
        _model_log.debug("%s", message)


# --------------------------------------------------------------------------------------------------
# Tensors

_DLPACK_CPU = 1  # DLDeviceType kDLCPU


class _CapsuleHolder:
    """Lets numpy consume a bare DLPack capsule (numpy only takes objects with `__dlpack__`)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DLPACK_CPU, 0)


class Tensor:
    """A named tensor. `as_numpy()` returns the array it holds: shape (d0, d1, ...), any numpy dtype
    that Triton has a datatype for; BYTES tensors are `np.object_` arrays (of `bytes`, or `str`
    that the backend encodes as UTF-8 when the tensor leaves the model)."""

    def __init__(self, name: str, numpy_array: Any) -> None:
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        array = np.asarray(numpy_array)
        if numpy_to_triton_type(array.dtype) is None:
            raise TritonModelException(f"tensor '{name}': numpy dtype {array.dtype} has no Triton datatype")
        self._name = str(name)
        # Not np.ascontiguousarray: it turns a 0-d array into 1-d, and Triton keeps a 0-d output 0-d.
        self._array = array if array.flags.c_contiguous else np.array(array, order="C")

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def triton_dtype(self) -> int:
        """The TRITONSERVER_DataType code (FP32 = 11, BYTES = 13, ...)."""
        return numpy_to_triton_type(self._array.dtype)

    def shape(self) -> list[int]:
        return [int(d) for d in self._array.shape]

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule sharing this tensor's memory (not for BYTES tensors)."""
        if self._array.dtype.kind in ("O", "S", "U"):
            raise TritonModelException("DLPack does not have support for string tensors.")
        return self._array.__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        if self._array.dtype.kind in ("O", "S", "U"):
            raise TritonModelException("DLPack does not have support for string tensors.")
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_DLPACK_CPU, 0)

    @staticmethod
    def from_dlpack(name: str, dlpack_tensor: Any) -> "Tensor":
        """A tensor from a DLPack capsule or from any object with `__dlpack__` (a torch tensor).

        Device tensors are copied to host memory: this server's tensors are numpy arrays.
        """
        source = dlpack_tensor
        if not hasattr(source, "__dlpack__"):
            source = _CapsuleHolder(source)
        elif hasattr(source, "__dlpack_device__") and source.__dlpack_device__()[0] != _DLPACK_CPU:
            if not hasattr(source, "cpu"):
                raise TritonModelException(f"tensor '{name}': only CPU DLPack tensors are supported")
            source = source.cpu()
        try:
            array = np.from_dlpack(source)
        except (TypeError, ValueError, BufferError, RuntimeError) as exc:
            raise TritonModelException(f"tensor '{name}': cannot read DLPack tensor: {exc}") from exc
        return Tensor(name, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, dtype={self._array.dtype}, shape={self.shape()})"


def get_input_tensor_by_name(inference_request: "InferenceRequest", name: str) -> Optional[Tensor]:
    """The request's input called `name`, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: "InferenceResponse", name: str) -> Optional[Tensor]:
    """The response's output called `name`, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def _parameters_json(parameters: Optional[dict], owner: str) -> dict:
    """Triton accepts only str keys and bool/int/str values in request and response parameters."""
    parameters = {} if parameters is None else parameters
    if not isinstance(parameters, dict):
        raise TritonModelException(f"{owner} parameters must be a dict, got {type(parameters).__name__}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(f"Expect parameters keys to have type str, found type {type(key)}")
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return dict(parameters)


# --------------------------------------------------------------------------------------------------
# Routes: how BLS calls find the server that loaded the calling model


class _ModelRoute(Protocol):
    """Implemented by the python backend, one per model instance."""

    model_dir: str  # the version folder holding model.py (what Triton's get_model_dir returns)

    def infer(self, request: "InferenceRequest", decoupled: bool) -> Union["InferenceResponse", "ResponseIterator"]:
        """Run a BLS request; never raises, errors come back inside the response."""

    async def infer_async(
        self, request: "InferenceRequest", decoupled: bool
    ) -> Union["InferenceResponse", "ResponseIterator"]: ...


# Set by the backend around initialize/execute/finalize; copied into the tasks a coroutine model starts.
_active_route: contextvars.ContextVar[Optional[_ModelRoute]] = contextvars.ContextVar(
    "triton_python_model_route", default=None
)
# Module-global marker: a model's own threads carry no context, but their frames run its module code.
ROUTE_GLOBAL_NAME = "__triton_model_route__"
_fallback_lock = threading.Lock()
_fallback_route: Optional[_ModelRoute] = None


@contextlib.contextmanager
def _use_route(route: _ModelRoute) -> Iterator[None]:
    token = _active_route.set(route)
    try:
        yield
    finally:
        _active_route.reset(token)


def _set_fallback_route(route: _ModelRoute) -> None:
    global _fallback_route
    with _fallback_lock:
        _fallback_route = route


def _clear_fallback_route(route: _ModelRoute) -> None:
    global _fallback_route
    with _fallback_lock:
        if _fallback_route is route:
            _fallback_route = None


def _find_route() -> Optional[_ModelRoute]:
    """The route of the model running this code: the active context, else the nearest frame of a
    model module on this thread's stack, else the last loaded model."""
    route = _active_route.get()
    if route is not None:
        return route
    frame = sys._getframe(1)
    while frame is not None:
        route = frame.f_globals.get(ROUTE_GLOBAL_NAME)
        if route is not None:
            return route
        frame = frame.f_back
    return _fallback_route


def get_model_dir() -> str:
    """The version folder of the calling model (where its model.py lives)."""
    route = _find_route()
    if route is None:
        raise TritonModelException("get_model_dir() called outside a loaded python model")
    return route.model_dir


# --------------------------------------------------------------------------------------------------
# Requests, responses, senders


class InferenceResponse:
    """What a model returns for one request (or sends through a response sender)."""

    def __init__(
        self,
        output_tensors: Optional[Sequence[Tensor]] = None,
        error: Optional[TritonError] = None,
        parameters: Optional[dict] = None,
    ) -> None:
        tensors = list(output_tensors or [])
        for tensor in tensors:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(
                    f"InferenceResponse output_tensors must be Tensor objects, got {type(tensor).__name__}"
                )
        if error is not None and not isinstance(error, TritonError):
            error = TritonError(str(error))  # lenient: Triton only takes TritonError
        self._output_tensors = tensors
        self._error = error
        self._parameters = _parameters_json(parameters, "InferenceResponse")

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> Optional[TritonError]:
        return self._error

    def parameters(self) -> str:
        """The response parameters as a JSON string, as Triton gives them."""
        return json.dumps(self._parameters, default=str)


class ResponseIterator:
    """The responses of a decoupled BLS request (`exec(decoupled=True)`), in order."""

    def __init__(self, responses: Iterable[InferenceResponse]) -> None:
        self._responses = iter(list(responses))

    def __iter__(self) -> "ResponseIterator":
        return self

    def __next__(self) -> InferenceResponse:
        return next(self._responses)

    def cancel(self) -> None:
        """The responses have already arrived when exec() returns, so there is nothing to stop."""
        self._responses = iter(())


# deliver(response or None, final): called under the sender's lock, at most once with final=True.
_Deliver = Callable[[Optional[InferenceResponse], bool], None]


class InferenceResponseSender:
    """A request's response sender (`request.get_response_sender()`).

    A decoupled model sends any number of responses and then the final flag; a non-decoupled model may
    send exactly one response with the final flag instead of returning it. Thread-safe: a model may
    send from its own threads after `execute` returned.
    """

    def __init__(self, deliver: _Deliver, decoupled: bool, cancelled: Callable[[], bool]) -> None:
        self._deliver = deliver
        self._decoupled = decoupled
        self._cancelled = cancelled
        self._lock = threading.Lock()
        self._sent = 0
        self._closed = False

    def send(self, response: Optional[InferenceResponse] = None, flags: int = 0) -> None:
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"Expected an 'InferenceResponse' object, found type '{type(response).__name__}'."
            )
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than one response."
                    )
                if response is None and final and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete final "
                        "before sending a response."
                    )
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            self._closed = final
            self._sent += 1
            self._deliver(response, final)

    def is_cancelled(self) -> bool:
        return bool(self._cancelled())

    # Used by the backend: close an open sender when the model failed; True if it was still open.
    def _close_if_open(self) -> bool:
        with self._lock:
            was_open = not self._closed
            self._closed = True
            return was_open


class _Trace:
    """Triton's InferenceTrace: this server keeps no trace context."""

    def get_context(self) -> Optional[str]:
        return None


class InferenceRequest:
    """A request: what `execute(requests)` receives, and what a model builds for BLS.

    BLS: `InferenceRequest(model_name=..., requested_output_names=[...], inputs=[Tensor...]).exec()`
    runs it on the server that loaded the calling model and returns an `InferenceResponse` (or a
    `ResponseIterator` with `decoupled=True`); failures come back as `response.error()`, not raised.
    """

    def __init__(
        self,
        *,
        request_id: str = "",
        correlation_id: Union[int, str] = 0,
        inputs: Sequence[Tensor],
        requested_output_names: Sequence[str],
        model_name: str,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: Optional[PreferredMemory] = None,
        trace: Optional[_Trace] = None,
        parameters: Optional[dict] = None,
    ) -> None:
        if isinstance(correlation_id, bool) or not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        for tensor in inputs:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(f"InferenceRequest inputs must be Tensor objects, got {type(tensor)}")
        self._request_id = str(request_id)
        self._correlation_id = correlation_id
        self._inputs = list(inputs)
        self._requested_output_names = [str(n) for n in requested_output_names]
        self._model_name = str(model_name)
        self._model_version = int(model_version)
        self._flags = int(flags)
        self._timeout = int(timeout)  # microseconds
        self._parameters = json.dumps(_parameters_json(parameters, "InferenceRequest"))
        self._cancelled: Callable[[], bool] = lambda: False
        self._response_sender: Optional[InferenceResponseSender] = None
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        self._route = _find_route()  # the model building this request; re-checked at exec time

    @classmethod
    def _received(
        cls,
        *,
        inputs: list[Tensor],
        requested_output_names: list[str],
        model_name: str,
        model_version: int,
        request_id: str,
        correlation_id: Union[int, str],
        flags: int,
        timeout: int,
        parameters_json: str,
        cancelled: Callable[[], bool],
        response_sender: InferenceResponseSender,
        route: _ModelRoute,
    ) -> "InferenceRequest":
        """A request as the backend hands it to `execute` (parameters already a JSON string)."""
        request = cls(
            request_id=request_id,
            correlation_id=correlation_id,
            inputs=inputs,
            requested_output_names=requested_output_names,
            model_name=model_name,
            model_version=model_version,
            flags=flags,
            timeout=timeout,
        )
        request._parameters = parameters_json
        request._cancelled = cancelled
        request._response_sender = response_sender
        request._route = route
        return request

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._requested_output_names

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> Union[int, str]:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = int(flags)

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        """The request parameters as a JSON string (`json.loads(request.parameters())`)."""
        return self._parameters

    def trace(self) -> _Trace:
        return _Trace()

    def is_cancelled(self) -> bool:
        return bool(self._cancelled())

    def get_response_sender(self) -> InferenceResponseSender:
        if self._response_sender is None:
            raise TritonModelException("a BLS request has no response sender")
        return self._response_sender

    def set_release_flags(self, flags: int) -> None:
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise TritonModelException("request rescheduling is not supported by this server")
        self._release_flags = int(flags)

    def _exec_route(self) -> _ModelRoute:
        route = self._route or _find_route()
        if route is None:
            raise TritonModelException("BLS exec() called outside a loaded python model")
        return route

    def exec(self, decoupled: bool = False) -> Union[InferenceResponse, ResponseIterator]:
        """Run this request on the server and wait for its response(s)."""
        return self._exec_route().infer(self, bool(decoupled))

    async def async_exec(self, decoupled: bool = False) -> Union[InferenceResponse, ResponseIterator]:
        """`exec` for `async def execute` models: awaits without blocking the model's event loop."""
        return await self._exec_route().infer_async(self, bool(decoupled))


# --------------------------------------------------------------------------------------------------
# Model configuration helpers


def get_input_config_by_name(model_config: dict, name: str) -> Optional[dict]:
    """The config dict's input called `name` (`model_config["input"]` entry), or None."""
    for item in model_config.get("input", []):
        if item["name"] == name:
            return item
    return None


def get_output_config_by_name(model_config: dict, name: str) -> Optional[dict]:
    """The config dict's output called `name` (`model_config["output"]` entry), or None."""
    for item in model_config.get("output", []):
        if item["name"] == name:
            return item
    return None


def using_decoupled_model_transaction_policy(model_config: dict) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


class ModelConfig:
    """The config handed to `TritonPythonModel.auto_complete_config`; the model may fill in inputs,
    outputs, max_batch_size, dynamic batching and the transaction policy, never contradict the file."""

    _INPUT_KEYS = ("name", "data_type", "dims", "optional")
    _OUTPUT_KEYS = ("name", "data_type", "dims")

    def __init__(self, model_config: Union[str, dict]) -> None:
        self._model_config = json.loads(model_config) if isinstance(model_config, str) else dict(model_config)
        self._model_config.setdefault("input", [])
        self._model_config.setdefault("output", [])
        self._model_config.setdefault("max_batch_size", 0)
        self._model_config.setdefault("name", "")

    @property
    def _name(self) -> str:
        return self._model_config["name"]

    def as_dict(self) -> dict:
        return self._model_config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        configured = self._model_config["max_batch_size"]
        if configured > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {configured}, but in auto-complete-config "
                f"function for model '{self._name}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = int(max_batch_size)

    def set_dynamic_batching(self) -> None:
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but auto-complete-config "
                    f"function for model '{self._name}' tries to set scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict) -> None:  # noqa: A002 - Triton's parameter name
        self._add_tensor("input", input, self._INPUT_KEYS)

    def add_output(self, output: dict) -> None:
        self._add_tensor("output", output, self._OUTPUT_KEYS)

    def _add_tensor(self, kind: str, spec: dict, allowed: tuple[str, ...]) -> None:
        """Append a tensor, or complete the file's tensor of that name (which must agree with it)."""
        label = spec.get("name", "?")
        extra = [key for key in spec if key not in allowed]
        if extra:
            raise ValueError(
                f"{kind} '{label}' in auto-complete-config function for model '{self._name}' contains "
                f"property other than {', '.join(repr(k) for k in allowed)}."
            )
        for key in ("name", "data_type", "dims"):
            if key not in spec:
                raise ValueError(
                    f"{kind} '{label}' in auto-complete-config function for model '{self._name}' "
                    f"is missing '{key}' property."
                )
        for existing in self._model_config[kind]:
            if existing["name"] != spec["name"]:
                continue
            known_type = existing.get("data_type", "TYPE_INVALID")
            if known_type != "TYPE_INVALID" and known_type != spec["data_type"]:
                raise ValueError(
                    f"unable to load model '{self._name}', configuration expects datatype {known_type} "
                    f"for {kind} '{label}', model provides {spec['data_type']}"
                )
            known_dims = [int(d) for d in existing.get("dims", [])]
            if known_dims and known_dims != [int(d) for d in spec["dims"]]:
                raise ValueError(
                    f"model '{self._name}', tensor '{label}': the model expects dims {list(spec['dims'])} "
                    f"but the model configuration specifies dims {known_dims}"
                )
            if "optional" in existing and "optional" in spec and existing["optional"] != spec["optional"]:
                raise ValueError(
                    f"model '{self._name}', tensor '{label}': the model expects optional {spec['optional']} "
                    f"but the model configuration specifies optional {existing['optional']}"
                )
            existing.update(spec)
            return
        self._model_config[kind].append(dict(spec))

    def set_model_transaction_policy(self, transaction_policy_dict: dict) -> None:
        extra = [key for key in transaction_policy_dict if key != "decoupled"]
        if extra:
            raise ValueError(
                f"model transaction property in auto-complete-config function for model '{self._name}' "
                "contains property other than 'decoupled'."
            )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = bool(transaction_policy_dict["decoupled"])
            if "decoupled" in policy and bool(policy["decoupled"]) != wanted:
                raise ValueError(
                    f"trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted


# --------------------------------------------------------------------------------------------------
# Custom metrics and model control: accepted so that models using them load; not exported.


class Metric:
    """One labelled series of a MetricFamily; kept in memory only (not on the /metrics endpoint)."""

    def __init__(self, kind: str, labels: dict, buckets: Optional[list]) -> None:
        self._kind = kind
        self._labels = dict(labels)
        self._buckets = buckets
        self._lock = threading.Lock()
        self._value = 0.0

    def increment(self, value: float) -> None:
        if self._kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("a counter cannot be decremented")
        with self._lock:
            self._value += value

    def set(self, value: float) -> None:
        if self._kind != MetricFamily.GAUGE:
            raise TritonModelException("only a gauge can be set")
        with self._lock:
            self._value = float(value)

    def observe(self, value: float) -> None:
        if self._kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("only a histogram can observe")
        with self._lock:
            self._value += value  # the running sum, as the histogram's value

    def value(self) -> float:
        with self._lock:
            return self._value


class MetricFamily:
    COUNTER = "COUNTER"
    GAUGE = "GAUGE"
    HISTOGRAM = "HISTOGRAM"

    def __init__(self, name: str, description: str, kind: str) -> None:
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise TritonModelException(f"unknown metric kind {kind!r}")
        self.name = name
        self.description = description
        self.kind = kind

    def Metric(self, labels: Optional[dict] = None, buckets: Optional[list] = None) -> Metric:  # noqa: N802
        return Metric(self.kind, labels or {}, buckets)


def load_model(model_name: str, config: str = "", files: Optional[dict] = None) -> None:
    raise TritonModelException("model control from a python model is not supported by this server")


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    raise TritonModelException("model control from a python model is not supported by this server")


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    raise TritonModelException("model control from a python model is not supported by this server")
