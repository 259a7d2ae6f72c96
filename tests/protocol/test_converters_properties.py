"""Property-based tests of the converters: tensors survive every wire form unchanged, and any
malformed tensor or parameter map gives a valid request or INVALID_ARGUMENT, never another exception."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.grpc import service_pb2 as pb

from asr_server.bounded import KEPT_STRING_MAX
from asr_server.dtypes import ALL_WIRE_TYPES, numpy_dtype
from asr_server.errors import ErrorCode, ServerError
from asr_server.protocol import converters
from asr_server.protocol import http_converters as hc
from asr_server.protocol.parameters import RULES, UINT64_MAX
from asr_server.messages import InferResponse, Tensor

# Seeded (derandomize) and small enough that the file runs in a few seconds; no example database on disk.
FAST = settings(max_examples=60, deadline=None, derandomize=True, database=None)
JSON_TYPES = tuple(t for t in ALL_WIRE_TYPES if t not in hc.JSON_ONLY_BINARY)
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


@st.composite
def tensors(draw, datatypes=ALL_WIRE_TYPES, text_only: bool = False) -> Tensor:
    datatype = draw(st.sampled_from(datatypes))
    shape = draw(SHAPES)
    if datatype == "BYTES":
        count = math.prod(shape)
        element = st.text(max_size=6).map(str.encode) if text_only else st.binary(max_size=6)
        data = np.empty(count, dtype=np.object_)
        data[:] = draw(st.lists(element, min_size=count, max_size=count))
        data = data.reshape(shape)
    elif datatype == "BF16":  # hypothesis has no bfloat16: any 16-bit pattern, viewed as one
        data = draw(hnp.arrays(np.uint16, shape)).view(numpy_dtype("BF16"))
    else:
        data = draw(hnp.arrays(numpy_dtype(datatype), shape))
    return Tensor("T", datatype, data)


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    if want.dtype == np.object_:
        assert [bytes(x) for x in got.reshape(-1)] == list(want.reshape(-1))
    else:
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()  # bit-exact, NaN payloads too


def request_with(tensor_message) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name=tensor_message.name, datatype=tensor_message.datatype, shape=tensor_message.shape)
    return request


# ---- round trips --------------------------------------------------------------------------------------
@FAST
@given(tensors())
def test_grpc_raw_round_trip(tensor):
    message = converters.response_to_pb(InferResponse("m", "1", outputs=[tensor]))
    request = request_with(message.outputs[0])
    request.raw_input_contents.extend(message.raw_output_contents)
    assert_same(converters.request_from_pb(request).inputs[0].data, tensor.data)


@FAST
@given(tensors(tuple(converters.CONTENTS_FIELD)))
def test_grpc_typed_contents_round_trip(tensor):
    request = request_with(converters.response_to_pb(InferResponse("m", "1", outputs=[tensor])).outputs[0])
    field = getattr(request.inputs[0].contents, converters.CONTENTS_FIELD[tensor.datatype])
    field.extend(list(tensor.data.reshape(-1)) if tensor.datatype == "BYTES" else tensor.data.reshape(-1).tolist())
    got = converters.request_from_pb(request).inputs[0].data
    if tensor.datatype in ("FP32", "FP64"):  # protobuf keeps the value; a NaN may lose its payload bits
        np.testing.assert_array_equal(got, tensor.data)
        assert got.dtype == tensor.data.dtype
    else:
        assert_same(got, tensor.data)


ELEMENTS = st.one_of(st.binary(max_size=5), st.text(max_size=3), st.integers(-5, 5), st.floats(allow_nan=False))


@FAST
@given(st.one_of(st.lists(st.binary(max_size=5), max_size=20), st.lists(ELEMENTS, max_size=20)))
def test_bytes_outputs_are_serialised_as_tritonclient_does(items):
    """serialize_bytes packs a few `bytes` elements itself (the streamed transcript's path) and leaves the rest
    to tritonclient's encoder: the two give the same wire bytes for any mix of bytes, str and other objects."""
    from tritonclient.utils import serialize_byte_tensor

    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    reference = serialize_byte_tensor(array)
    assert converters.serialize_bytes(array) == (b"" if reference.size == 0 else reference.item())


def test_narrow_typed_contents_keep_the_low_bytes_as_triton_does():
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="A", datatype="INT8", shape=[3]).contents.int_contents.extend([300, -129, 5])
    request.inputs.add(name="B", datatype="UINT16", shape=[1]).contents.uint_contents.extend([65537])
    inputs = converters.request_from_pb(request).inputs
    assert inputs[0].data.tolist() == [44, 127, 5] and inputs[1].data.tolist() == [1]


