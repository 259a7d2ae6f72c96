"""Control inputs (START/END/READY/CORRID) and implicit state for sequence models.

Both are tensors the server adds to a request on its way to the backend: the controls from the request's
sequence flags, the states from what the same sequence's previous step returned (or the initial state).
`add_sequence_inputs` adds them; `keep_states` takes the state outputs out of the response and keeps them
as the sequence's next state inputs.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.bounded import KEPT_STRING_MAX, remember
from asr_server.dtypes import config_to_wire, numpy_dtype
from asr_server.errors import invalid_argument
from asr_server.messages import InferRequest, InferResponse, SequenceId, Tensor

Control = mc.ModelSequenceBatching.Control


@dataclasses.dataclass(frozen=True)
class ControlInput:
    """One control the config declares (a control_input may declare several kinds)."""

    name: str
    kind: int  # Control.Kind
    datatype: str  # wire name
    false_true: tuple  # (false value, true value) for START/END/READY


def control_inputs(config: mc.ModelConfig) -> list[ControlInput]:
    controls = []
    for control_input in config.sequence_batching.control_input:
        for control in control_input.control:
            if control.int32_false_true:
                datatype, values = "INT32", tuple(control.int32_false_true)
            elif control.fp32_false_true:
                datatype, values = "FP32", tuple(control.fp32_false_true)
            elif control.bool_false_true:
                datatype, values = "BOOL", tuple(control.bool_false_true)
            else:
                datatype, values = config_to_wire(control.data_type) if control.data_type else "UINT64", ()
            controls.append(ControlInput(control_input.name, control.kind, datatype, values))
    return controls


def corrid_value(sequence_id: SequenceId, datatype: str):
    if datatype == "BYTES":
        return str(sequence_id).encode()
    if isinstance(sequence_id, str):
        # A string id given to a UINT64 CORRID arrives hashed (real Triton does the same).
        return int.from_bytes(hashlib.blake2b(sequence_id.encode(), digest_size=8).digest(), "little")
    return sequence_id


def control_tensors(controls: Sequence[ControlInput], request: InferRequest, batched: bool) -> list[Tensor]:
    """The control tensors of one request: (1, 1) when the model batches, (1,) otherwise."""
    flags = {
        Control.CONTROL_SEQUENCE_START: request.sequence.start,
        Control.CONTROL_SEQUENCE_END: request.sequence.end,
        Control.CONTROL_SEQUENCE_READY: True,
    }
    shape = (1, 1) if batched else (1,)
    tensors = []
    for control in controls:
        if control.kind == Control.CONTROL_SEQUENCE_CORRID:
            value = corrid_value(request.sequence.id, control.datatype)
        elif control.kind in flags:
            value = control.false_true[int(flags[control.kind])]
        else:
            continue
        if control.datatype == "BYTES":  # a client's string id: not kept beyond its request
            data = _read_only(np.full(shape, value, dtype=np.object_))
        else:
            data = _control_array(value, control.datatype, shape)
        tensors.append(Tensor(control.name, control.datatype, data))
    return tensors


class SharedControlTensors:
    """A model's control tensors, made once for each (sequence id, START, END) and shared by the requests that
    carry them: every chunk of a stream carries the same few values, and making the tensors anew cost each
    chunk more than the rest of its sequence bookkeeping. Tensors holding a client's string (a BYTES CORRID)
    are made per request, as `control_tensors` does, and never kept; so are the tensors of a long string id.
    Without a CORRID control the tensors do not depend on the id, which then stays out of the key."""

    LIMIT = 4096  # entries (about two per live stream); past it the table starts again

    def __init__(self, controls: Sequence[ControlInput], batched: bool) -> None:
        self.controls, self.batched = tuple(controls), batched
        self._shareable = not any(control.datatype == "BYTES" for control in self.controls)
        self._by_id = any(control.kind == Control.CONTROL_SEQUENCE_CORRID for control in self.controls)
        self._made: dict[tuple, tuple[Tensor, ...]] = {}

    def __call__(self, request: InferRequest) -> Sequence[Tensor]:
        sequence = request.sequence
        long_id = type(sequence.id) is str and len(sequence.id) > KEPT_STRING_MAX
        if not self._shareable or (self._by_id and long_id):
            return control_tensors(self.controls, request, self.batched)
        key = (type(sequence.id), sequence.id, sequence.start, sequence.end) if self._by_id else (
            sequence.start, sequence.end)
        tensors = self._made.get(key)
        if tensors is None:
            tensors = remember(self._made, key, tuple(control_tensors(self.controls, request, self.batched)),
                               self.LIMIT)
        return tensors


@functools.lru_cache(maxsize=4096)  # START/END/READY take two values each; a numeric CORRID one per sequence
def _control_array(value, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A control's value as a read-only array, made once and shared by every request that carries it (the
    same values arrive with every streamed chunk; read-only, like the inputs decoded from the wire)."""
    return _read_only(np.full(shape, value, dtype=numpy_dtype(datatype)))


