"""Conversions between Triton's gRPC messages and the core's types. The only converter of protobuf.

Tensors arrive in `raw_input_contents` (what tritonclient sends), in typed `contents`, or in a registered
shared-memory region; responses go out in `raw_output_contents` (or into the requested region).
BYTES on the wire: for each element a 4-byte little-endian length, then the bytes.
"""

from __future__ import annotations

import math
import struct
from typing import Any, Optional

import numpy as np
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import serialize_byte_tensor

from asr_server.core import ModelMetadata
from asr_server.dtypes import ELEMENT_SIZE, numpy_dtype
from asr_server.errors import invalid_argument
from asr_server.protocol import parameters as rules
from asr_server.shared_memory import SharedMemoryRegistry
from asr_server.model_stats import Duration, ModelStatistics
from asr_server.messages import InferRequest, InferResponse, RequestedOutput, Tensor

# Request parameters the server consumes itself; the rest reach the model.
RESERVED_PARAMETERS = {
    "sequence_id", "sequence_start", "sequence_end", "priority", "timeout",
    "triton_enable_empty_final_response", "binary_data_output", "headers",
}
SMALL_BYTES_TENSOR = 16  # elements: serialize_bytes packs these itself
SHM_KEYS = ("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset")

# Typed `contents` field for each datatype (FP16 and BF16 have none: they must be raw).
CONTENTS_FIELD = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}
# The numpy dtype of each field's protobuf elements; narrower types keep the low bytes, as Triton does.
CONTENTS_DTYPE = {
    "bool_contents": np.bool_, "int_contents": np.int32, "int64_contents": np.int64, "uint_contents": np.uint32,
    "uint64_contents": np.uint64, "fp32_contents": np.float32, "fp64_contents": np.float64,
}


# ---- parameters ---------------------------------------------------------------------------------
def set_parameter(param: pb.InferParameter, value: Any) -> None:
    if isinstance(value, bool):
        param.bool_param = value
    elif isinstance(value, int):
        param.int64_param = value
    elif isinstance(value, float):
        param.double_param = value
    else:
        param.string_param = str(value)


def _typed(params) -> dict[str, rules.Typed]:
    # `if params`: most tensors carry no parameters, and an empty protobuf map is cheap to test, dear to iterate.
    return {key: rules.grpc_typed(value) for key, value in params.items()} if params else {}


# ---- shapes -------------------------------------------------------------------------------------
def check_shape(shape: tuple[int, ...], datatype: str, name: str) -> None:
    """Refuse negative dimensions, and shapes whose element count or byte size overflows int64.

    The product skips zero dimensions, as numpy's does: [0, 2^62, 2^62] holds no element yet no array of
    that shape can exist, so it is a client error here rather than a failure later in numpy.
    """
    if shape and min(shape) < 0:
        raise invalid_argument(f"input '{name}' has a negative dimension {list(shape)}")
    # Python integers do not overflow, and with every factor >= 1 no partial product exceeds the whole one.
    count = math.prod(shape) if 0 not in shape else math.prod(d for d in shape if d)
    size = ELEMENT_SIZE.get(datatype, 8) * count  # BYTES: numpy holds one 8-byte reference per element
    if size > rules.INT64_MAX:
        raise invalid_argument(
            f"input '{name}' with shape {list(shape)} is too large: its element count or byte size overflows int64"
        )


# ---- BYTES --------------------------------------------------------------------------------------
def deserialize_bytes(raw: bytes, count: int, name: str) -> np.ndarray:
    """Length-prefixed BYTES elements -> object array, refusing malformed data."""
    items, pos, end = [], 0, len(raw)
    view = memoryview(raw)
    while pos < end:
        if pos + 4 > end:
            raise invalid_argument(f"unexpected end of BYTES data for input '{name}': truncated length prefix")
        (length,) = struct.unpack_from("<I", raw, pos)
        pos += 4
        if pos + length > end:
            raise invalid_argument(
                f"element byte size indicator {length} exceeds the remaining {end - pos} bytes of input '{name}'"
            )
        items.append(bytes(view[pos:pos + length]))
        pos += length
    if len(items) != count:
        raise invalid_argument(f"expected {count} string elements for inference input '{name}', got {len(items)}")
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    return array