@FAST
@given(tensors(JSON_TYPES, text_only=True))
def test_http_json_round_trip(tensor):
    header, chunks = hc.response_to_json(InferResponse("m", "1", outputs=[tensor]), [], hc.OutputForm(False, {}))
    assert chunks == []
    (output,) = json.loads(header)["outputs"]
    body = hc.dumps({"inputs": [output]})  # the output, as sent back by a client
    request, _ = hc.request_from_json("m", "1", *hc.split_body(body, None))
    got = request.inputs[0].data
    if tensor.datatype in ("FP32", "FP64"):  # JSON writes NaN as NaN: the value survives, not its payload
        np.testing.assert_array_equal(got, tensor.data)
        assert got.dtype == tensor.data.dtype
    else:
        assert_same(got, tensor.data)


@FAST
@given(st.lists(tensors(), min_size=1, max_size=3))
def test_http_binary_round_trip(tensors_):
    outputs = [Tensor(f"T{i}", t.datatype, t.data) for i, t in enumerate(tensors_)]
    header, chunks = hc.response_to_json(InferResponse("m", "1", outputs=outputs), [], hc.OutputForm(True, {}))
    inputs = json.loads(header)["outputs"]  # each with parameters.binary_data_size, data after the header
    json_part = hc.dumps({"inputs": inputs})
    body = json_part + b"".join(chunks)
    request, _ = hc.request_from_json("m", "1", *hc.split_body(body, str(len(json_part))))
    for got, want in zip(request.inputs, outputs):
        assert got.name == want.name
        assert_same(got.data, want.data)


# ---- malformed tensors ---------------------------------------------------------------------------------
DATATYPES = st.sampled_from(ALL_WIRE_TYPES + ("", "FP8", "INT128", "bytes"))
# Small dimensions mostly, with the edges that overflow: [0, 2^62, 2^62] holds no element but no array has it.
DIM = st.one_of(st.integers(0, 4), st.sampled_from([0, -1, 2**31, 2**62, 2**63 - 1]), st.integers(-(2**63), 2**63 - 1))
# A zero among huge dimensions: no element, yet the byte size overflows.
EDGE_SHAPES = st.lists(st.sampled_from([2**31, 2**62, 2**63 - 1]), min_size=1, max_size=3).flatmap(
    lambda dims: st.permutations([0, *dims]))
DIMS = st.one_of(st.lists(DIM, max_size=4), EDGE_SHAPES)
MALFORMED = settings(FAST, max_examples=200)


def invalid_or_ok(call) -> Any:
    try:
        return call()
    except ServerError as exc:
        assert exc.code is ErrorCode.INVALID_ARGUMENT, exc
        return None


def sizes(shape: list[int]) -> st.SearchStrategy[int]:
    """Lengths of contents: any, or the element count of the shape when that is small (a near-valid tensor)."""
    count = math.prod(shape) if all(0 <= d <= 8 for d in shape) else None
    return st.one_of(st.integers(0, 6), st.just(count)) if count is not None and count <= 16 else st.integers(0, 6)


@MALFORMED
@given(datatype=DATATYPES, shape=DIMS, data=st.data())
def test_grpc_malformed_tensors_are_invalid_argument(datatype, shape, data):
    request = pb.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="T", datatype=datatype, shape=shape)
    form = data.draw(st.sampled_from(["raw", "int", "uint", "fp32", "bytes", "raw+int", "none"]))
    if "raw" in form:
        request.raw_input_contents.append(data.draw(st.binary(max_size=40)))
    n = data.draw(sizes(shape))
    if "int" in form and "uint" not in form:
        tensor.contents.int_contents.extend(data.draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=n, max_size=n)))
    if form == "uint":
        tensor.contents.uint_contents.extend(data.draw(st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n)))
    if form == "fp32":
        tensor.contents.fp32_contents.extend(data.draw(st.lists(st.floats(width=32), min_size=n, max_size=n)))
    if form == "bytes":
        tensor.contents.bytes_contents.extend(data.draw(st.lists(st.binary(max_size=4), min_size=n, max_size=n)))
    parsed = invalid_or_ok(lambda: converters.request_from_pb(request))
    if parsed is not None:
        assert parsed.inputs[0].shape == tuple(shape)


@MALFORMED
@given(datatype=DATATYPES, shape=DIMS, data=st.data())
def test_http_malformed_tensors_are_invalid_argument(datatype, shape, data):
    item: dict[str, Any] = {"name": "T", "datatype": datatype, "shape": shape}
    binary = b""
    form = data.draw(st.sampled_from(["json", "binary", "none"]))
    n = data.draw(sizes(shape))
    if form == "json":
        item["data"] = data.draw(st.lists(st.one_of(st.integers(-(2**65), 2**65), st.floats(), st.text(max_size=3)),
                                          min_size=n, max_size=n))
    elif form == "binary":
        binary = data.draw(st.binary(max_size=40))
        item["parameters"] = {"binary_data_size": data.draw(st.one_of(st.just(len(binary)), st.integers(-2, 50)))}
    json_part = hc.dumps({"inputs": [item]})
    parsed = invalid_or_ok(lambda: hc.request_from_json("m", "1", *hc.split_body(json_part + binary, str(len(json_part)))))
    if parsed is not None:
        assert parsed[0].inputs[0].shape == tuple(shape)


JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=4))
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=3)), max_leaves=8)


@st.composite
def json_inputs(draw) -> dict:
    """An input that is near-valid: each field is mostly plausible, else any JSON value, and mostly present."""
    def field(plausible):
        return draw(st.one_of(plausible, plausible, plausible, JSON_VALUES))

    item = {
        "name": field(st.just("T")),
        "datatype": field(DATATYPES),
        "shape": field(DIMS),
        "data": field(st.one_of(st.just([]), st.lists(st.one_of(st.integers(-300, 300), st.floats(), st.text(max_size=3)),
                                                      max_size=6))),
        "parameters": field(st.fixed_dictionaries({}, optional={"binary_data_size": st.integers(-2, 50)})),
    }
    return {key: value for key, value in item.items() if draw(st.integers(0, 4)) or key == "name"}


@MALFORMED
@given(inputs=st.lists(json_inputs(), max_size=2), binary=st.binary(max_size=40), split=st.booleans(),
       extra=st.dictionaries(st.sampled_from(["outputs", "id", "parameters"]), JSON_VALUES, max_size=2))
def test_http_malformed_requests_are_invalid_argument(inputs, binary, split, extra):
    header = hc.dumps({"inputs": inputs, **extra})
    body, length = (header + binary, str(len(header))) if split else (header, None)
    invalid_or_ok(lambda: hc.request_from_json("m", "1", *hc.split_body(body, length)))


# ---- parameter maps ------------------------------------------------------------------------------------
KEYS = st.sampled_from(sorted(RULES) + ["custom", "triton_x"])
GRPC_VALUES = st.one_of(
    st.tuples(st.just("int64_param"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("uint64_param"), st.integers(0, UINT64_MAX)),
    st.tuples(st.just("bool_param"), st.booleans()),
    st.tuples(st.just("double_param"), st.floats()),
    st.tuples(st.just("string_param"), st.text(max_size=4)),
    st.tuples(st.just("unset"), st.none()),
)


def fill(params, values: dict) -> None:
    for key, (field, value) in values.items():
        if field == "unset":
            params[key].SetInParent()
        else:
            setattr(params[key], field, value)


def assert_controls_valid(request) -> None:
    sequence_id = request.sequence.id
    assert isinstance(sequence_id, str) or (type(sequence_id) is int and 0 <= sequence_id <= UINT64_MAX)
    assert type(request.sequence.start) is bool and type(request.sequence.end) is bool
    for value in (request.priority, request.timeout_us):
        assert type(value) is int and 0 <= value <= UINT64_MAX


@FAST
@given(request_params=st.dictionaries(KEYS, GRPC_VALUES, max_size=5),
       tensor_params=st.dictionaries(KEYS, GRPC_VALUES, max_size=3),
       output_params=st.dictionaries(KEYS, GRPC_VALUES, max_size=3))
def test_grpc_parameter_maps_give_a_request_or_invalid_argument(request_params, tensor_params, output_params):
    request = pb.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="T", datatype="INT32", shape=[1])
    tensor.contents.int_contents.append(1)
    output = request.outputs.add(name="O")
    fill(request.parameters, request_params)
    fill(tensor.parameters, tensor_params)
    fill(output.parameters, output_params)
    parsed = invalid_or_ok(lambda: converters.request_from_pb(request))
    if parsed is not None:
        assert_controls_valid(parsed)


VALID_GRPC = {
    "sequence_id": st.one_of(st.tuples(st.just("int64_param"), st.integers(0, 2**63 - 1)),
                             st.tuples(st.just("uint64_param"), st.integers(0, UINT64_MAX)),
                             st.tuples(st.just("string_param"), st.text(max_size=4))),
    "sequence_start": st.tuples(st.just("bool_param"), st.booleans()),
    "sequence_end": st.tuples(st.just("bool_param"), st.booleans()),
    "priority": st.tuples(st.sampled_from(["int64_param", "uint64_param"]), st.integers(0, 2**63 - 1)),
    "timeout": st.tuples(st.sampled_from(["int64_param", "uint64_param"]), st.integers(0, 2**63 - 1)),
}