def _read_only(data: np.ndarray) -> np.ndarray:
    """A read-only view of a read-only array: a model cannot turn it writeable again (setflags refuses a view
    whose base is read-only), so a shared control value cannot be changed for the requests that follow."""
    data.flags.writeable = False
    view = data.view()
    view.flags.writeable = False
    return view


@dataclasses.dataclass(frozen=True)
class StateSpec:
    """One implicit state: the model reads it as `input_name` and returns its next value as `output_name`."""

    input_name: str
    output_name: str
    datatype: str  # wire name
    dims: tuple[int, ...]  # without the batch dimension; -1 in the config starts empty (0 here)
    initial: Optional[np.ndarray]  # from initial_state's data_file; None: zeros


def state_specs(config: mc.ModelConfig, model_dir: Path) -> list[StateSpec]:
    specs = []
    for state in config.sequence_batching.state:
        datatype = config_to_wire(state.data_type)
        dims = tuple(max(0, int(d)) for d in state.dims)  # -1 starts empty
        initial = None
        for init in state.initial_state:
            if init.WhichOneof("state_data") == "data_file":
                folder = (model_dir / "initial_state").resolve()
                path = (folder / init.data_file).resolve()
                if folder not in path.parents:  # as Triton: a config (or a load's override) reads only here
                    raise invalid_argument(f"initial_state data_file '{init.data_file}' of state "
                                           f"'{state.input_name}' must be inside the model's 'initial_state/'")
                raw = path.read_bytes()
                init_dims = tuple(int(d) for d in init.dims) or dims
                initial = np.frombuffer(raw, dtype=numpy_dtype(datatype)).reshape(init_dims)
        specs.append(StateSpec(state.input_name, state.output_name, datatype, dims, initial))
    return specs


def initial_state(spec: StateSpec) -> np.ndarray:
    if spec.initial is not None:
        return spec.initial.copy()
    return np.zeros(spec.dims, dtype=numpy_dtype(spec.datatype))


def add_sequence_inputs(request: InferRequest, states: dict[str, np.ndarray], controls: SharedControlTensors,
                        specs: Sequence[StateSpec], batched: bool) -> None:
    """Append the controls and the sequence's state inputs to `request`. `states` (input name -> array
    without the batch dimension) is the sequence's; a START request (re)starts it from the initial state."""
    request.inputs = [*request.inputs, *controls(request)]
    for spec in specs:
        if request.sequence.start or spec.input_name not in states:
            states[spec.input_name] = initial_state(spec)
        value = states[spec.input_name]
        request.inputs.append(Tensor(spec.input_name, spec.datatype, value[None] if batched else value))


def keep_states(result: Any, states: dict[str, np.ndarray], specs: Sequence[StateSpec], batched: bool) -> Any:
    """Move the state outputs of a response into `states` (the sequence's next inputs); the client never sees
    them. Errors and empty results pass through untouched (the state then stays as it was)."""
    if not isinstance(result, InferResponse):
        return result
    by_output = {spec.output_name: spec for spec in specs}
    kept = []
    for tensor in result.outputs:
        spec = by_output.get(tensor.name)
        if spec is None:
            kept.append(tensor)
        else:
            states[spec.input_name] = tensor.data[0] if batched else tensor.data
    result.outputs = kept
    return result
