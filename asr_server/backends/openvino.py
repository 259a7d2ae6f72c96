"""The openvino backend (Triton's `openvino`): OpenVINO IR (`model.xml` + `model.bin`) and anything else
OpenVINO reads (`default_model_filename: "model.onnx"`), on the CPU.

openvino is optional (the `openvino` extra); it is imported when this module is.

Config parameters are those of Triton's openvino backend, with its value checks:
  INFERENCE_NUM_THREADS, COMPILATION_NUM_THREADS, NUM_STREAMS (AUTO | NUMA | n), PERFORMANCE_HINT
  (LATENCY | THROUGHPUT | CUMULATIVE_THROUGHPUT), HINT_BF16 (YES), TARGET_DEVICE (default CPU),
  RESHAPE_IO_LAYERS (YES: the model's inputs take the config's dims), SKIP_OV_DYNAMIC_BATCHSIZE and
  ENABLE_BATCH_PADDING (see below). Unknown keys are ignored, as Triton's backend ignores them. They are read
  and checked in openvino_options.py.

Where this differs from Triton's openvino backend, and why:
- Batching: Triton's backend compiles the model at a static batch of max_batch_size and refuses smaller
  batches unless ENABLE_BATCH_PADDING pads them. Here the batch dim is made dynamic, so the dynamic batcher's
  batches of any size run as they are; SKIP_OV_DYNAMIC_BATCHSIZE=YES restores Triton's static batch (for
  models whose topology cannot take a dynamic batch), with ENABLE_BATCH_PADDING as in Triton.
- Threads: each instance gets INFERENCE_NUM_THREADS threads (default: a quarter of the CPUs, at most 4, as
  the onnxruntime backend) and one stream, since several instances of several models share the CPUs;
  Triton's default is every core per instance.
- Implicit state and sequence controls travel as ordinary model inputs/outputs (the sequence batcher feeds
  and collects them), the contract of the onnxruntime backend; OpenVINO's own stateful models
  (ReadValue/Assign) are not used, since their state would live in one infer request, not per sequence.
"""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np

# `import openvino` sends a usage event to Google Analytics from a forked process (openvino-telemetry, on
# unless opted out). A server must neither phone home nor fork while gRPC threads run, so the telemetry
# package is hidden before the first import: openvino then falls back to its own no-op stub.
if "openvino" not in sys.modules:
    sys.modules.setdefault("openvino_telemetry", None)  # type: ignore[arg-type]
import openvino as ov  # noqa: E402
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.backends.base import batcher_inputs, batcher_outputs, context_parameters, model_inputs, model_outputs
from asr_server.backends.onnxruntime import AUTO_MAX_BATCH_SIZE, TensorBatchBackend, _as_str_array
from asr_server.backends.openvino_options import OpenVINOOptions
from asr_server.backends.reshape import WILDCARD_DIM
from asr_server.errors import internal, invalid_argument

log = logging.getLogger(__name__)

_OV_TO_CONFIG = {
    ov.Type.boolean: mc.TYPE_BOOL,
    ov.Type.u8: mc.TYPE_UINT8,
    ov.Type.u16: mc.TYPE_UINT16,
    ov.Type.u32: mc.TYPE_UINT32,
    ov.Type.u64: mc.TYPE_UINT64,
    ov.Type.i8: mc.TYPE_INT8,
    ov.Type.i16: mc.TYPE_INT16,
    ov.Type.i32: mc.TYPE_INT32,
    ov.Type.i64: mc.TYPE_INT64,
    ov.Type.f16: mc.TYPE_FP16,
    ov.Type.bf16: mc.TYPE_BF16,
    ov.Type.f32: mc.TYPE_FP32,
    ov.Type.f64: mc.TYPE_FP64,
    ov.Type.string: mc.TYPE_STRING,
}
_CONFIG_TO_OV = {config: element for element, config in _OV_TO_CONFIG.items()}


@functools.lru_cache(maxsize=1)
def _core() -> ov.Core:
    """One OpenVINO Core per process (it holds the device plugins; compiled models are per instance)."""
    return ov.Core()


