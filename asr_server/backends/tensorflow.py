"""The tensorflow backend (Triton's `tensorflow`): `tensorflow_savedmodel` (a `model.savedmodel` folder) and
`tensorflow_graphdef` (a frozen `model.graphdef`), on the CPU.

TensorFlow is optional (the `tensorflow` extra: `pip install 'asr-server[tensorflow]'`); this module imports
it, so a model on this backend fails to load with "needs the 'tensorflow' package" where it is missing.

As in Triton's tensorflow backend:
- SavedModel: the tensors are the inputs and outputs of the signature `TF_SIGNATURE_DEF` (default
  "serving_default") of the meta-graph tagged `TF_GRAPH_TAG` (default "serve"), named by their signature keys.
  Auto-complete fills max_batch_size (4 when every input and output has a variable first dim),
  dynamic_batching, inputs and outputs from that signature.
- GraphDef: tensors are named by their graph nodes (`name` for `name:0`); a GraphDef carries too little
  metadata to auto-complete, so its config must list inputs and outputs.
- TF_NUM_INTRA_THREADS / TF_NUM_INTER_THREADS size TensorFlow's thread pools. They are process-wide in
  TensorFlow 2 and can only be set before its runtime starts: the first model loaded sets them (default: a
  quarter of the CPUs, at most 4, and 1, as the onnxruntime backend's defaults), later different values are
  reported and ignored. TF_USE_PER_SESSION_THREADS and TF_INIT_OPS_FILE are not supported (TF1 sessions).
Implicit state and sequence controls are ordinary signature inputs/outputs fed and collected by the sequence
batcher, the onnxruntime backend's contract. KIND_GPU instances run on the CPU unless TensorFlow sees a GPU.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.backends.base import batcher_inputs, batcher_outputs, context_parameters, model_inputs, model_outputs
from asr_server.backends.onnxruntime import AUTO_MAX_BATCH_SIZE, TensorBatchBackend, _int_parameter
from asr_server.backends.reshape import WILDCARD_DIM
from asr_server.errors import internal, invalid_argument

log = logging.getLogger(__name__)

SAVEDMODEL, GRAPHDEF = "tensorflow_savedmodel", "tensorflow_graphdef"
DEFAULT_INTRA_THREADS = max(1, min(4, (os.cpu_count() or 1) // 4))
_threads_lock = threading.Lock()
_threads_set: Optional[tuple[int, int]] = None

_TF_TO_CONFIG = {
    tf.bool: mc.TYPE_BOOL, tf.uint8: mc.TYPE_UINT8, tf.uint16: mc.TYPE_UINT16, tf.uint32: mc.TYPE_UINT32,
    tf.uint64: mc.TYPE_UINT64, tf.int8: mc.TYPE_INT8, tf.int16: mc.TYPE_INT16, tf.int32: mc.TYPE_INT32,
    tf.int64: mc.TYPE_INT64, tf.float16: mc.TYPE_FP16, tf.bfloat16: mc.TYPE_BF16, tf.float32: mc.TYPE_FP32,
    tf.float64: mc.TYPE_FP64, tf.string: mc.TYPE_STRING,
}
_CONFIG_TO_TF = {config: dtype for dtype, config in _TF_TO_CONFIG.items()}


def load_signature(path: Path, model_name: str, tag: str = "serve", signature: str = "serving_default") -> Any:
    """The SavedModel's signature function (inputs by keyword, outputs as a dict)."""
    if not path.exists():
        raise internal(f"unable to find '{path}' for model '{model_name}'")
    try:
        loaded = tf.saved_model.load(str(path), tags=[tag])
    except Exception as exc:  # TensorFlow's own errors carry the reason
        raise internal(f"failed to load model '{model_name}': {exc}") from exc
    if signature not in loaded.signatures:
        raise invalid_argument(
            f"unable to load model '{model_name}', signature '{signature}' not found; the model has: "
            + ", ".join(loaded.signatures.keys())
        )
    function = loaded.signatures[signature]
    function._asr_server_owner = loaded  # the function needs its SavedModel object alive (variables)
    return function


