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
    """An object/bytes/str array -> the same shape as `np.object_` of `bytes` (str as UTF-8); an object array
    of `bytes` already (a streamed chunk's transcript) is returned as it is, as numeric outputs are."""
    items = data.reshape(-1).tolist()
    if data.dtype == np.object_ and all(type(item) is bytes for item in items):
        return data
    out = np.empty(data.shape, dtype=np.object_)
    out.reshape(-1)[:] = [_as_bytes(item) for item in items]
    return out


def server_tensor(tensor: pb_utils.Tensor) -> messages.Tensor:
    data = tensor.as_numpy()
    if data.dtype.kind in ("O", "S", "U"):
        data = bytes_array(data)
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