def serialize_bytes(array: np.ndarray) -> bytes:
    """A BYTES tensor as Triton sends it (each element: 4-byte little-endian length, then its bytes; str as
    UTF-8, other objects as their str), by tritonclient's own encoder, except for the common case of a few
    `bytes` elements (a transcript per streamed chunk), which the encoder's numpy round trip makes dear."""
    if array.size <= SMALL_BYTES_TENSOR:
        items = array.reshape(-1).tolist()
        if all(type(item) is bytes for item in items):
            return b"".join(struct.pack("<I", len(item)) + item for item in items)
    encoded = serialize_byte_tensor(array)
    return b"" if encoded is None or encoded.size == 0 else encoded.item()


def tensor_bytes(tensor: Tensor) -> bytes:
    if tensor.datatype == "BYTES":
        return serialize_bytes(tensor.data)
    return np.ascontiguousarray(tensor.data, dtype=numpy_dtype(tensor.datatype)).tobytes()


# ---- requests -----------------------------------------------------------------------------------
def decode_raw(raw: bytes, datatype: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    count = math.prod(shape)
    if datatype == "BYTES":
        return deserialize_bytes(raw, count, name).reshape(shape)
    size = ELEMENT_SIZE.get(datatype)
    if size is None:
        raise invalid_argument(f"invalid datatype '{datatype}' for input '{name}'")
    if len(raw) != count * size:
        raise invalid_argument(
            f"unexpected total byte size {len(raw)} for input '{name}', expecting {count * size}"
        )
    return np.frombuffer(raw, dtype=numpy_dtype(datatype)).reshape(shape)


def _decode_contents(contents: pb.InferTensorContents, datatype: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    field = CONTENTS_FIELD.get(datatype)
    if field is None:
        raise invalid_argument(f"input '{name}' of datatype {datatype} must be sent in raw_input_contents")
    values = list(getattr(contents, field))
    count = math.prod(shape)
    if len(values) != count:
        raise invalid_argument(
            f"unexpected number of elements {len(values)} for input '{name}', expecting {count}"
        )
    if datatype == "BYTES":
        array = np.empty(count, dtype=np.object_)
        array[:] = values
        return array.reshape(shape)
    wide = np.array(values, dtype=CONTENTS_DTYPE[field])
    return wide.astype(numpy_dtype(datatype), copy=False).reshape(shape)


def request_from_pb(message: pb.ModelInferRequest, shm: Optional[SharedMemoryRegistry] = None) -> InferRequest:
    # Every streamed chunk passes here: each protobuf field is read once (upb builds a new wrapper per access).
    typed = _typed(message.parameters)
    controls = rules.controls(typed, http=False)
    raw = message.raw_input_contents
    tensors = message.inputs
    if raw and len(raw) != len(tensors):
        raise invalid_argument(
            f"expected {len(tensors)} raw input contents, got {len(raw)} for model '{message.model_name}'"
        )
    inputs = []
    for index, tensor in enumerate(tensors):
        name, datatype = tensor.name, tensor.datatype
        shape = tuple(tensor.shape)
        check_shape(shape, datatype, name)
        tensor_typed = _typed(tensor.parameters)
        placement = rules.shm_placement(tensor_typed, name, http=False) if tensor_typed else None
        if placement is not None:
            if tensor.HasField("contents"):
                raise invalid_argument(
                    f"unexpected 'content' provided when using shared memory for input tensor '{name}' "
                    f"for model '{message.model_name}'"
                )
            if shm is None:
                raise invalid_argument("shared memory is not available on this endpoint")
            data = shm.read(placement.region, placement.offset, placement.byte_size)
            array = decode_raw(data, datatype, shape, name)
        elif raw:
            if tensor.HasField("contents"):
                raise invalid_argument(
                    f"contents field must not be specified when using raw_input_contents for '{name}' "
                    f"for model '{message.model_name}'"
                )
            array = decode_raw(raw[index], datatype, shape, name)
        else:
            array = _decode_contents(tensor.contents, datatype, shape, name)
        rest = {k: t.value for k, t in tensor_typed.items() if k not in SHM_KEYS} if tensor_typed else {}
        inputs.append(Tensor(name, datatype, array, rest))
    outputs = []
    for output in message.outputs:
        output_typed = _typed(output.parameters)
        if output_typed:
            rules.shm_placement(output_typed, output.name, http=False)
        outputs.append(RequestedOutput(output.name, {k: t.value for k, t in output_typed.items()}))
    return InferRequest(
        model_name=message.model_name,
        model_version=message.model_version,
        id=message.id,
        inputs=inputs,
        outputs=outputs,
        parameters={k: t.value for k, t in typed.items() if k not in RESERVED_PARAMETERS},
        sequence=controls.sequence,
        priority=controls.priority,
        timeout_us=controls.timeout_us,
    )


# ---- responses ----------------------------------------------------------------------------------
def response_to_pb(
    response: InferResponse,
    requested: Optional[list[RequestedOutput]] = None,
    shm: Optional[SharedMemoryRegistry] = None,
    final_flag: Optional[bool] = None,
    into: Optional[pb.ModelInferResponse] = None,
) -> pb.ModelInferResponse:
    """The response as a message; `into`: an empty message to fill (a stream's answer fills the
    `infer_response` of its ModelStreamInferResponse in place instead of having a copy made)."""
    message = into if into is not None else pb.ModelInferResponse()
    message.model_name, message.model_version, message.id = response.model_name, response.model_version, response.id
    for key, value in response.parameters.items():
        set_parameter(message.parameters[key], value)
    if final_flag is not None:
        message.parameters["triton_final_response"].bool_param = final_flag
    placement = {o.name: o.parameters for o in requested if "shared_memory_region" in o.parameters} if requested else {}
    for tensor in response.outputs:
        out = message.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=list(tensor.shape))
        data = tensor_bytes(tensor)
        where = placement.get(tensor.name)
        if where is not None and shm is not None:
            shm.write(
                where["shared_memory_region"], int(where.get("shared_memory_offset", 0)), data,
                int(where["shared_memory_byte_size"]),
            )
            for key in SHM_KEYS:
                if key in where:
                    set_parameter(out.parameters[key], where[key])
            data = b""  # keeps raw_output_contents aligned with outputs, as tritonclient indexes them
        message.raw_output_contents.append(data)
    return message


def metadata_to_pb(meta: ModelMetadata) -> pb.ModelMetadataResponse:
    message = pb.ModelMetadataResponse(name=meta.name, versions=list(meta.versions), platform=meta.platform)
    for tensor in meta.inputs:
        message.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=list(tensor.shape))
    for tensor in meta.outputs:
        message.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=list(tensor.shape))
    return message


