"""Protobuf messages as the JSON Triton writes: proto field names, every field printed, int64 as numbers.

protobuf's own JSON writes int64 values as strings (`"dims": ["4"]`); Triton's HTTP API (model config,
statistics) and the model config it hands python models (`args["model_config"]`) write numbers. One
converter for both: `protocol/http_converters.py` and `backends/python/model_config.py`.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

_INT64_TYPES = (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64)


def message_to_dict(message: Message) -> dict:
    """Every field (defaults included: `"max_batch_size": 0`, `"input": []`), proto field names, enum names,
    int64 values as JSON numbers."""
    value = json_format.MessageToDict(
        message, always_print_fields_with_no_presence=True, preserving_proto_field_name=True
    )
    return _int64_as_numbers(message.DESCRIPTOR, value)


def _int64_as_numbers(descriptor: Descriptor, value: dict) -> dict:
    # Walks the message's descriptor, not the dict: a string field holding digits stays a string.
    for field in descriptor.fields:
        if field.name not in value:
            continue
        item = value[field.name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for key, entry in item.items():
                item[key] = _convert(value_field, entry)
        elif field.is_repeated:
            value[field.name] = [_convert(field, entry) for entry in item]
        else:
            value[field.name] = _convert(field, item)
    return value


def _convert(field: FieldDescriptor, item: Any) -> Any:
    if field.message_type is not None:
        return _int64_as_numbers(field.message_type, item) if isinstance(item, dict) else item
    if field.cpp_type in _INT64_TYPES and isinstance(item, str):
        return int(item)
    return item
