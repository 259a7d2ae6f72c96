"""Tensors, requests and responses between the server's types (`asr_server.messages`) and the API's."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from asr_server import messages
from asr_server.backends.python import triton_python_backend_utils as pb_utils
from asr_server.backends.python.error_codes import triton_error
from asr_server.dtypes import wire_name
from asr_server.messages import InferRequest, InferResponse


def _as_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    return str(item).encode("utf-8")  # what Triton's serializer does with other objects


def bytes_array(data: np.ndarray) -> np.ndarray:
    """An object/bytes/str array -> a new array of the same shape, `np.object_` of `bytes` (str as UTF-8); an
    object array of `bytes` already (a streamed chunk's transcript) is copied as it is (its items are
    immutable), not converted item by item."""
    items = data.reshape(-1).tolist()
    if data.dtype == np.object_ and all(type(item) is bytes for item in items):
        return data.copy()
    out = np.empty(data.shape, dtype=np.object_)
    out.reshape(-1)[:] = [_as_bytes(item) for item in items]
    return out


def _frozen(data: np.ndarray) -> bool:
    """Nothing can write this array's memory any more: read-only down to an immutable `bytes` (an input
    decoded from the wire) or to an array that owns its memory (the shared control inputs)."""
    base = data
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    return base is None or isinstance(base, bytes)


def server_tensor(tensor: pb_utils.Tensor) -> messages.Tensor:
    """An output as it is when the model hands it over. The answer is serialised later, on the event loop,
    while the model may already fill a reused buffer again (a decoupled model's next partial, the next
    batch): like Triton, which copies an output when it is sent, it leaves with a copy unless nothing can
    change it."""
    data = tensor.as_numpy()
    if data.dtype.kind in ("O", "S", "U"):
        data = bytes_array(data)
    elif not _frozen(data):
        data = data.copy()
    return messages.Tensor(name=tensor.name(), datatype=wire_name(data.dtype), data=data)


def pb_tensor(tensor: messages.Tensor) -> pb_utils.Tensor:
    return pb_utils.Tensor(tensor.name, tensor.data)


def pb_input(tensor: messages.Tensor) -> pb_utils.Tensor:
    """A validated request input for the model (no checks repeated)."""
    return pb_utils.Tensor._of_server_array(tensor.name, tensor.data)


def pb_response(response: InferResponse) -> pb_utils.InferenceResponse:
    converted = pb_utils.InferenceResponse(output_tensors=[pb_tensor(t) for t in response.outputs])
    converted._parameters = dict(response.parameters)  # server parameters may hold any JSON value
    return converted


def pb_error_response(error: BaseException) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse(error=triton_error(error))


def bls_request(request: pb_utils.InferenceRequest) -> InferRequest:
    """A model's BLS request as the server's request."""
    flags = request.flags()
    version = request._model_version
    return InferRequest(
        model_name=request._model_name,
        model_version="" if version < 0 else str(version),
        id=request.request_id(),
        inputs=[server_tensor(t) for t in request.inputs()],
        outputs=[messages.RequestedOutput(name) for name in request.requested_output_names()],
        parameters=json.loads(request.parameters()),
        sequence=messages.SequenceControl(
            id=request.correlation_id(),
            start=bool(flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START),
            end=bool(flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END),
        ),
        timeout_us=request.timeout(),
    )