@FAST
@given(st.fixed_dictionaries({}, optional=VALID_GRPC))
def test_grpc_valid_parameters_are_always_accepted(values):
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="T", datatype="INT32", shape=[1]).contents.int_contents.append(1)
    fill(request.parameters, values)
    parsed = converters.request_from_pb(request)
    assert_controls_valid(parsed)
    if "sequence_id" in values:
        assert parsed.sequence.id == values["sequence_id"][1]
    if "priority" in values:
        assert parsed.priority == values["priority"][1]


@FAST
@given(params=st.dictionaries(KEYS, JSON_VALUES, max_size=5),
       tensor_params=st.dictionaries(KEYS, JSON_VALUES, max_size=3),
       output_params=st.dictionaries(KEYS, JSON_VALUES, max_size=3))
def test_http_parameter_maps_give_a_request_or_invalid_argument(params, tensor_params, output_params):
    header = {
        "inputs": [{"name": "T", "datatype": "INT32", "shape": [1], "data": [1], "parameters": tensor_params}],
        "outputs": [{"name": "O", "parameters": output_params}],
        "parameters": params,
    }
    parsed = invalid_or_ok(lambda: hc.request_from_json("m", "1", header, memoryview(b"")))
    if parsed is not None:
        assert_controls_valid(parsed[0])


@pytest.mark.parametrize("value, ok", [(0, True), (UINT64_MAX, True), ("s", True), (UINT64_MAX + 1, False),
                                       (-1, False), (1.0, False), (False, False), (None, False), ([1], False)])
def test_http_sequence_id_bounds(value, ok):
    header = {"inputs": [], "parameters": {"sequence_id": value}}
    parsed = invalid_or_ok(lambda: hc.request_from_json("m", "1", header, memoryview(b"")))
    assert (parsed is not None) == ok


def test_grpc_controls_seen_before_are_reused_refused_ones_refused_every_time(monkeypatch):
    """A stream's chunks repeat their sequence parameters: the controls read from a set are kept and reused,
    a set that was refused is refused again (never kept), and the table stays bounded."""
    from asr_server.protocol import parameters

    def chunk(sequence_id, start: bool = False) -> pb.ModelInferRequest:
        request = pb.ModelInferRequest(model_name="m")
        request.parameters["sequence_id"].int64_param = sequence_id
        request.parameters["sequence_start"].bool_param = start
        return request

    first = converters.request_from_pb(chunk(5, start=True)).sequence
    assert (first.id, first.start, first.end) == (5, True, False)
    assert converters.request_from_pb(chunk(5, start=True)).sequence is first
    assert converters.request_from_pb(chunk(5)).sequence.start is False
    bad = chunk(5)
    bad.parameters["sequence_end"].string_param = "yes"
    for _ in range(2):
        with pytest.raises(ServerError) as refused:
            converters.request_from_pb(bad)
        assert refused.value.code == ErrorCode.INVALID_ARGUMENT and "sequence_end" in refused.value.message
    monkeypatch.setattr(parameters, "SEEN_CONTROLS_LIMIT", 4)
    for sequence_id in range(100, 120):
        assert converters.request_from_pb(chunk(sequence_id)).sequence.id == sequence_id
    assert len(parameters._SEEN_GRPC_CONTROLS) <= 4


def test_the_controls_table_keeps_neither_a_models_parameters_nor_long_strings(monkeypatch):
    """Entries are bounded in size, not only in number: a request's own parameters (large, never repeating)
    stay out of the key, a set without controls is not kept, nor one whose string id is long."""
    from asr_server.protocol import parameters

    monkeypatch.setattr(parameters, "_SEEN_GRPC_CONTROLS", {})
    note = "x" * 100_000
    for index in range(3):
        request = pb.ModelInferRequest(model_name="m")
        request.parameters["note"].string_param = f"{index}{note}"
        assert converters.request_from_pb(request).parameters["note"] == f"{index}{note}"
        request.parameters["sequence_id"].int64_param = 9
        assert converters.request_from_pb(request).sequence.id == 9
    # one entry, the sequence id's, whatever the notes were
    assert list(parameters._SEEN_GRPC_CONTROLS) == [(("sequence_id", parameters.Typed("int64", 9)),)]
    long_id = pb.ModelInferRequest(model_name="m")
    long_id.parameters["sequence_id"].string_param = "u" * (KEPT_STRING_MAX + 1)
    assert converters.request_from_pb(long_id).sequence.id == "u" * (KEPT_STRING_MAX + 1)
    short_id = pb.ModelInferRequest(model_name="m")
    short_id.parameters["sequence_id"].string_param = "utterance-1"
    assert converters.request_from_pb(short_id).sequence.id == "utterance-1"
    assert len(parameters._SEEN_GRPC_CONTROLS) == 2  # the short string id is kept, the long one not