def read_model(path: Path, model_name: str) -> ov.Model:
    if not path.exists():
        # Triton: UNAVAILABLE "unable to find '<path>' for model '<name>'"; a load failure is reported the same.
        raise internal(f"unable to find '{path}' for model '{model_name}'")
    try:
        return _core().read_model(str(path))
    except Exception as exc:  # OpenVINO's RuntimeError carries the parser's reason
        raise internal(f"failed to load model '{model_name}': {exc}") from exc


class OpenVINOBackend(TensorBatchBackend):
    """One compiled model and one infer request per model instance."""

    default_model_filename = "model.xml"

    compiled: Optional[ov.CompiledModel] = None

    @classmethod
    def auto_complete_config(cls, config: mc.ModelConfig, version_dir: Path) -> mc.ModelConfig:
        path = Path(version_dir) / (config.default_model_filename or cls.default_model_filename)
        if not path.exists() or (config.input and config.output):
            return config
        return auto_complete_from_openvino(config, read_model(path, config.name))

    def load(self) -> None:
        context = self.context
        if context.instance_kind not in ("KIND_CPU", "KIND_AUTO"):
            raise invalid_argument(
                f"unable to load model '{context.name}', Triton OpenVINO backend supports only Kind CPU and AUTO"
            )
        self._options = OpenVINOOptions.from_parameters(context_parameters(context.config))
        model = read_model(context.model_file, context.name)
        self._output_names = self._check_config_against_model(model)
        declared = model_inputs(context.config)
        # The name clients use for each input: the declared one where a port has several names.
        self._input_names = [next((d for d in declared if d in port.get_names()), port.get_any_name())
                             for port in model.inputs]
        model = self._shape_model(model)
        model = self._set_config_types(model)
        try:
            self.compiled = _core().compile_model(model, self._options.device, self._options.properties)
        except Exception as exc:
            raise internal(f"failed to load model '{context.name}': {exc}") from exc
        self._request = self.compiled.create_infer_request()
        # Keyed by every name of a port: a compiled port's "any name" may be another of its names.
        self._input_types = {name: port.get_element_type() for port in self.compiled.inputs for name in port.get_names()}

    def unload(self) -> None:
        self._request = None
        self.compiled = None

    # -- model preparation --------------------------------------------------------------------------

    def _check_config_against_model(self, model: ov.Model) -> list[str]:
        """Triton's checks: the model takes exactly the declared inputs and has every declared output.
        Returns the name each model output is reported under (a declared name where a port has several)."""
        name = self.context.name
        declared = model_inputs(self.context.config)
        port_names = [port.get_any_name() for port in model.inputs]
        if len(port_names) != len(declared):
            raise invalid_argument(
                f"unable to load model '{name}', configuration expects {len(declared)} inputs, "
                f"model provides {len(port_names)}"
            )
        all_input_names = set().union(*(port.get_names() for port in model.inputs))
        for input_name in declared:
            if input_name not in all_input_names:
                raise invalid_argument(
                    f"unexpected inference input '{input_name}' for model '{name}', allowed inputs are: "
                    + ", ".join(port_names)
                )
        wanted = model_outputs(self.context.config)
        output_names = []
        for port in model.outputs:
            names = port.get_names()
            output_names.append(next((w for w in wanted if w in names), port.get_any_name()))
        all_output_names = set().union(*(port.get_names() for port in model.outputs))
        for output_name in wanted:
            if output_name not in all_output_names:
                raise invalid_argument(
                    f"unexpected inference output '{output_name}' for model '{name}', allowed outputs are: "
                    + ", ".join(port.get_any_name() for port in model.outputs)
                )
        return output_names

    def _shape_model(self, model: ov.Model) -> ov.Model:
        """Give the inputs the batch dim the scheduler needs (dynamic, or Triton's static max_batch_size)
        and, with RESHAPE_IO_LAYERS, the config's dims."""
        config = self.context.config
        batch = config.max_batch_size
        dims_of = {io.name: list(io.reshape.shape if io.HasField("reshape") else io.dims) for io in config.input}
        shapes = {}
        for port in model.inputs:
            shape = port.get_partial_shape()
            config_name = next((n for n in port.get_names() if n in dims_of), None)
            if self._options.reshape_io_layers and config_name is not None:
                body = [ov.Dimension() if d == WILDCARD_DIM else ov.Dimension(d) for d in dims_of[config_name]]
                shape = ov.PartialShape(([ov.Dimension()] if batch else []) + body)
            if batch > 0 and shape.rank.is_static and len(shape) > 0:
                shape = ov.PartialShape(list(shape))
                shape[0] = ov.Dimension(batch) if self._options.static_batch else ov.Dimension()
            shapes[port.get_any_name()] = shape
        if all(shapes[p.get_any_name()] == p.get_partial_shape() for p in model.inputs):
            return model
        try:
            model.reshape(shapes)
        except Exception as exc:
            hint = "" if self._options.static_batch else " (SKIP_OV_DYNAMIC_BATCHSIZE=YES compiles a static batch)"
            raise internal(f"failed to load model '{self.context.name}': reshaping inputs failed{hint}: {exc}") from exc
        return model

    def _set_config_types(self, model: ov.Model) -> ov.Model:
        """As Triton's backend does: the tensors clients send and receive have the config's data types;
        OpenVINO converts to and from the model's own precision (e.g. FP32 config over an FP16 IR)."""
        config = self.context.config
        processor = ov.preprocess.PrePostProcessor(model)
        changed = False
        for section, ports, kind in ((config.input, model.inputs, "input"), (config.output, model.outputs, "output")):
            port_names = set().union(*(port.get_names() for port in ports)) if ports else set()
            for io in section:
                element = _CONFIG_TO_OV.get(io.data_type)
                if element is None:
                    raise internal(
                        f"unsupported datatype {mc.DataType.Name(io.data_type)} for {kind} '{io.name}' "
                        f"for model '{self.context.name}'"
                    )
                port = next(p for p in ports if io.name in p.get_names()) if io.name in port_names else None
                if port is None or port.get_element_type() == element:
                    continue
                step = processor.input(io.name) if kind == "input" else processor.output(io.name)
                step.tensor().set_element_type(element)
                changed = True
        return processor.build() if changed else model

    # -- execution ----------------------------------------------------------------------------------

    def _feed_names(self) -> Sequence[str]:
        return self._input_names

    def _prepare_input(self, name: str, array: np.ndarray) -> np.ndarray:
        element = self._input_types[name]
        if element == ov.Type.string:
            return _as_str_array(array).astype(np.str_)
        if array.dtype == np.object_:
            raise invalid_argument(
                f"input '{name}' is BYTES, but model '{self.context.name}' takes {element.get_type_name()}: "
                "openvino takes BYTES only for string tensors"
            )
        expected = element.to_dtype()
        return np.ascontiguousarray(array, dtype=expected)

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self._request is not None, "execute() before load()"
        total = next(iter(feeds.values())).shape[0] if self._batching and feeds else 0
        padding = self._padding(total)
        if padding:
            feeds = {name: np.concatenate([array, np.zeros((padding,) + array.shape[1:], array.dtype)])
                     for name, array in feeds.items()}
        # share_inputs: the arrays are read in place; outputs are copied because the request is reused.
        results = self._request.infer(feeds, share_inputs=True, share_outputs=False).to_tuple()
        outputs = dict(zip(self._output_names, results))
        if self._batching:
            self._check_output_batch(outputs, total + padding)
        if padding:
            outputs = {name: array[:total] for name, array in outputs.items()}
        return outputs

    def _check_output_batch(self, outputs: Mapping[str, np.ndarray], batch: int) -> None:
        """OpenVINO 2026.4's CPU plugin with INFERENCE_NUM_THREADS=1 swallows shape-inference errors at run
        time and returns empty outputs (a Reshape or MatMul given a bad row length yields shape (0, ...)
        instead of raising, where two threads raise). An output whose batch dim is not the batch's is
        such a failure: refuse it rather than answer with an empty tensor."""
        for name, array in outputs.items():
            if array.ndim == 0 or array.shape[0] != batch:
                raise internal(
                    f"model '{self.context.name}' returned output '{name}' of shape {list(array.shape)} for a "
                    f"batch of {batch}: the run failed inside OpenVINO"
                )

    def _padding(self, total: int) -> int:
        """Rows to add so that a static-batch model (SKIP_OV_DYNAMIC_BATCHSIZE) gets max_batch_size rows."""
        batch = self.context.config.max_batch_size
        if not (self._batching and self._options.static_batch) or total == batch:
            return 0
        if not self._options.batch_padding:
            raise internal(
                f"expected requests with batch size '{batch}', got '{total}'... this error can be avoided by "
                "setting 'ENABLE_BATCH_PADDING' parameter in model configuration to 'YES' at a performance cost."
            )
        return batch - total


