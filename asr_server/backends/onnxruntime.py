"""The onnxruntime backend (Triton's `onnxruntime` / `onnxruntime_onnx`), and the batching shared with
other one-call-per-batch backends (`TensorBatchBackend`, also used by the pytorch backend)."""

from __future__ import annotations

import abc
import functools
import itertools
import logging
import os
from pathlib import Path
from typing import Hashable, Mapping, Optional, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from tritonclient.grpc import model_config_pb2 as mc

from asr_server import dtypes
from asr_server.backends.base import Backend, ExecuteResult, batcher_inputs, batcher_outputs, context_parameters
from asr_server.backends.reshape import WILDCARD_DIM, Reshape
from asr_server.errors import ErrorCode, ServerError, internal, invalid_argument
from asr_server.messages import InferRequest, InferResponse, ResponseSink, Tensor

log = logging.getLogger(__name__)

# max_batch_size Triton's onnxruntime backend gives a model whose tensors all have a dynamic first dim
# (its `default-max-batch-size` backend setting).
AUTO_MAX_BATCH_SIZE = 4
# Several instances of several models share the CPUs, so each session gets few threads unless the
# config asks for more.
DEFAULT_INTRA_OP_THREADS = max(1, min(4, (os.cpu_count() or 1) // 4))

_ONNX_TO_CONFIG = {
    onnx.TensorProto.BOOL: mc.TYPE_BOOL,
    onnx.TensorProto.UINT8: mc.TYPE_UINT8,
    onnx.TensorProto.UINT16: mc.TYPE_UINT16,
    onnx.TensorProto.UINT32: mc.TYPE_UINT32,
    onnx.TensorProto.UINT64: mc.TYPE_UINT64,
    onnx.TensorProto.INT8: mc.TYPE_INT8,
    onnx.TensorProto.INT16: mc.TYPE_INT16,
    onnx.TensorProto.INT32: mc.TYPE_INT32,
    onnx.TensorProto.INT64: mc.TYPE_INT64,
    onnx.TensorProto.FLOAT16: mc.TYPE_FP16,
    onnx.TensorProto.BFLOAT16: mc.TYPE_BF16,
    onnx.TensorProto.FLOAT: mc.TYPE_FP32,
    onnx.TensorProto.DOUBLE: mc.TYPE_FP64,
    onnx.TensorProto.STRING: mc.TYPE_STRING,
}
# onnxruntime's type strings ("tensor(float)") -> config data types.
_ORT_TO_CONFIG = {
    f"tensor({onnx.helper.tensor_dtype_to_string(t)[len('TensorProto.'):].lower()})": c
    for t, c in _ONNX_TO_CONFIG.items()
}
_GRAPH_LEVELS = {  # config optimization.graph.level -> ORT level (Triton's onnxruntime backend mapping)
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
}


# ---------------------------------------------------------------------------------------------------
# Shared batching: group requests by shape, concatenate, run once, split back.


class TensorBatchBackend(Backend):
    """A backend that runs one framework call per batch of numpy tensors.

    Subclasses say which request tensors feed the model (`_feed_names`), how to hand a tensor to the
    framework (`_prepare_input`) and make the call (`_run`). This class applies the config's `reshape`,
    batches requests whose non-batch shapes agree (max_batch_size > 0) and splits outputs back, and
    fails only the requests of a run that raised.
    """

    inline_safe = True  # a framework call never re-enters the server

    @abc.abstractmethod
    def _feed_names(self) -> Sequence[str]:
        """Names of the tensors the model takes, in the order `_run` expects them."""

    @abc.abstractmethod
    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the model once; feeds and outputs are batched arrays (batch dim first when batching)."""

    def _prepare_input(self, name: str, array: np.ndarray) -> np.ndarray:
        """Convert one input to what the framework takes (dtype, string handling)."""
        return array

    @property
    def _batching(self) -> bool:
        return self.context.config.max_batch_size > 0

    def execute(
        self, requests: Sequence[InferRequest], senders: Optional[Sequence[ResponseSink]] = None
    ) -> ExecuteResult:
        results: ExecuteResult = [None] * len(requests)
        groups: dict[Hashable, list[tuple[int, dict[str, np.ndarray]]]] = {}
        for index, request in enumerate(requests):
            try:
                feeds = self._request_feeds(request)
            except ServerError as exc:
                results[index] = exc
                continue
            key = _shape_signature(feeds) if self._batching else index
            groups.setdefault(key, []).append((index, feeds))
        for members in groups.values():
            self._run_group(requests, members, results)
        return results

    @functools.cached_property
    def _input_reshapes(self) -> dict[str, Reshape]:
        return {io.name: Reshape.to_model(io) for io in self.context.config.input if io.HasField("reshape")}

    @functools.cached_property
    def _output_reshapes(self) -> dict[str, Reshape]:
        return {io.name: Reshape.to_client(io) for io in self.context.config.output if io.HasField("reshape")}

    def _request_feeds(self, request: InferRequest) -> dict[str, np.ndarray]:
        reshapes = self._input_reshapes
        feeds = {}
        for name in self._feed_names():
            tensor = request.find_input(name)
            if tensor is None:
                raise invalid_argument(f"expected input '{name}' for model '{self.context.name}'")
            array = tensor.data
            if name in reshapes:
                array = reshapes[name](array, self._batching)
            feeds[name] = self._prepare_input(name, array)
        return feeds

    def _run_group(
        self,
        requests: Sequence[InferRequest],
        members: list[tuple[int, dict[str, np.ndarray]]],
        results: ExecuteResult,
    ) -> None:
        indices = [index for index, _ in members]
        try:
            batched = _concatenate([feeds for _, feeds in members]) if self._batching else members[0][1]
            try:
                outputs = self._run(batched)
            except ServerError:
                raise
            except Exception as exc:  # the framework's own error types
                raise internal(f"{type(exc).__name__}: {exc}") from exc
            outputs = {name: self._restore_output(name, array) for name, array in outputs.items()}
            if self._batching and len(members) > 1:
                per_request = _split(outputs, [_batch_size(feeds) for _, feeds in members])
            else:
                per_request = [outputs]  # one request: its outputs as they are
        except ServerError as exc:
            if exc.code is ErrorCode.INTERNAL:
                log.warning("model '%s' failed a run of %d request(s): %s", self.context.name, len(indices), exc)
            for index in indices:
                results[index] = exc
            return
        for index, arrays in zip(indices, per_request):
            results[index] = self._response(requests[index], arrays)

    def _restore_output(self, name: str, array: np.ndarray) -> np.ndarray:
        """Model output -> wire form: config dims instead of `reshape`, BYTES as object arrays of bytes."""
        reshape = self._output_reshapes.get(name)
        if reshape is not None:
            array = reshape(array, self._batching)
        if array.dtype.kind in ("U", "S", "O"):
            array = _as_bytes_array(array)
        return array

    def _response(self, request: InferRequest, arrays: Mapping[str, np.ndarray]) -> InferResponse:
        return InferResponse(
            model_name=self.context.name,
            model_version=str(self.context.version),
            id=request.id,
            outputs=[Tensor(name, dtypes.wire_name(array.dtype), array) for name, array in arrays.items()],
        )


def _shape_signature(feeds: Mapping[str, np.ndarray]) -> tuple:
    """Requests with equal signatures can be concatenated along the batch dim."""
    return tuple((name, array.dtype.str, array.shape[1:]) for name, array in feeds.items())


def _batch_size(feeds: Mapping[str, np.ndarray]) -> int:
    first = next(iter(feeds.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else 1


def _concatenate(feeds_list: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if len(feeds_list) == 1:
        return dict(feeds_list[0])
    return {name: np.concatenate([feeds[name] for feeds in feeds_list]) for name in feeds_list[0]}


def _split(outputs: Mapping[str, np.ndarray], batch_sizes: Sequence[int]) -> list[dict[str, np.ndarray]]:
    """Cut every batched output back into per-request slices (views, no copies)."""
    total = sum(batch_sizes)
    per_request: list[dict[str, np.ndarray]] = [{} for _ in batch_sizes]
    offsets = list(itertools.accumulate(batch_sizes, initial=0))
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != total:
            raise internal(
                f"output '{name}' has shape {list(array.shape)}: expected a batch dimension of {total}"
            )
        for position, (start, stop) in enumerate(zip(offsets[:-1], offsets[1:])):
            per_request[position][name] = array[start:stop]
    return per_request


def _as_bytes_array(array: np.ndarray) -> np.ndarray:
    flat = [item.encode("utf-8") if isinstance(item, str) else bytes(item) for item in array.reshape(-1)]
    result = np.empty(len(flat), dtype=np.object_)
    result[:] = flat
    return result.reshape(array.shape)


def _as_str_array(array: np.ndarray) -> np.ndarray:
    flat = [item.decode("utf-8") if isinstance(item, bytes) else str(item) for item in array.reshape(-1)]
    result = np.empty(len(flat), dtype=np.object_)
    result[:] = flat
    return result.reshape(array.shape)


# ---------------------------------------------------------------------------------------------------
# onnxruntime


class OnnxRuntimeBackend(TensorBatchBackend):
    """One onnxruntime InferenceSession per model instance."""

    default_model_filename = "model.onnx"

    session: Optional[ort.InferenceSession] = None

    @classmethod
    def auto_complete_config(cls, config: mc.ModelConfig, version_dir: Path) -> mc.ModelConfig:
        path = Path(version_dir) / (config.default_model_filename or cls.default_model_filename)
        if not path.is_file() or (config.input and config.output):
            return config  # nothing to read, or nothing to fill
        return auto_complete_from_onnx(config, onnx.load(str(path), load_external_data=False))

    def load(self) -> None:
        context = self.context
        path = context.model_file
        if not path.is_file():
            raise internal(f"unable to find '{path}' for model '{context.name}'")
        try:
            self.session = ort.InferenceSession(
                str(path), sess_options=self._session_options(), providers=self._providers()
            )
        except Exception as exc:  # onnxruntime's errors carry the reason (bad graph, missing op)
            raise internal(f"failed to load model '{context.name}': {exc}") from exc
        self._inputs = {node.name: node for node in self.session.get_inputs()}
        self._output_names = [node.name for node in self.session.get_outputs()]
        self._check_config_against_model()
        # Triton's parameter: ORT's arena keeps its largest allocation for good (a 60 s offline utterance
        # left ~380 MB resident); with "cpu:0" each run hands its arena memory back.
        shrink = context_parameters(context.config).get("memory.enable_memory_arena_shrinkage", "")
        self._run_options = None
        if shrink:
            self._run_options = ort.RunOptions()
            self._run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", shrink)

    def unload(self) -> None:
        self.session = None

    def _feed_names(self) -> Sequence[str]:
        return list(self._inputs)

    def _prepare_input(self, name: str, array: np.ndarray) -> np.ndarray:
        model_type = self._inputs[name].type
        if model_type == "tensor(string)":
            return _as_str_array(array)
        if array.dtype == np.object_:
            raise invalid_argument(
                f"input '{name}' is BYTES, but model '{self.context.name}' takes {model_type}: onnxruntime "
                "takes BYTES only for string tensors"
            )
        expected = dtypes.numpy_dtype(dtypes.config_to_wire(_ORT_TO_CONFIG[model_type]))
        return array if array.dtype == expected else array.astype(expected)

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.session is not None, "execute() before load()"
        arrays = self.session.run(self._output_names, feeds, self._run_options)
        return dict(zip(self._output_names, arrays))

    def _session_options(self) -> ort.SessionOptions:
        """Session options from the config, honouring the parameters Triton's onnxruntime backend reads."""
        config = self.context.config
        parameters = context_parameters(config)
        options = ort.SessionOptions()
        options.intra_op_num_threads = _int_parameter(parameters, "intra_op_thread_count", DEFAULT_INTRA_OP_THREADS)
        options.inter_op_num_threads = _int_parameter(parameters, "inter_op_thread_count", 1)
        if _int_parameter(parameters, "execution_mode", 0) == 1:
            options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        # Idle threads that spin burn the CPUs that other instances need.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        level = config.optimization.graph.level if config.optimization.HasField("graph") else 0
        options.graph_optimization_level = _GRAPH_LEVELS.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        options.log_severity_level = 3  # errors only: warnings about unused initializers are noise
        return options

    def _providers(self) -> list:
        context = self.context
        if context.instance_kind == "KIND_GPU":
            if "CUDAExecutionProvider" in ort.get_available_providers():
                return [("CUDAExecutionProvider", {"device_id": context.device_id}), "CPUExecutionProvider"]
            log.warning(
                "instance %s of model '%s' asks for a GPU but onnxruntime has no CUDA provider: using the CPU",
                context.instance_name, context.name,
            )
        return ["CPUExecutionProvider"]

    def _check_config_against_model(self) -> None:
        """A config tensor the model lacks, or declares with another type, fails the load (as in Triton)."""
        name = self.context.name
        declared = {io.name: io.data_type for io in self.context.config.input}
        for input_name, data_type in declared.items():
            node = self._inputs.get(input_name)
            if node is None:
                allowed = ", ".join(self._inputs)
                raise invalid_argument(
                    f"unexpected inference input '{input_name}' for model '{name}', allowed inputs are: {allowed}"
                )
            model_type = _ORT_TO_CONFIG.get(node.type)
            if model_type is not None and model_type != data_type:
                raise invalid_argument(
                    f"unexpected datatype {mc.DataType.Name(data_type)} for inference input '{input_name}' "
                    f"of model '{name}', expecting {mc.DataType.Name(model_type)}"
                )
        for io in self.context.config.output:
            if io.name not in self._output_names:
                allowed = ", ".join(self._output_names)
                raise invalid_argument(
                    f"unexpected inference output '{io.name}' for model '{name}', allowed outputs are: {allowed}"
                )


def auto_complete_from_onnx(config: mc.ModelConfig, model: onnx.ModelProto) -> mc.ModelConfig:
    """Fill max_batch_size, inputs and outputs from an ONNX graph with the rules of Triton's onnxruntime
    backend: a model whose every input and output has a dynamic first dim supports batching; with
    max_batch_size unset it gets AUTO_MAX_BATCH_SIZE and dynamic batching; batch dims are left out."""
    completed = mc.ModelConfig()
    completed.CopyFrom(config)
    graph = model.graph
    # Initializers listed as inputs (older exporters) are weights; sequence control and implicit-state
    # tensors are fed by the sequence batcher, not by clients.
    not_inputs = {init.name for init in graph.initializer} | set(batcher_inputs(completed))
    not_outputs = set(batcher_outputs(completed))
    inputs = [_value_info(node) for node in graph.input if node.name not in not_inputs]
    outputs = [_value_info(node) for node in graph.output if node.name not in not_outputs]
    can_batch = all(dims and dims[0] == WILDCARD_DIM for _, _, dims in inputs + outputs)
    filling_all = not completed.input and not completed.output
    if filling_all and completed.max_batch_size == 0 and can_batch:
        completed.max_batch_size = AUTO_MAX_BATCH_SIZE
        if not completed.HasField("dynamic_batching") and not completed.HasField("sequence_batching"):
            completed.dynamic_batching.SetInParent()
    elif completed.max_batch_size > 0 and not can_batch:
        raise invalid_argument(
            f"autofill failed for model '{completed.name}': model does not support batching while non-zero "
            "max_batch_size is specified"
        )
    batching = completed.max_batch_size > 0
    for section, infos in ((completed.input, inputs), (completed.output, outputs)):
        if len(section):
            continue
        for name, data_type, dims in infos:
            io = section.add(name=name, data_type=data_type)
            io.dims.extend(dims[1:] if batching else dims)
            if not io.dims:
                # A tensor that is only the batch dim: the wire sees [batch, 1], the model [batch].
                io.dims.append(1)
                io.reshape.SetInParent()
    return completed


def _value_info(node: onnx.ValueInfoProto) -> tuple[str, int, list[int]]:
    tensor_type = node.type.tensor_type
    data_type = _ONNX_TO_CONFIG.get(tensor_type.elem_type, mc.TYPE_INVALID)
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else WILDCARD_DIM for d in tensor_type.shape.dim]
    return node.name, data_type, dims


def _int_parameter(parameters: Mapping[str, str], key: str, default: int) -> int:
    value = parameters.get(key, "")
    try:
        return int(value) if value != "" else default
    except ValueError:
        raise invalid_argument(f"parameter '{key}' must be an integer, got '{value}'") from None
