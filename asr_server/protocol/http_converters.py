"""Conversions between Triton's HTTP/REST JSON (KServe v2 + Triton extensions) and the core's types.

The HTTP twin of `converters.py`. A request body is a JSON header, optionally followed by binary tensor
data (Triton's binary tensor data extension): the `Inference-Header-Content-Length` header gives the JSON
part's length, and each input with a `binary_data_size` parameter takes that many bytes, in input order.
Outputs go back as JSON `data` lists, or as binary appended after the JSON header when asked for with
`binary_data` (per output) or `binary_data_output` (per request). BYTES in binary form use the same
length-prefixed layout as gRPC, so the (de)serialisers of `converters.py` are reused here.

Unlike gRPC's JSON (int64 as strings), Triton's HTTP JSON writes int64 values as numbers.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
from typing import Any, Optional

import numpy as np

from asr_server.core import ModelMetadata
from asr_server.dtypes import ELEMENT_SIZE, numpy_dtype
from asr_server.errors import invalid_argument
from asr_server.protocol import converters
from asr_server.protocol import parameters as rules
from asr_server.shared_memory import Region, SharedMemoryRegistry
from asr_server.model_stats import ModelStatistics
from asr_server.proto_json import message_to_dict
from asr_server.messages import InferRequest, InferResponse, RequestedOutput, Tensor

JSON_ONLY_BINARY = ("FP16", "BF16")  # JSON has no half-precision numbers: these travel as binary only
# Output parameters that steer the transport, not the model.
_OUTPUT_TRANSPORT_KEYS = ("binary_data",)


def dumps(value: Any) -> bytes:
    # "replace": a lone surrogate a client sent (JSON allows "\ud800") may come back in an error message
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "replace")


def loads(body: bytes | memoryview, what: str = "request") -> Any:
    if not len(body):
        return {}
    try:
        return json.loads(bytes(body))
    except (UnicodeDecodeError, ValueError) as exc:
        raise invalid_argument(f"failed to parse the {what} JSON buffer: {exc}") from None
    except RecursionError:  # json's parser recurses once per nested array or object
        raise invalid_argument(f"failed to parse the {what} JSON buffer: nesting is too deep") from None


def loads_object(body: bytes | memoryview, what: str = "request") -> dict:
    value = loads(body, what)
    if not isinstance(value, dict):
        raise invalid_argument(f"the {what} JSON must be an object, got {type(value).__name__}")
    return value


# ---- protobuf messages as Triton's HTTP JSON (asr_server.proto_json: int64 as numbers) ----------------
def statistics_to_json(rows: list[tuple[str, int, ModelStatistics]]) -> dict:
    """GET /v2/models[/{m}[/versions/{v}]]/stats, through the gRPC message so both endpoints agree."""
    return {"model_stats": [message_to_dict(converters.statistics_to_pb(n, v, s)) for n, v, s in rows]}


def metadata_to_json(meta: ModelMetadata) -> dict:
    def tensors(items) -> list[dict]:
        return [{"name": t.name, "datatype": t.datatype, "shape": [int(d) for d in t.shape]} for t in items]

    return {
        "name": meta.name, "versions": list(meta.versions), "platform": meta.platform,
        "inputs": tensors(meta.inputs), "outputs": tensors(meta.outputs),
    }


def repository_index_to_json(rows: list[dict]) -> list[dict]:
    """Triton leaves out the fields it has no value for (a model never loaded has only a name)."""
    return [{key: value for key, value in row.items() if key == "name" or value} for row in rows]


def shared_memory_status_to_json(regions: list[Region]) -> list[dict]:
    return [{"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size} for r in regions]


def shared_memory_register_from_json(body: dict) -> tuple[str, int, int]:
    key = body.get("key")
    if not isinstance(key, str) or not key:
        raise invalid_argument("shared memory register request requires a string 'key'")
    offset = _json_int(body.get("offset", 0), "offset")
    byte_size = _json_int(body.get("byte_size"), "byte_size")
    return key, offset, byte_size


def trace_changes_from_json(body: dict) -> dict[str, list[str]]:
    """POST trace settings: a value is a string, a list of strings, or null (reset to the default)."""
    changes = {}
    for key, value in body.items():
        if value is None:
            changes[key] = []
        elif isinstance(value, list):
            changes[key] = [_trace_value(key, v) for v in value]
        else:
            changes[key] = [_trace_value(key, value)]
    return changes


def _trace_value(key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise invalid_argument(f"trace setting '{key}' expects a string or a list of strings")
    return str(value)


def trace_to_json(settings: dict[str, list[str]]) -> dict:
    """Triton writes trace_level as a list and every other setting as one string."""
    return {key: list(values) if key == "trace_level" else (values[0] if values else "")
            for key, values in settings.items()}


def load_request_from_json(name: str, body: dict) -> tuple[Optional[str], dict[str, bytes]]:
    """POST /v2/repository/models/{m}/load: `parameters.config` (JSON text) and `file:<path>` (base64)."""
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise invalid_argument(f"failed to load '{name}': 'parameters' must be an object")
    config = params.get("config")
    if config is not None and not isinstance(config, str):
        raise invalid_argument(f"failed to load '{name}': parameter 'config' must be a JSON string")
    files = {}
    for key, value in params.items():
        if not key.startswith("file:"):
            continue
        if not isinstance(value, str):
            raise invalid_argument(f"failed to load '{name}': parameter '{key}' must be base64 text")
        try:
            files[key[len("file:"):]] = base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise invalid_argument(f"failed to load '{name}': parameter '{key}' is not valid base64: {exc}") from None
    return config, files


def unload_dependents_from_json(name: str, body: dict) -> bool:
    """POST /v2/repository/models/{m}/unload: the boolean `parameters.unload_dependents` (default false)."""
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise invalid_argument(f"failed to unload '{name}': 'parameters' must be an object")
    value = params.get("unload_dependents", False)
    if not isinstance(value, bool):
        raise invalid_argument(f"failed to unload '{name}': parameter 'unload_dependents' must be a boolean")
    return value


# ---- inference requests -----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class OutputForm:
    """How the response should carry its outputs (binary or JSON), decided by the request."""

    binary_default: bool  # the request's `binary_data_output`
    binary: dict[str, bool]  # per requested output, its own `binary_data` (wins over the default)

    def is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.binary_default)


def split_body(body: bytes, header_length: Optional[str]) -> tuple[dict, memoryview]:
    """The JSON header and the binary tail of an infer request body."""
    view = memoryview(body)
    if header_length is None:
        return loads_object(view, "request"), view[len(view):]
    try:
        length = int(header_length)
    except ValueError:
        raise invalid_argument(f"invalid Inference-Header-Content-Length '{header_length}'") from None
    if length < 0 or length > len(view):
        raise invalid_argument(
            f"Inference-Header-Content-Length {length} exceeds the request body size {len(view)}"
        )
    return loads_object(view[:length], "request"), view[length:]


def request_from_json(
    model_name: str,
    model_version: str,
    header: dict,
    binary: memoryview,
    shm: Optional[SharedMemoryRegistry] = None,
) -> tuple[InferRequest, OutputForm]:
    params = _object(header.get("parameters"), "request 'parameters'")
    inputs_json = header.get("inputs")
    if not isinstance(inputs_json, list):
        raise invalid_argument("the request JSON requires an 'inputs' array")
    inputs, offset = [], 0
    for item in inputs_json:
        tensor, used = _input_from_json(_object(item, "an input"), binary[offset:], shm)
        inputs.append(tensor)
        offset += used
    if offset != len(binary):
        raise invalid_argument(
            f"unexpected additional input data for model '{model_name}': {len(binary) - offset} bytes beyond "
            f"the inputs' binary_data_size"
        )
    outputs, binary_flags = [], {}
    for item in _list(header.get("outputs"), "'outputs'"):
        item = _object(item, "an output")
        name = item.get("name")
        if not isinstance(name, str):
            raise invalid_argument("each requested output needs a string 'name'")
        out_params = _object(item.get("parameters"), f"parameters of output '{name}'")
        rules.shm_placement(_typed(out_params), name, http=True)
        if "binary_data" in out_params:
            binary_flags[name] = rules.checked("binary_data", rules.json_typed(out_params["binary_data"]), True, name)
        outputs.append(RequestedOutput(name, {k: v for k, v in out_params.items() if k not in _OUTPUT_TRANSPORT_KEYS}))
    request_id = header.get("id", "")
    if not isinstance(request_id, str):
        raise invalid_argument("Unable to parse 'id': request 'id' must be a string")
    controls = rules.controls(_typed(params), http=True)
    request = InferRequest(
        model_name=model_name,
        model_version=model_version,
        id=request_id,
        inputs=inputs,
        outputs=outputs,
        parameters={k: v for k, v in params.items() if k not in converters.RESERVED_PARAMETERS},
        sequence=controls.sequence,
        priority=controls.priority,
        timeout_us=controls.timeout_us,
    )
    return request, OutputForm(params.get("binary_data_output", False), binary_flags)


def _typed(params: dict) -> dict[str, rules.Typed]:
    return {key: rules.json_typed(value) for key, value in params.items()}


def _input_from_json(item: dict, binary: memoryview, shm: Optional[SharedMemoryRegistry]) -> tuple[Tensor, int]:
    """One input and the number of binary bytes it took."""
    name, datatype = item.get("name"), item.get("datatype")
    if not isinstance(name, str) or not isinstance(datatype, str):
        raise invalid_argument("each input needs a string 'name' and 'datatype'")
    shape_json = item.get("shape")
    if not isinstance(shape_json, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape_json):
        raise invalid_argument(f"input '{name}' needs a 'shape' array of integers")
    shape = tuple(shape_json)
    converters.check_shape(shape, datatype, name)
    params = _object(item.get("parameters"), f"parameters of input '{name}'")
    rest = {k: v for k, v in params.items() if k not in converters.SHM_KEYS and k != "binary_data_size"}
    placement = rules.shm_placement(_typed(params), name, http=True)
    if placement is not None:
        if shm is None:
            raise invalid_argument("shared memory is not available on this endpoint")
        data = shm.read(placement.region, placement.offset, placement.byte_size)
        return Tensor(name, datatype, converters.decode_raw(data, datatype, shape, name), rest), 0
    if "binary_data_size" in params:
        size = rules.checked("binary_data_size", rules.json_typed(params["binary_data_size"]), True, name)
        if size > len(binary):
            raise invalid_argument(
                f"unexpected size for input '{name}': binary_data_size {size} exceeds the remaining "
                f"{len(binary)} bytes of binary data"
            )
        array = converters.decode_raw(binary[:size], datatype, shape, name)  # a view: no copy of the body
        return Tensor(name, datatype, array, rest), size
    if "data" not in item:
        raise invalid_argument(f"expected 'data' or a 'binary_data_size' parameter for input '{name}'")
    return Tensor(name, datatype, _decode_json_data(item["data"], datatype, shape, name), rest), 0


def _decode_json_data(data: Any, datatype: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    if datatype in JSON_ONLY_BINARY:
        raise invalid_argument(
            f"receiving {datatype} data via JSON is not supported. Please use the binary data format for input '{name}'"
        )
    count = math.prod(shape)
    if datatype == "BYTES":
        values = _flatten(data)
        if not all(isinstance(v, str) for v in values):
            raise invalid_argument(f"input '{name}' of datatype BYTES expects JSON strings")
        array = np.empty(len(values), dtype=np.object_)
        array[:] = [v.encode("utf-8") for v in values]
    elif datatype in ELEMENT_SIZE:
        try:
            array = np.asarray(data, dtype=numpy_dtype(datatype)).reshape(-1)
        except (TypeError, ValueError, OverflowError) as exc:
            raise invalid_argument(f"unable to parse 'data' of input '{name}' as {datatype}: {exc}") from None
    else:
        raise invalid_argument(f"invalid datatype '{datatype}' for input '{name}'")
    if array.size != count:
        raise invalid_argument(f"unexpected number of elements {array.size} for input '{name}', expecting {count}")
    return array.reshape(shape)


def _flatten(data: Any) -> list:
    """Nested JSON lists -> their leaves in order, without recursion (nesting depth is the client's choice)."""
    flat, stack = [], [iter([data])]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, list):
            stack.append(iter(item))
        else:
            flat.append(item)
    return flat


