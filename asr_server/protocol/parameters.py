"""The request and tensor parameters the server reads itself, checked by one set of rules for both protocols.

gRPC carries a parameter as one typed field of `InferParameter` (`int64_param`, `bool_param`, ...); HTTP
carries a JSON value. Both converters turn a parameter into a `Typed` (the gRPC field's kind, or the kind a
JSON value maps to) and call the functions here, so `sequence_id` -1, a double `sequence_id` or a string
`priority` are refused the same way on both endpoints, before anything reaches a scheduler.
Messages follow Triton: gRPC's infer handler words for gRPC, its HTTP server's "Unable to parse" for HTTP.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping, NamedTuple, Optional

from asr_server.bounded import KEPT_STRING_MAX, remember
from asr_server.errors import invalid_argument
from asr_server.messages import UINT64_MAX, SequenceControl

INT64_MAX = (1 << 63) - 1


class Typed(NamedTuple):
    """A parameter's value with its wire kind: int64, uint64, bool, string, double, or unset / other."""

    kind: str
    value: Any


_GRPC_KINDS = {f"{kind}_param": kind for kind in ("bool", "int64", "uint64", "string", "double")}
_UNSET_TYPED = Typed("unset", None)


def grpc_typed(param) -> Typed:
    """An `InferParameter` -> its kind ("int64" for `int64_param`) and value; "unset" when no field is set."""
    field = param.WhichOneof("parameter_choice")
    if field is None:
        return _UNSET_TYPED
    return Typed(_GRPC_KINDS.get(field) or field[: -len("_param")], getattr(param, field))


def json_typed(value: Any) -> Typed:
    """A JSON value -> the gRPC kind it stands for (integers >= 2^63 are uint64, as on the wire)."""
    if isinstance(value, bool):
        return Typed("bool", value)
    if isinstance(value, int):
        return Typed("int64" if value <= INT64_MAX else "uint64", value)
    if isinstance(value, float):
        return Typed("double", value)
    if isinstance(value, str):
        return Typed("string", value)
    return Typed("other", value)


@dataclasses.dataclass(frozen=True)
class Rule:
    kinds: frozenset  # the kinds accepted
    grpc_expected: str  # Triton's gRPC words for them
    http_expected: str  # the same in JSON terms
    unsigned: bool = False  # integers must lie in [0, 2^64)


_UNSIGNED = frozenset({"int64", "uint64"})
_BOOL = Rule(frozenset({"bool"}), "bool_param", "a boolean")

RULES = {
    # Triton accepts int64 or string ids; uint64 too, since a correlation id is unsigned.
    "sequence_id": Rule(_UNSIGNED | {"string"}, "int64_param, uint64_param or string_param",
                        "an unsigned integer or a string", unsigned=True),
    "sequence_start": _BOOL,
    "sequence_end": _BOOL,
    "priority": Rule(_UNSIGNED, "int64_param or uint64_param", "an unsigned integer", unsigned=True),
    "timeout": Rule(_UNSIGNED, "int64_param or uint64_param", "an unsigned integer", unsigned=True),
    "triton_enable_empty_final_response": _BOOL,
    "binary_data_output": _BOOL,  # HTTP
    "binary_data": _BOOL,  # HTTP, per output
    "shared_memory_region": Rule(frozenset({"string"}), "string_param", "a string"),
    "shared_memory_offset": Rule(frozenset({"int64"}), "int64_param", "an unsigned integer", unsigned=True),
    "shared_memory_byte_size": Rule(frozenset({"int64"}), "int64_param", "an unsigned integer", unsigned=True),
    "binary_data_size": Rule(frozenset({"int64"}), "int64_param", "an unsigned integer", unsigned=True),  # HTTP
}


def checked(key: str, typed: Typed, http: bool, tensor: Optional[str] = None) -> Any:
    """The parameter's value once it meets RULES[key]; INVALID_ARGUMENT in Triton's words otherwise."""
    rule = RULES[key]
    where = f" for tensor '{tensor}'" if tensor is not None else ""
    if typed.kind not in rule.kinds:
        if http:
            raise invalid_argument(f"Unable to parse '{key}'{where}: expected {rule.http_expected}, got {_json(typed)}")
        raise invalid_argument(f"invalid value type for '{key}' parameter{where}, expected {rule.grpc_expected}.")
    if rule.unsigned and typed.kind in _UNSIGNED and not 0 <= typed.value <= UINT64_MAX:
        if http:
            raise invalid_argument(f"Unable to parse '{key}'{where}: expected {rule.http_expected}, got {_json(typed)}")
        raise invalid_argument(f"invalid value for '{key}'{where}, expected value >= 0.")
    return typed.value


