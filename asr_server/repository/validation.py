"""Triton's model-config validation rules, with Triton's wording (messages end in "for <model>").

`validate_config` is the one entry point; each `_check_*` below covers one section of the config and
raises `ServerError(INVALID_ARGUMENT)` on the first problem it finds.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar, Optional, Sequence, Union

from tritonclient.grpc import model_config_pb2 as mc

from asr_server.backends.base import PLATFORM_TO_BACKEND
from asr_server.dtypes import config_to_wire
from asr_server.errors import invalid_argument

ENSEMBLE_PLATFORM = "ensemble"
WILDCARD_DIM = -1
# Our own model parameter (Triton has none): live sequences a sequence-batched model holds before it refuses
# new ones with RESOURCE_EXHAUSTED; Triton backlogs sequences without a bound.
MAX_SEQUENCES_PARAMETER = "max_sequences"
# A model's bound on every -1 dimension of its inputs (e.g. the frames of 60 s of audio), checked by the core
# before any work: a -1 dimension alone would let one request of a few MiB cost the memory of a quadratic
# attention over it. Triton has no such field; it ignores the parameter, and this server enforces it.
MAX_INPUT_DIM_PARAMETER = "max_input_dim"


def max_input_dim(config: mc.ModelConfig) -> int:
    """The config's bound on variable input dimensions (0: none); validated at load."""
    if MAX_INPUT_DIM_PARAMETER not in config.parameters:
        return 0
    return int(config.parameters[MAX_INPUT_DIM_PARAMETER].string_value)
_Control = mc.ModelSequenceBatching.Control
_BOOLEAN_CONTROLS = (_Control.CONTROL_SEQUENCE_START, _Control.CONTROL_SEQUENCE_END, _Control.CONTROL_SEQUENCE_READY)
_CORRID_TYPES = (mc.TYPE_UINT64, mc.TYPE_INT64, mc.TYPE_UINT32, mc.TYPE_INT32, mc.TYPE_STRING)


def validate_config(config: mc.ModelConfig, *, gpus: Optional[Sequence[int]] = None) -> None:
    """Raise ServerError(INVALID_ARGUMENT) unless `config` is a complete, consistent model config.

    gpus: the device ids this server may use; None skips the checks that depend on the machine.
    """
    name = config.name
    if not name:
        raise invalid_argument("model configuration must specify 'name'")
    if not config.platform and not config.backend:
        raise invalid_argument(f"must specify 'platform' or 'backend' for '{name}'")
    if config.platform and config.platform != ENSEMBLE_PLATFORM and config.platform not in PLATFORM_TO_BACKEND:
        raise invalid_argument(f"unexpected platform type '{config.platform}' for {name}")
    if config.max_batch_size < 0:
        raise invalid_argument(f"'max_batch_size' must be non-negative value for {name}")
    if MAX_INPUT_DIM_PARAMETER in config.parameters:
        text = config.parameters[MAX_INPUT_DIM_PARAMETER].string_value
        if not text.isdigit() or int(text) < 1:
            raise invalid_argument(f"parameter '{MAX_INPUT_DIM_PARAMETER}' must be a positive integer, got "
                                   f"'{text}' for {name}")
    if not config.HasField("version_policy"):
        raise invalid_argument(f"must specify 'version policy' for {name}")
    _check_io(config)
    _check_dynamic_batching(config)
    _check_sequence_batching(config)
    if config.HasField("ensemble_scheduling") or config.platform == ENSEMBLE_PLATFORM:
        _check_ensemble(config)
    else:
        _check_instance_groups(config, gpus)


def _check_io(config: mc.ModelConfig) -> None:
    for kind, tensors in (("input", config.input), ("output", config.output)):
        seen: set[str] = set()
        for io in tensors:
            _check_io_shape(io, kind, config)
            if io.name in seen:
                raise invalid_argument(f"model {kind} '{io.name}' is specified more than once for {config.name}")
            seen.add(io.name)