def signature_specs(function: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """({input key: TensorSpec}, {output key: TensorSpec}) of a signature function."""
    return dict(function.structured_input_signature[1]), dict(function.structured_outputs)


class TensorFlowBackend(TensorBatchBackend):
    """One loaded SavedModel signature (or pruned GraphDef function) per model instance."""

    default_model_filename = "model.savedmodel"
    inline_safe = False  # TensorFlow calls are not short enough for the event loop thread

    function: Any = None

    @classmethod
    def model_filename_for(cls, platform: str) -> str:
        return "model.graphdef" if platform == GRAPHDEF else "model.savedmodel"

    @classmethod
    def auto_complete_config(cls, config: mc.ModelConfig, version_dir: Path) -> mc.ModelConfig:
        if config.platform == GRAPHDEF:
            return config  # nothing to read the tensors from (as in Triton)
        path = Path(version_dir) / (config.default_model_filename or cls.default_model_filename)
        if not path.exists() or (config.input and config.output):
            return config
        parameters = context_parameters(config)
        _configure_threads(parameters)
        function = load_signature(path, config.name, parameters.get("TF_GRAPH_TAG", "serve"),
                                  parameters.get("TF_SIGNATURE_DEF", "serving_default"))
        return auto_complete_from_signature(config, *signature_specs(function))

    def load(self) -> None:
        context = self.context
        parameters = context_parameters(context.config)
        _configure_threads(parameters)
        self._input_names = model_inputs(self.context.config)
        self._output_names = model_outputs(self.context.config)
        if context.config.platform == GRAPHDEF:
            self._load_graphdef()
        else:
            self._load_savedmodel(parameters)

    def unload(self) -> None:
        self.function = None

    def _load_savedmodel(self, parameters: Mapping[str, str]) -> None:
        context = self.context
        self.function = load_signature(context.model_file, context.name, parameters.get("TF_GRAPH_TAG", "serve"),
                                       parameters.get("TF_SIGNATURE_DEF", "serving_default"))
        input_specs, output_specs = signature_specs(self.function)
        _check_names(context.name, "input", self._input_names, input_specs)
        _check_names(context.name, "output", self._output_names, output_specs)
        self._input_types = {name: spec.dtype for name, spec in input_specs.items()}

    def _load_graphdef(self) -> None:
        context = self.context
        path = context.model_file
        if not path.is_file():
            raise internal(f"unable to find '{path}' for model '{context.name}'")
        graph_def = tf.compat.v1.GraphDef()
        try:
            graph_def.ParseFromString(path.read_bytes())
            wrapped = tf.compat.v1.wrap_function(lambda: tf.compat.v1.import_graph_def(graph_def, name=""), [])
        except Exception as exc:
            raise internal(f"failed to load model '{context.name}': {exc}") from exc
        graph = wrapped.graph
        nodes = {op.name for op in graph.get_operations()}
        for kind, names in (("input", self._input_names), ("output", self._output_names)):
            missing = [name for name in names if name not in nodes]
            if missing:
                raise invalid_argument(f"unable to load model '{context.name}', configuration expects {kind} "
                                       f"'{missing[0]}', which is not a node of the graph")
        feeds = [graph.get_tensor_by_name(f"{name}:0") for name in self._input_names]
        fetches = [graph.get_tensor_by_name(f"{name}:0") for name in self._output_names]
        self.function = wrapped.prune(feeds=feeds, fetches=fetches)
        self._input_types = {name: tensor.dtype for name, tensor in zip(self._input_names, feeds)}
        self._graph_outputs = list(self._output_names)

    def _feed_names(self) -> Sequence[str]:
        return self._input_names

    def _prepare_input(self, name: str, array: np.ndarray) -> np.ndarray:
        dtype = self._input_types[name]
        if dtype == tf.string:
            return array  # object arrays of bytes are what TensorFlow takes for tf.string
        if array.dtype == np.object_:
            raise invalid_argument(f"input '{name}' is BYTES, but model '{self.context.name}' takes {dtype.name}: "
                                   "tensorflow takes BYTES only for string tensors")
        expected = dtype.as_numpy_dtype
        return array if array.dtype == expected else array.astype(expected)

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.function is not None, "execute() before load()"
        if self.context.config.platform == GRAPHDEF:
            results = self.function(*(tf.constant(feeds[name]) for name in self._input_names))
            values = dict(zip(self._graph_outputs, results))
        else:
            values = self.function(**{name: tf.constant(array) for name, array in feeds.items()})
        return {name: value.numpy() for name, value in values.items()}


def _check_names(model: str, kind: str, declared: Sequence[str], specs: Mapping[str, Any]) -> None:
    for name in declared:
        if name not in specs:
            raise invalid_argument(
                f"unexpected inference {kind} '{name}' for model '{model}', allowed {kind}s are: " + ", ".join(specs)
            )


def _configure_threads(parameters: Mapping[str, str]) -> None:
    """TensorFlow's pools are process-wide and fixed once its runtime starts (see the module docstring)."""
    global _threads_set
    wanted = (_int_parameter(parameters, "TF_NUM_INTRA_THREADS", DEFAULT_INTRA_THREADS),
              _int_parameter(parameters, "TF_NUM_INTER_THREADS", 1))
    with _threads_lock:
        if _threads_set is None:
            try:
                tf.config.threading.set_intra_op_parallelism_threads(wanted[0])
                tf.config.threading.set_inter_op_parallelism_threads(wanted[1])
                _threads_set = wanted
            except RuntimeError:  # the runtime started before this backend (another user in the process)
                _threads_set = (tf.config.threading.get_intra_op_parallelism_threads(),
                                tf.config.threading.get_inter_op_parallelism_threads())
        if wanted != _threads_set and ("TF_NUM_INTRA_THREADS" in parameters or "TF_NUM_INTER_THREADS" in parameters):
            log.warning("TensorFlow's thread pools are already %s (intra, inter) in this process; %s asked for by "
                        "a model config is ignored", _threads_set, wanted)


def auto_complete_from_signature(config: mc.ModelConfig, inputs: Mapping[str, Any],
                                 outputs: Mapping[str, Any]) -> mc.ModelConfig:
    """Triton's tensorflow auto-complete over a SavedModel signature: batching when every tensor has a
    variable first dim, dims without the batch dim; sequence control and state tensors are left out."""
    completed = mc.ModelConfig()
    completed.CopyFrom(config)
    hidden_inputs, hidden_outputs = set(batcher_inputs(completed)), set(batcher_outputs(completed))
    shown_inputs = {k: v for k, v in inputs.items() if k not in hidden_inputs}
    shown_outputs = {k: v for k, v in outputs.items() if k not in hidden_outputs}

    def dims(spec) -> Optional[list[int]]:
        shape = spec.shape
        if shape.rank is None:
            return None
        return [WILDCARD_DIM if d is None else int(d) for d in shape.as_list()]

    every = [dims(spec) for spec in list(inputs.values()) + list(outputs.values())]
    can_batch = all(d and d[0] == WILDCARD_DIM for d in every)
    if can_batch and completed.max_batch_size == 0:
        completed.max_batch_size = AUTO_MAX_BATCH_SIZE
    if can_batch and completed.max_batch_size > 1:
        if not completed.HasField("dynamic_batching") and not completed.HasField("sequence_batching"):
            completed.dynamic_batching.SetInParent()
    elif not can_batch and completed.max_batch_size > 0:
        raise invalid_argument(
            f"autofill failed for model '{completed.name}': model does not support batching while non-zero "
            "max_batch_size is specified"
        )
    skip = 1 if completed.max_batch_size > 0 else 0
    for section, specs in ((completed.input, shown_inputs), (completed.output, shown_outputs)):
        if len(section):
            continue
        for name, spec in specs.items():
            io = section.add(name=name, data_type=_TF_TO_CONFIG.get(spec.dtype, mc.TYPE_INVALID))
            shape = dims(spec)
            io.dims.extend(shape[skip:] if shape is not None else [WILDCARD_DIM])
            if not io.dims:  # only the batch dim: the wire sees [batch, 1], the model [batch]
                io.dims.append(1)
                io.reshape.SetInParent()
    return completed