def _json(typed: Typed) -> str:
    try:
        return json.dumps(typed.value)[:64]
    except (TypeError, ValueError):
        return type(typed.value).__name__


@dataclasses.dataclass(frozen=True)
class Controls:
    """What a request's reserved parameters ask of the server."""

    sequence: SequenceControl  # sequence_id / sequence_start / sequence_end
    priority: int  # 0: the model's default level
    timeout_us: int  # 0: the queue policy's default


_NO_CONTROLS = Controls(SequenceControl(), 0, 0)
_CHECKED_ONLY = ("triton_enable_empty_final_response", "binary_data_output")  # read elsewhere, checked here
_CHECKED_ONLY_SET = frozenset(_CHECKED_ONLY)
# in this order, whatever the client's: with two bad parameters, the error names the same one every time
_CONTROL_KEYS = (*_CHECKED_ONLY, "sequence_id", "sequence_start", "sequence_end", "priority", "timeout")


# The controls of the control parameters already read over gRPC: a stream's chunks repeat the same
# sequence_id / sequence_start / sequence_end, and reading them was a tenth of a chunk's conversion. Keyed by
# the control parameters alone (a model's own parameters may be large and never repeat), and only when no
# string among them is longer than a correlation id needs: an entry's size is bounded as well as their number.
# Past the limit the table starts again.
_SEEN_GRPC_CONTROLS: dict[tuple, "Controls"] = {}
SEEN_CONTROLS_LIMIT = 4096


def controls(params: Mapping[str, Typed], http: bool) -> Controls:
    if not params:
        return _NO_CONTROLS
    if http:  # JSON values may be lists or objects, which cannot be a key
        return _read_controls(params, http)
    key = tuple((name, params[name]) for name in _CONTROL_KEYS if name in params)
    if not key:
        return _NO_CONTROLS
    found = _SEEN_GRPC_CONTROLS.get(key)
    if found is None:
        found = _read_controls(params, http)  # a refused set raises here and is not kept
        if all(type(typed.value) is not str or len(typed.value) <= KEPT_STRING_MAX for _, typed in key):
            remember(_SEEN_GRPC_CONTROLS, key, found, SEEN_CONTROLS_LIMIT)
    return found


def _read_controls(params: Mapping[str, Typed], http: bool) -> Controls:
    values = {key: checked(key, params[key], http) for key in _CONTROL_KEYS if key in params}
    if values.keys() <= _CHECKED_ONLY_SET:
        return _NO_CONTROLS
    return Controls(
        sequence=SequenceControl(id=values.get("sequence_id", 0), start=values.get("sequence_start", False),
                                 end=values.get("sequence_end", False)),
        priority=values.get("priority", 0),
        timeout_us=values.get("timeout", 0),
    )


@dataclasses.dataclass(frozen=True)
class ShmPlacement:
    """Where a tensor's bytes lie in a registered shared-memory region."""

    region: str  # the registered region's name
    offset: int  # bytes from the start of the region
    byte_size: int  # bytes of the tensor


def shm_placement(params: Mapping[str, Typed], tensor: str, http: bool) -> Optional[ShmPlacement]:
    """A tensor's shared-memory parameters, checked as Triton's ParseSharedMemoryParams does; None without them."""
    if "shared_memory_region" not in params:
        for key in ("shared_memory_offset", "shared_memory_byte_size"):
            if key in params:
                raise invalid_argument(
                    f"'{key}' can not be specified without 'shared_memory_region' parameter for tensor '{tensor}'"
                )
        return None
    if "shared_memory_byte_size" not in params:
        raise invalid_argument(
            f"'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for "
            f"tensor '{tensor}'"
        )
    offset = params.get("shared_memory_offset", Typed("int64", 0))
    return ShmPlacement(
        region=checked("shared_memory_region", params["shared_memory_region"], http, tensor),
        offset=checked("shared_memory_offset", offset, http, tensor),
        byte_size=checked("shared_memory_byte_size", params["shared_memory_byte_size"], http, tensor),
    )


def log_changes(body: Mapping[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """LogSettings (gRPC) and POST /v2/logging: each value's type must match the setting it changes, so that no
    request leaves a setting that breaks every later one."""
    changes = {}
    for key, value in body.items():
        if key not in current:
            raise invalid_argument(f"unknown log setting {key!r}")
        expected = current[key]
        if isinstance(expected, bool):
            ok = isinstance(value, bool)
            kind = "a boolean"
        elif isinstance(expected, int):
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            kind = "a non-negative integer"
        else:
            ok = isinstance(value, str)
            kind = "a string"
        if not ok:
            raise invalid_argument(f"log setting '{key}' expects {kind}, got {json.dumps(value)}")
        changes[key] = value
    return changes