# ---------------------------------------------------------------------------------------------------
# Auto-complete


def auto_complete_from_openvino(config: mc.ModelConfig, model: ov.Model) -> mc.ModelConfig:
    """Fill max_batch_size, dynamic_batching, inputs and outputs with the rules of Triton's openvino backend.

    A model batches when every input and output has a layout with a batch dim (`N`), as OpenVINO records it
    (e.g. `ov.layout_helpers.set_layout(port, ov.Layout("N..."))` before saving the IR); then an unset
    max_batch_size becomes the default (4) and dynamic_batching is added when no batcher is configured.
    A model without layouts (plain ONNX) does not batch: its dims, batch included, are filled as they are.
    Unlike Triton, sequence control and implicit-state tensors are not listed as inputs/outputs: the
    sequence batcher feeds them, as with the onnxruntime backend.
    """
    completed = mc.ModelConfig()
    completed.CopyFrom(config)
    not_inputs, not_outputs = set(batcher_inputs(completed)), set(batcher_outputs(completed))
    ports = list(model.inputs) + list(model.outputs)
    can_batch = all(ov.layout_helpers.has_batch(ov.layout_helpers.get_layout(port)) for port in ports)
    if can_batch and completed.max_batch_size == 0:
        completed.max_batch_size = AUTO_MAX_BATCH_SIZE
        log.warning(
            "autofilled max_batch_size to %d for model '%s' since batching is supported but no max_batch_size "
            "is specified in model configuration. Must specify max_batch_size to utilize autofill with a "
            "larger max batch size", AUTO_MAX_BATCH_SIZE, completed.name,
        )
    if can_batch and completed.max_batch_size > 1:
        if not completed.HasField("dynamic_batching") and not completed.HasField("sequence_batching"):
            completed.dynamic_batching.SetInParent()
    elif not can_batch and completed.max_batch_size != 0:
        log.warning("model layout for model %s does not support batching while non-zero max_batch_size is "
                    "specified", completed.name)
    skip = 1 if completed.max_batch_size > 0 else 0
    for section, model_ports, hidden in ((completed.input, model.inputs, not_inputs),
                                         (completed.output, model.outputs, not_outputs)):
        if len(section):
            continue
        for port in model_ports:
            name = port.get_any_name()
            if hidden & port.get_names():
                continue
            shape = port.get_partial_shape()
            io = section.add(name=name, data_type=_OV_TO_CONFIG.get(port.get_element_type(), mc.TYPE_INVALID))
            if shape.rank.is_static:
                io.dims.extend(d.get_length() if d.is_static else WILDCARD_DIM for d in list(shape)[skip:])
            else:
                io.dims.append(WILDCARD_DIM)
    return completed


def save_ir(model: ov.Model, path: Path, batch_layout: bool = True, compress_to_fp16: bool = False) -> Path:
    """Write `model` as OpenVINO IR (`path` = .../model.xml, weights beside it in model.bin).

    batch_layout: mark every input and output "N..." so that auto-complete sees a batching model (the
    layout is the only batching hint Triton's rule reads). compress_to_fp16 keeps FP32 weights (the default)
    so that transcripts equal onnxruntime's."""
    if batch_layout:
        for port in list(model.inputs) + list(model.outputs):
            ov.layout_helpers.set_layout(port, ov.Layout("N..."))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(path), compress_to_fp16=compress_to_fp16)
    return path


__all__ = ["OpenVINOBackend", "OpenVINOOptions", "auto_complete_from_openvino", "read_model", "save_ir"]