def _check_io_shape(io: Union[mc.ModelInput, mc.ModelOutput], kind: str, config: mc.ModelConfig) -> None:
    if not io.name:
        raise invalid_argument(f"model {kind} must specify 'name' for {config.name}")
    prefix = f"model {kind} '{io.name}'"
    suffix = f" for {config.name}"
    if io.data_type == mc.TYPE_INVALID or io.data_type not in mc.DataType.values():
        raise invalid_argument(f"{prefix} must specify 'data_type'{suffix}")
    if not io.dims:
        raise invalid_argument(f"{prefix} must specify 'dims'{suffix}")
    if any(dim < 1 and dim != WILDCARD_DIM for dim in io.dims):
        raise invalid_argument(
            f"{prefix} dimension must be integer >= 1, or -1 to indicate a variable-size dimension{suffix}"
        )
    if not io.HasField("reshape"):
        return
    shape = io.reshape.shape
    if not shape and config.max_batch_size == 0:
        raise invalid_argument(f"{prefix} cannot have empty reshape for non-batching model{suffix}")
    if any(dim < 1 and dim != WILDCARD_DIM for dim in shape):
        raise invalid_argument(
            f"{prefix} reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension"
            f"{suffix}"
        )
    # Fixed stretches between variable-size dims must hold the same number of elements on both sides,
    # e.g. [2, 4, -1, 6] -> [8, -1, 1, 6]; an empty reshape (a scalar per batch item) pairs with dims [1].
    if not shape:
        if list(io.dims) != [1]:
            raise invalid_argument(f"{prefix} has different size for dims and reshape{suffix}")
        return
    dims_trunks, shape_trunks = _trunk_sizes(io.dims), _trunk_sizes(shape)
    if len(dims_trunks) != len(shape_trunks):
        raise invalid_argument(
            f"{prefix} has different number of variable-size dimensions for dims and reshape{suffix}"
        )
    if dims_trunks != shape_trunks:
        raise invalid_argument(f"{prefix} has different size for dims and reshape{suffix}")


def _trunk_sizes(dims: Sequence[int]) -> list[int]:
    """Element counts of the runs of fixed dims separated by variable-size (-1) dims."""
    trunks, current = [], []
    for dim in dims:
        if dim == WILDCARD_DIM:
            trunks.append(math.prod(current))
            current = []
        else:
            current.append(dim)
    trunks.append(math.prod(current))
    return trunks


def _check_dynamic_batching(config: mc.ModelConfig) -> None:
    if not config.HasField("dynamic_batching"):
        return
    batcher, name = config.dynamic_batching, config.name
    for size in batcher.preferred_batch_size:
        if size <= 0:
            raise invalid_argument(f"dynamic batching preferred size must be positive for {name}")
        if size > config.max_batch_size:
            raise invalid_argument(f"dynamic batching preferred size must be <= max batch size for {name}")
    levels = batcher.priority_levels
    if levels:
        if not 1 <= batcher.default_priority_level <= levels:
            raise invalid_argument(f"default priority level must be in range [1, {levels}] for {name}")
        if any(not 1 <= level <= levels for level in batcher.priority_queue_policy):
            raise invalid_argument(
                f"priority queue policy must have priority level in range [1, {levels}] for {name}"
            )
    if batcher.preserve_ordering:
        if levels > 1:
            raise invalid_argument(f"Only one priority level is allowed when 'preserve_ordering' is true for {name}")
        policies = [batcher.default_queue_policy, *batcher.priority_queue_policy.values()]
        if any(p.default_timeout_microseconds and p.timeout_action == mc.ModelQueuePolicy.DELAY for p in policies):
            raise invalid_argument(
                f"Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for {name}"
            )