_END = object()


def _json_int(value: Any, what: str) -> int:
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        raise invalid_argument(f"'{what}' must be an integer, got {json.dumps(value)}")
    return value


def _object(value: Any, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid_argument(f"{what} must be a JSON object")
    return value


def _list(value: Any, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid_argument(f"{what} must be a JSON array")
    return value


# ---- inference responses ----------------------------------------------------------------------------
def response_to_json(
    response: InferResponse,
    requested: list[RequestedOutput],
    form: OutputForm,
    shm: Optional[SharedMemoryRegistry] = None,
) -> tuple[bytes, list[bytes]]:
    """The JSON header and the binary chunks that follow it (empty when every output is JSON)."""
    placement = {o.name: o.parameters for o in requested if "shared_memory_region" in o.parameters}
    outputs, chunks = [], []
    for tensor in response.outputs:
        out: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}
        where = placement.get(tensor.name)
        if where is not None and shm is not None:
            data = converters.tensor_bytes(tensor)
            shm.write(
                where["shared_memory_region"], int(where.get("shared_memory_offset", 0)), data,
                int(where["shared_memory_byte_size"]),
            )
            out["parameters"] = {key: where[key] for key in converters.SHM_KEYS if key in where}
        elif form.is_binary(tensor.name):
            data = converters.tensor_bytes(tensor)
            out["parameters"] = {"binary_data_size": len(data)}
            chunks.append(data)
        else:
            out["data"] = _encode_json_data(tensor)
        outputs.append(out)
    body: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        body["id"] = response.id
    if response.parameters:
        body["parameters"] = dict(response.parameters)
    body["outputs"] = outputs
    return dumps(body), chunks


def _encode_json_data(tensor: Tensor) -> list:
    if tensor.datatype in JSON_ONLY_BINARY:
        raise invalid_argument(
            f"sending {tensor.datatype} data via JSON is not supported. Please use the binary data format for "
            f"output '{tensor.name}'"
        )
    flat = tensor.data.reshape(-1)
    if tensor.datatype != "BYTES":
        return flat.tolist()
    values = []
    for item in flat:
        if not isinstance(item, (bytes, bytearray)):
            values.append(str(item))  # as converters.serialize_bytes does for non-bytes items
            continue
        try:
            values.append(bytes(item).decode("utf-8"))
        except UnicodeDecodeError:
            raise invalid_argument(
                f"output '{tensor.name}' holds bytes that are not UTF-8 text; request it with binary_data=true"
            ) from None
    return values
