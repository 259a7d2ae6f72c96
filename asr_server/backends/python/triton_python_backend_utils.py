"""Triton python_backend's `triton_python_backend_utils` API, served in process.

A `model.py` written for Triton (`import triton_python_backend_utils as pb_utils`) runs here unchanged:
the python backend registers this module under that name (`asr_server/backends/python/__init__.py`), and
each model instance imports its model file with its own copy of it, bound to the instance's route
(`importer.instance_api`; see `api/routes.py`).

Where Triton crosses a process boundary (stub <-> server, shared memory), we pass Python objects: a `Tensor`
holds the numpy array it was given (BYTES tensors: `np.object_` arrays of `bytes`), and the backend converts
to the server's types only at the edges (`asr_server/backends/python/convert.py`). This module knows nothing
about the server core; its parts live in `api/`, one module per job, and this one only names them.
"""

from __future__ import annotations

from asr_server.backends.python.api.datatypes import (
    TRITON_STRING_TO_NUMPY,
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_GPU,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    MemoryType,
    PreferredMemory,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)
from asr_server.backends.python.api.errors import Logger, TritonError, TritonModelException
from asr_server.backends.python.api.metrics import Metric, MetricFamily, is_model_ready, load_model, unload_model
from asr_server.backends.python.api.model_config import (
    ModelConfig,
    get_input_config_by_name,
    get_output_config_by_name,
    using_decoupled_model_transaction_policy,
)
from asr_server.backends.python.api.requests import InferenceRequest
from asr_server.backends.python.api.responses import InferenceResponse, InferenceResponseSender, ResponseIterator
from asr_server.backends.python.api.routes import get_model_dir
from asr_server.backends.python.api.tensors import Tensor, get_input_tensor_by_name, get_output_tensor_by_name

__all__ = [
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "MemoryType",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_MEMORY_CPU",
    "PreferredMemory",
    "TRITON_STRING_TO_NUMPY",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "deserialize_bytes_tensor",
    "TritonError",
    "TritonModelException",
    "Logger",
    "Tensor",
    "get_input_tensor_by_name",
    "get_output_tensor_by_name",
    "get_model_dir",
    "InferenceResponse",
    "ResponseIterator",
    "InferenceResponseSender",
    "InferenceRequest",
    "get_input_config_by_name",
    "get_output_config_by_name",
    "using_decoupled_model_transaction_policy",
    "ModelConfig",
    "Metric",
    "MetricFamily",
    "load_model",
    "unload_model",
    "is_model_ready",
]