def _check_sequence_batching(config: mc.ModelConfig) -> None:
    # Sequence batching is allowed with max_batch_size 0: every sequence then runs in a batch of one.
    if not config.HasField("sequence_batching"):
        return
    batcher, name = config.sequence_batching, config.name
    _check_control_inputs(batcher, name)
    if MAX_SEQUENCES_PARAMETER in config.parameters:
        text = config.parameters[MAX_SEQUENCES_PARAMETER].string_value
        if not text.isdigit() or int(text) < 1:
            raise invalid_argument(
                f"parameter '{MAX_SEQUENCES_PARAMETER}' must be a positive integer, got '{text}' for {name}"
            )
    if batcher.HasField("oldest"):
        for size in batcher.oldest.preferred_batch_size:
            if size <= 0:
                raise invalid_argument(f"sequence batching preferred batch size must be positive for {name}")
            if size > config.max_batch_size:
                raise invalid_argument(
                    f"sequence batching preferred batch size must be <= max batch size for {name}"
                )
    if batcher.HasField("direct") and not 0.0 <= batcher.direct.minimum_slot_utilization <= 1.0:
        raise invalid_argument(f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {name}")
    for state in batcher.state:
        for field in ("input_name", "output_name"):
            if not getattr(state, field):
                raise invalid_argument(f"sequence batching state must specify '{field}' for {name}")
        if state.data_type == mc.TYPE_INVALID:
            raise invalid_argument(f"sequence batching state '{state.input_name}' must specify 'data_type' for {name}")
        if not state.dims or any(dim < 1 and dim != WILDCARD_DIM for dim in state.dims):
            raise invalid_argument(
                f"sequence batching state '{state.input_name}' must specify 'dims' of integers >= 1 or -1 for {name}"
            )


def _check_control_inputs(batcher: mc.ModelSequenceBatching, name: str) -> None:
    seen_tensors: set[str] = set()
    seen_kinds: set[int] = set()
    for control_input in batcher.control_input:
        if not control_input.name:
            raise invalid_argument(f"sequence batching control tensor must have a name for {name}")
        if control_input.name in seen_tensors:
            raise invalid_argument(
                f"sequence batching control tensor '{control_input.name}' is specified for multiple control kinds "
                f"for {name}"
            )
        seen_tensors.add(control_input.name)
        for control in control_input.control:
            kind = _Control.Kind.Name(control.kind)
            if control.kind in seen_kinds:
                raise invalid_argument(f"sequence batching specifies multiple {kind} tensors for {name}")
            seen_kinds.add(control.kind)
            if control.kind in _BOOLEAN_CONTROLS:
                _check_boolean_control(control, kind, name)
            else:
                _check_corrid_control(control, kind, name)


def _check_boolean_control(control: mc.ModelSequenceBatching.Control, kind: str, name: str) -> None:
    given = [
        field for field in ("int32_false_true", "fp32_false_true", "bool_false_true") if len(getattr(control, field))
    ]
    if not given:
        raise invalid_argument(
            f"sequence batching must specify either 'int32_false_true', 'fp32_false_true' or 'bool_false_true' "
            f"for {kind} for {name}"
        )
    if len(given) > 1:
        raise invalid_argument(
            f"sequence batching specifies both '{given[0]}' and '{given[1]}' for {kind} for {name}"
        )
    if len(getattr(control, given[0])) != 2:
        raise invalid_argument(
            f"sequence batching control '{given[0]}' must have exactly 2 entries for {kind} for {name}"
        )


def _check_corrid_control(control: mc.ModelSequenceBatching.Control, kind: str, name: str) -> None:
    if control.int32_false_true or control.fp32_false_true or control.bool_false_true:
        raise invalid_argument(
            f"sequence batching must not specify either 'int32_false_true', 'fp32_false_true' or "
            f"'bool_false_true' for {kind} for {name}"
        )
    if control.data_type not in _CORRID_TYPES:
        raise invalid_argument(
            f"unexpected data type for control {kind} for {name}. Allowed data types are TYPE_UINT64, "
            "TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
        )


def _check_instance_groups(config: mc.ModelConfig, gpus: Optional[Sequence[int]]) -> None:
    name = config.name
    if not config.instance_group:
        raise invalid_argument(f"must specify one or more 'instance group's for {name}")
    for group in config.instance_group:
        where = f"instance group {group.name} of model {name}"
        if group.kind == mc.ModelInstanceGroup.KIND_AUTO:
            raise invalid_argument(f"{where} has unexpected kind KIND_AUTO")
        if group.kind in (mc.ModelInstanceGroup.KIND_CPU, mc.ModelInstanceGroup.KIND_MODEL) and group.gpus:
            kind = mc.ModelInstanceGroup.Kind.Name(group.kind)
            raise invalid_argument(f"{where} has kind {kind} but specifies one or more GPUs")
        if group.kind == mc.ModelInstanceGroup.KIND_GPU and gpus is not None:
            if not group.gpus:
                state = "no GPUs are available" if not gpus else "specifies no GPUs"
                raise invalid_argument(f"{where} has kind KIND_GPU but {state}")
            unknown = [gpu for gpu in group.gpus if gpu not in gpus]
            if unknown:
                available = ", ".join(str(gpu) for gpu in gpus)
                raise invalid_argument(
                    f"{where} specifies invalid or unsupported gpu id {unknown[0]}. GPUs available are: {available}"
                )
        if group.count < 1:
            raise invalid_argument(f"{where} must specify a 'count' of at least 1")


def _check_ensemble(config: mc.ModelConfig) -> None:
    name = config.name
    if config.platform != ENSEMBLE_PLATFORM:
        raise invalid_argument(f"ensemble scheduling cannot be set for model '{name}' whose platform is not ensemble")
    if not config.HasField("ensemble_scheduling"):
        raise invalid_argument(f"ensemble scheduling must be set for ensemble {name} whose platform is ensemble")
    if config.instance_group:
        raise invalid_argument(f"instance group should not be specified for ensemble '{name}'")
    if config.HasField("optimization"):
        raise invalid_argument(f"optimization should not be specified for ensemble '{name}'")
    if config.model_warmup:
        raise invalid_argument(f"model_warmup can not be specified for ensemble '{name}'")
    steps = config.ensemble_scheduling.step
    if not steps:
        raise invalid_argument(f"must specify 'step' for ensemble '{name}'")
    _check_ensemble_data_flow(config)


def _check_ensemble_data_flow(config: mc.ModelConfig) -> None:
    """Every step names a model and maps tensors; each ensemble tensor is written once; following the
    steps from the ensemble inputs writes every output and uses every intermediate tensor."""
    name = config.name
    writer_step: dict[str, int] = {}  # ensemble tensor -> step that writes it
    readers: dict[str, set[int]] = {}  # ensemble tensor -> steps that read it
    for index, step in enumerate(config.ensemble_scheduling.step):
        for field in ("model_name", "input_map", "output_map"):
            if not getattr(step, field):
                raise invalid_argument(f"must specify '{field}' in step {index} of ensemble '{name}'")
        for tensor in step.output_map.values():
            if tensor in writer_step:
                raise invalid_argument(
                    f"ensemble tensor '{tensor}' can appear in an output map only once for ensemble '{name}' "
                    f"step {index}"
                )
            writer_step[tensor] = index
        for tensor in step.input_map.values():
            readers.setdefault(tensor, set()).add(index)
    inputs = [io.name for io in config.input]
    for tensor in inputs:
        if tensor not in readers:
            raise invalid_argument(f"ensemble input '{tensor}' for ensemble '{name}' is not used")
    ready = _ready_tensors(config, set(inputs))
    outputs = [io.name for io in config.output]
    for tensor in outputs:
        if tensor not in writer_step and tensor not in readers:
            raise invalid_argument(f"ensemble output '{tensor}' for ensemble '{name}' is not used")
        if tensor not in ready:
            raise invalid_argument(f"output '{tensor}' for ensemble '{name}' is not written")
    for tensor in sorted(set(writer_step) | set(readers)):
        if tensor in outputs:
            continue
        if tensor not in ready or tensor not in readers:
            raise invalid_argument(f"ensemble tensor '{tensor}' is unused in ensemble '{name}'")


def _ready_tensors(config: mc.ModelConfig, ready: set[str]) -> set[str]:
    """Tensors that can be computed from `ready` by running steps whose inputs are all available."""
    pending = list(config.ensemble_scheduling.step)
    progressed = True
    while progressed:
        progressed = False
        for step in list(pending):
            if set(step.input_map.values()) <= ready:
                ready |= set(step.output_map.values())
                pending.remove(step)
                progressed = True
    return ready


@dataclasses.dataclass(frozen=True)
class RequestRules:
    """What a model's config says about its requests, read out of the protobuf once per loaded version rather
    than on every request (a streamed chunk is checked against the same config hundreds of times a second)."""

    model: str
    inputs: dict  # name -> (wire datatype, dims tuple)
    required: tuple  # names of the non-optional inputs, in config order
    max_batch_size: int
    max_input_dim: int  # 0: no cap
    outputs: frozenset  # declared output names (empty: the model declares none)
    # The input and output signatures (names, datatypes, shapes) that passed validation: a stream's chunks
    # repeat one signature, which need not be checked again. Bounded by `ACCEPTED_LIMIT`.
    accepted: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)  # signature -> True

    ACCEPTED_LIMIT: ClassVar[int] = 1024

    @classmethod
    def of(cls, config: mc.ModelConfig) -> "RequestRules":
        return cls(config.name, {t.name: (config_to_wire(t.data_type), tuple(int(d) for d in t.dims))
                                 for t in config.input},
                   tuple(t.name for t in config.input if not t.optional), config.max_batch_size,
                   max_input_dim(config), frozenset(o.name for o in config.output))