def _duration(target: pb.StatisticDuration, value: Duration) -> None:
    target.count, target.ns = value.count, value.ns


def statistics_to_pb(name: str, version: int, stats: ModelStatistics) -> pb.ModelStatistics:
    message = pb.ModelStatistics(
        name=name,
        version=str(version),
        last_inference=stats.last_inference_ms,
        inference_count=stats.inference_count,
        execution_count=stats.execution_count,
    )
    inference = message.inference_stats
    for field in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output"):
        _duration(getattr(inference, field), getattr(stats, field))
    for size in sorted(stats.batch):
        batch = message.batch_stats.add(batch_size=size)
        _duration(batch.compute_input, stats.batch[size].compute_input)
        _duration(batch.compute_infer, stats.batch[size].compute_infer)
        _duration(batch.compute_output, stats.batch[size].compute_output)
    return message


def config_override_json(params) -> Optional[str]:
    """RepositoryModelLoad's `config` parameter (ModelConfig as JSON), if given; a value of another type is
    refused in Triton's words (it used to be read as an empty string and ignored)."""
    if "config" not in params:
        return None
    if params["config"].WhichOneof("parameter_choice") != "string_param":
        raise invalid_argument("invalid value type for load parameter 'config', expected string_param.")
    return params["config"].string_param


def load_files(params) -> dict[str, bytes]:
    """RepositoryModelLoad's `file:<path>` parameters; each must be a bytes_param (a string one used to be
    written as an empty file)."""
    files = {}
    for key in params:
        if key.startswith("file:"):
            if params[key].WhichOneof("parameter_choice") != "bytes_param":
                raise invalid_argument(f"invalid value type for load parameter '{key}', expected bytes_param.")
            files[key[len("file:"):]] = params[key].bytes_param
    return files


def unload_dependents(params) -> bool:
    """RepositoryModelUnload's `unload_dependents` parameter (a bool_param, as Triton requires)."""
    if "unload_dependents" not in params:
        return False
    value = params["unload_dependents"]
    if value.WhichOneof("parameter_choice") != "bool_param":
        raise invalid_argument("invalid value type for 'unload_dependents' parameter, expected bool_param.")
    return value.bool_param
