"""The `python` backend: hosts Triton python_backend models (`TritonPythonModel` in model.py) unchanged.

Triton runs every instance in its own stub process; here every instance imports model.py as a fresh
module (own globals, own copies of helper modules from the model folder) inside the server process.
The model talks to us through `triton_python_backend_utils` (registered under that name in sys.modules);
this module converts between that API's objects and the server's types and carries BLS calls to the
`ModelContext.infer_sync` / `infer_async` hooks of the server that loaded the instance.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import itertools
import json
import logging
import re
import sys
import threading
import types as pytypes
from pathlib import Path
from typing import Any, Coroutine, Optional, Sequence, Union

import numpy as np
from google.protobuf import descriptor, json_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server import messages
from asr_server.backends import triton_python_backend_utils as pb_utils
from asr_server.backends.base import Backend, ExecuteResult, ModelContext
from asr_server.backends.reshape import to_client_shape, to_model_shape
from asr_server.dtypes import wire_name
from asr_server.errors import ErrorCode, ServerError, internal, invalid_argument
from asr_server.messages import InferRequest, InferResponse, ResponseSink

log = logging.getLogger(__name__)

PB_UTILS_MODULE_NAME = "triton_python_backend_utils"
MODEL_CLASS_NAME = "TritonPythonModel"
DEFAULT_MODEL_FILENAME = "model.py"

sys.modules[PB_UTILS_MODULE_NAME] = pb_utils

# --------------------------------------------------------------------------------------------------
# Error codes: TritonError <-> ErrorCode, one table each way.

_SERVER_CODE_BY_TRITON_CODE = {
    pb_utils.TritonError.UNKNOWN: ErrorCode.INTERNAL,
    pb_utils.TritonError.INTERNAL: ErrorCode.INTERNAL,
    pb_utils.TritonError.NOT_FOUND: ErrorCode.NOT_FOUND,
    pb_utils.TritonError.INVALID_ARG: ErrorCode.INVALID_ARGUMENT,
    pb_utils.TritonError.UNAVAILABLE: ErrorCode.UNAVAILABLE,
    pb_utils.TritonError.UNSUPPORTED: ErrorCode.UNIMPLEMENTED,
    pb_utils.TritonError.ALREADY_EXISTS: ErrorCode.ALREADY_EXISTS,
    pb_utils.TritonError.CANCELLED: ErrorCode.CANCELLED,
}
_TRITON_CODE_BY_SERVER_CODE = {
    ErrorCode.INVALID_ARGUMENT: pb_utils.TritonError.INVALID_ARG,
    ErrorCode.NOT_FOUND: pb_utils.TritonError.NOT_FOUND,
    ErrorCode.ALREADY_EXISTS: pb_utils.TritonError.ALREADY_EXISTS,
    ErrorCode.UNAVAILABLE: pb_utils.TritonError.UNAVAILABLE,
    ErrorCode.UNIMPLEMENTED: pb_utils.TritonError.UNSUPPORTED,
    ErrorCode.RESOURCE_EXHAUSTED: pb_utils.TritonError.UNAVAILABLE,
    ErrorCode.FAILED_PRECONDITION: pb_utils.TritonError.INVALID_ARG,
    ErrorCode.DEADLINE_EXCEEDED: pb_utils.TritonError.UNAVAILABLE,
    ErrorCode.CANCELLED: pb_utils.TritonError.CANCELLED,
    ErrorCode.INTERNAL: pb_utils.TritonError.INTERNAL,
}


def server_error(error: pb_utils.TritonError) -> ServerError:
    return ServerError(error.message(), _SERVER_CODE_BY_TRITON_CODE.get(error.code(), ErrorCode.INTERNAL))


def triton_error(error: BaseException) -> pb_utils.TritonError:
    if isinstance(error, pb_utils.TritonError):
        return error
    if isinstance(error, ServerError):
        return pb_utils.TritonError(error.message, _TRITON_CODE_BY_SERVER_CODE.get(error.code, 1))
    return pb_utils.TritonError(f"{type(error).__name__}: {error}")


# --------------------------------------------------------------------------------------------------
# Model config <-> the JSON dict Triton gives python models.

_INT64_FIELD_TYPES = {
    descriptor.FieldDescriptor.TYPE_INT64,
    descriptor.FieldDescriptor.TYPE_UINT64,
    descriptor.FieldDescriptor.TYPE_SINT64,
    descriptor.FieldDescriptor.TYPE_FIXED64,
    descriptor.FieldDescriptor.TYPE_SFIXED64,
}


def _int64_as_numbers(message_type: descriptor.Descriptor, data: dict) -> None:
    """protobuf's JSON writes int64 as strings ("dims": ["4"]); Triton's model config JSON has numbers."""
    for field in message_type.fields:
        if field.name not in data:
            continue
        value = data[field.name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for key, item in value.items():
                if value_field.message_type is not None:
                    _int64_as_numbers(value_field.message_type, item)
                elif value_field.type in _INT64_FIELD_TYPES:
                    value[key] = int(item)
        elif field.message_type is not None:
            for item in value if field.is_repeated else [value]:
                _int64_as_numbers(field.message_type, item)
        elif field.type in _INT64_FIELD_TYPES:
            data[field.name] = [int(v) for v in value] if field.is_repeated else int(value)


def config_to_dict(config: mc.ModelConfig) -> dict:
    """The config as Triton shows it to python models: proto field names, enum names, every field
    printed (`"max_batch_size": 0`, `"input": []`), int64 values as JSON numbers."""
    data = json_format.MessageToDict(
        config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _int64_as_numbers(mc.ModelConfig.DESCRIPTOR, data)
    return data


def config_from_dict(data: dict) -> mc.ModelConfig:
    config = mc.ModelConfig()
    json_format.ParseDict(data, config)
    return config


# --------------------------------------------------------------------------------------------------
# Importing model files.

_import_lock = threading.Lock()  # sys.path and sys.modules edits must not interleave between loads
_module_counter = itertools.count()


def _model_path(config: mc.ModelConfig, version_dir: Path) -> Path:
    return Path(version_dir) / (config.default_model_filename or DEFAULT_MODEL_FILENAME)


def _is_under(module: pytypes.ModuleType, folder: Path) -> bool:
    file = getattr(module, "__file__", None)
    if not file:
        return False
    try:
        return Path(file).resolve().is_relative_to(folder)
    except (OSError, ValueError):
        return False


def import_model_module(
    path: Path, model_name: str, route: Optional[pb_utils._ModelRoute] = None
) -> pytypes.ModuleType:
    """Import `path` as a new module object, never shared with another instance.

    The version folder and the model folder are on sys.path only while the file is imported (Triton
    puts them there for the same reason: `import helper` next to model.py). Helper modules imported
    from the model folder are then dropped from sys.modules, so the next instance gets its own copies,
    as it would in its own Triton stub process. Returns the module, registered in sys.modules under a
    unique name (dataclasses and pickle look modules up there) until `forget_model_module`.
    """
    if not path.is_file():
        raise ServerError(f"unable to find python model file '{path}' for model '{model_name}'", ErrorCode.NOT_FOUND)
    safe_name = re.sub(r"\W", "_", model_name)
    unique_name = f"_triton_python_model_{safe_name}_{next(_module_counter)}"
    spec = importlib.util.spec_from_file_location(unique_name, path)
    if spec is None or spec.loader is None:
        raise internal(f"cannot import python model file '{path}'")
    module = importlib.util.module_from_spec(spec)
    if route is not None:
        setattr(module, pb_utils.ROUTE_GLOBAL_NAME, route)
    model_dir = path.parent.parent.resolve()
    search_paths = [str(path.parent), str(path.parent.parent)]
    with _import_lock:
        sys.modules[PB_UTILS_MODULE_NAME] = pb_utils
        before = set(sys.modules)
        sys.modules[unique_name] = module
        sys.path[:0] = search_paths
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - a broken model file fails its load, not the server
            sys.modules.pop(unique_name, None)
            raise internal(f"failed to import python model file '{path}': {type(exc).__name__}: {exc}") from exc
        except BaseException:
            sys.modules.pop(unique_name, None)
            raise
        finally:
            for entry in search_paths:
                if entry in sys.path:  # the model may have removed it itself
                    sys.path.remove(entry)
            for name in set(sys.modules) - before - {unique_name}:
                if _is_under(sys.modules[name], model_dir):
                    del sys.modules[name]
    return module


def forget_model_module(module: pytypes.ModuleType) -> None:
    sys.modules.pop(module.__name__, None)


def _model_class(module: pytypes.ModuleType, path: Path) -> type:
    model_class = getattr(module, MODEL_CLASS_NAME, None)
    if model_class is None:
        raise internal(f"python model file '{path}' does not define class '{MODEL_CLASS_NAME}'")
    return model_class


# --------------------------------------------------------------------------------------------------
# Tensors and responses between the server's types and pb_utils objects.


def _as_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    return str(item).encode("utf-8")  # what Triton's serializer does with other objects


def bytes_array(data: np.ndarray) -> np.ndarray:
    """An object/bytes/str array -> the same shape as `np.object_` of `bytes` (str as UTF-8)."""
    out = np.empty(data.shape, dtype=np.object_)
    out.reshape(-1)[:] = [_as_bytes(item) for item in data.reshape(-1).tolist()]
    return out


def server_tensor(tensor: pb_utils.Tensor) -> messages.Tensor:
    data = tensor.as_numpy()
    if data.dtype.kind in ("O", "S", "U"):
        data = bytes_array(data)
    return messages.Tensor(name=tensor.name(), datatype=wire_name(data.dtype), data=data)


def pb_tensor(tensor: messages.Tensor) -> pb_utils.Tensor:
    return pb_utils.Tensor(tensor.name, tensor.data)


def pb_response(response: InferResponse) -> pb_utils.InferenceResponse:
    converted = pb_utils.InferenceResponse(output_tensors=[pb_tensor(t) for t in response.outputs])
    converted._parameters = dict(response.parameters)  # server parameters may hold any JSON value
    return converted


def pb_error_response(error: BaseException) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse(error=triton_error(error))


def bls_request(request: pb_utils.InferenceRequest) -> InferRequest:
    """A model's BLS request as the server's request."""
    flags = request.flags()
    version = request._model_version
    return InferRequest(
        model_name=request._model_name,
        model_version="" if version < 0 else str(version),
        id=request.request_id(),
        inputs=[server_tensor(t) for t in request.inputs()],
        outputs=[messages.RequestedOutput(name) for name in request.requested_output_names()],
        parameters=json.loads(request.parameters()),
        sequence=messages.SequenceControl(
            id=request.correlation_id(),
            start=bool(flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START),
            end=bool(flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END),
        ),
        timeout_us=request.timeout(),
    )


# --------------------------------------------------------------------------------------------------
# BLS route and the per-instance event loop for `async def execute` models.


class _ModelEventLoop:
    """One asyncio loop in its own thread per instance, started on first use (Triton's stub has one too)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None

    def submit(self, coroutine: Coroutine) -> concurrent.futures.Future:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name=f"python-model-loop-{self._name}", daemon=True
                )
                self._thread.start()
            return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def close(self) -> None:
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5.0)
        if not thread.is_alive():
            loop.close()


class InstanceRoute:
    """Carries one instance's BLS calls to the server that loaded it (`pb_utils._ModelRoute`)."""

    def __init__(self, context: ModelContext) -> None:
        self._context = context
        self.model_dir = str(context.version_dir)

    def infer(
        self, request: pb_utils.InferenceRequest, decoupled: bool
    ) -> Union[pb_utils.InferenceResponse, pb_utils.ResponseIterator]:
        infer_sync = self._context.infer_sync
        if infer_sync is None:
            return self._result_of_error(self._no_hook_error(), decoupled)
        try:
            responses = infer_sync(bls_request(request))
        except Exception as exc:  # noqa: BLE001 - Triton reports BLS failures inside the response
            return self._result_of_error(exc, decoupled)
        return self._result(request, responses, decoupled)

    async def infer_async(
        self, request: pb_utils.InferenceRequest, decoupled: bool
    ) -> Union[pb_utils.InferenceResponse, pb_utils.ResponseIterator]:
        # The model's coroutines run on the instance's own loop; `infer_async` must be awaitable from any
        # loop (the server's bridges to its own). Without it, `infer_sync` runs in an executor thread.
        infer_async = self._context.infer_async
        if infer_async is None:
            if self._context.infer_sync is None:
                return self._result_of_error(self._no_hook_error(), decoupled)
            return await asyncio.get_running_loop().run_in_executor(None, self.infer, request, decoupled)
        try:
            responses = await infer_async(bls_request(request))
        except Exception as exc:  # noqa: BLE001 - Triton reports BLS failures inside the response
            return self._result_of_error(exc, decoupled)
        return self._result(request, responses, decoupled)

    def _no_hook_error(self) -> ServerError:
        return internal(f"BLS is not available: model '{self._context.name}' was loaded without an inference hook")

    @staticmethod
    def _result_of_error(
        error: BaseException, decoupled: bool
    ) -> Union[pb_utils.InferenceResponse, pb_utils.ResponseIterator]:
        response = pb_error_response(error)
        return pb_utils.ResponseIterator([response]) if decoupled else response

    def _result(
        self, request: pb_utils.InferenceRequest, responses: Sequence[InferResponse], decoupled: bool
    ) -> Union[pb_utils.InferenceResponse, pb_utils.ResponseIterator]:
        converted = [pb_response(r) for r in responses]
        if decoupled:
            return pb_utils.ResponseIterator(converted)
        if len(converted) != 1:
            return pb_error_response(
                internal(
                    f"BLS request to model '{request._model_name}' produced {len(converted)} responses; "
                    "use exec(decoupled=True) for decoupled models"
                )
            )
        return converted[0]


# --------------------------------------------------------------------------------------------------
# The backend.


class PythonBackend(Backend):
    """One instance of a Triton python model. See `asr_server/backends/base.py` for the contract."""

    backend_names = ("python",)
    default_model_filename = DEFAULT_MODEL_FILENAME
    # A python model gets a list of requests, never a concatenated tensor, so shapes may differ.
    ragged_batching = True

    def __init__(self, context: ModelContext) -> None:
        super().__init__(context)
        self._decoupled = bool(context.config.model_transaction_policy.decoupled)
        self._route = InstanceRoute(context)
        self._loop = _ModelEventLoop(context.instance_name or context.name)
        self._module: Optional[pytypes.ModuleType] = None
        self._model: Any = None
        self._output_names = [output.name for output in context.config.output]
        # Triton hands python models their inputs in the config's `reshape` shape, and reports outputs in
        # the config's dims: the inputs and outputs that carry a reshape, by name.
        self._batching = context.config.max_batch_size > 0
        self._input_reshapes = {io.name: io for io in context.config.input if io.HasField("reshape")}
        self._output_reshapes = {io.name: io for io in context.config.output if io.HasField("reshape")}

    # ---- configuration

    @classmethod
    def auto_complete_config(cls, config: mc.ModelConfig, version_dir: Path) -> mc.ModelConfig:
        """Run `TritonPythonModel.auto_complete_config(ModelConfig)` if the model defines it and return
        the config with what it added (inputs, outputs, max_batch_size, batching, decoupled policy)."""
        path = _model_path(config, version_dir)
        module = import_model_module(path, config.name or path.parent.parent.name)
        try:
            hook = getattr(_model_class(module, path), "auto_complete_config", None)
            if hook is None:
                return config
            helper = pb_utils.ModelConfig(json.dumps(config_to_dict(config)))
            try:
                completed = hook(helper)
            except Exception as exc:  # noqa: BLE001 - a model's mistake is a load failure, not a crash
                raise ServerError(
                    f"auto-complete-config of model '{config.name}' failed: {type(exc).__name__}: {exc}",
                    ErrorCode.INVALID_ARGUMENT,
                ) from exc
            if not isinstance(completed, pb_utils.ModelConfig):
                raise ServerError(
                    f"auto_complete_config of model '{config.name}' must return the ModelConfig it was "
                    f"given, got {type(completed).__name__}",
                    ErrorCode.INVALID_ARGUMENT,
                )
            try:
                return config_from_dict(completed.as_dict())
            except json_format.ParseError as exc:
                raise ServerError(
                    f"auto-complete-config of model '{config.name}' produced an invalid config: {exc}",
                    ErrorCode.INVALID_ARGUMENT,
                ) from exc
        finally:
            forget_model_module(module)

    def initialize_args(self) -> dict[str, str]:
        """The `args` of `TritonPythonModel.initialize`, every value a string, as Triton passes them."""
        ctx = self.context
        kind = ctx.instance_kind[len("KIND_"):] if ctx.instance_kind.startswith("KIND_") else ctx.instance_kind
        return {
            "model_config": json.dumps(config_to_dict(ctx.config)),
            "model_instance_kind": kind,
            "model_instance_name": ctx.instance_name or f"{ctx.name}_0_0",
            "model_instance_device_id": str(ctx.device_id),
            "model_repository": str(ctx.model_dir),
            "model_version": str(ctx.version),
            "model_name": ctx.name,
        }

    # ---- lifecycle

    def load(self) -> None:
        ctx = self.context
        path = _model_path(ctx.config, ctx.version_dir)
        module = import_model_module(path, ctx.name, self._route)
        try:
            model_class = _model_class(module, path)
            with pb_utils._use_route(self._route):
                model = model_class()
                if hasattr(model, "initialize"):
                    model.initialize(self.initialize_args())
        except ServerError:
            forget_model_module(module)
            raise
        except Exception as exc:  # noqa: BLE001
            forget_model_module(module)
            raise internal(f"failed to load model '{ctx.name}': {type(exc).__name__}: {exc}") from exc
        if not hasattr(model, "execute"):
            forget_model_module(module)
            raise internal(f"Python model '{path}' does not implement `execute` method.")
        self._module, self._model = module, model
        pb_utils._set_fallback_route(self._route)

    def unload(self) -> None:
        try:
            if self._model is not None and hasattr(self._model, "finalize"):
                with pb_utils._use_route(self._route):
                    self._model.finalize()
        except Exception:  # noqa: BLE001 - unloading must finish whatever the model does
            log.exception("finalize() of python model instance '%s' failed", self._instance_label)
        finally:
            self._loop.close()
            pb_utils._clear_fallback_route(self._route)
            if self._module is not None:
                forget_model_module(self._module)
            self._module = self._model = None

    @property
    def _instance_label(self) -> str:
        return self.context.instance_name or self.context.name

    # ---- execution

    def execute(
        self, requests: Sequence[InferRequest], senders: Optional[Sequence[ResponseSink]] = None
    ) -> ExecuteResult:
        """Run `TritonPythonModel.execute` on the batch; one InferResponse or ServerError per request
        (None for a decoupled model's requests, whose responses go through `senders`)."""
        if self._model is None:
            return [internal(f"python model '{self.context.name}' is not loaded")] * len(requests)
        if self._decoupled and (senders is None or len(senders) != len(requests)):
            return [internal(f"decoupled model '{self.context.name}' needs one response sender per request")] * len(
                requests
            )
        refused = self._refused(requests)
        if refused:  # those fail alone; the model runs the rest of the batch
            keep = [i for i in range(len(requests)) if i not in refused]
            kept = self.execute([requests[i] for i in keep], [senders[i] for i in keep] if senders else None
                                ) if keep else []
            results = dict(zip(keep, kept))
            return [refused[i] if i in refused else results[i] for i in range(len(requests))]
        captured: list[list[Optional[InferResponse]]] = [[] for _ in requests]
        pb_senders = [self._sender(i, r, senders, captured[i]) for i, r in enumerate(requests)]
        pb_requests = [self._pb_request(r, s) for r, s in zip(requests, pb_senders)]
        with pb_utils._use_route(self._route):
            try:
                returned = self._model.execute(pb_requests)
                if asyncio.iscoroutine(returned):
                    returned = self._run_coroutine(returned, pb_senders)
            except Exception as exc:  # noqa: BLE001 - a failing model fails its batch, not the server
                log.exception("execute() of python model instance '%s' failed", self._instance_label)
                error = self._execute_error(exc)
                if not self._decoupled:
                    return [error] * len(requests)
                return [error if sender._close_if_open() else None for sender in pb_senders]
        if self._decoupled:
            return self._decoupled_results(returned, pb_senders)
        return self._results(requests, returned, captured)

    def _refused(self, requests: Sequence[InferRequest]) -> dict[int, ServerError]:
        """Requests that cannot become a pb_utils request (e.g. a float correlation id): {index: error}."""
        refused = {}
        for i, request in enumerate(requests):
            sequence_id = request.sequence.id
            if isinstance(sequence_id, bool) or not isinstance(sequence_id, (int, str)):
                refused[i] = invalid_argument(
                    f"sequence_id of a request to model '{self.context.name}' must be an unsigned integer or a "
                    f"string, got {type(sequence_id).__name__}")
        return refused

    def _execute_error(self, exc: BaseException) -> ServerError:
        """Triton's wording for a model whose execute raised (without the traceback, which we log)."""
        return internal(
            f"Failed to process the request(s) for model instance '{self._instance_label}', "
            f"message: {type(exc).__name__}: {exc}"
        )

    def _pb_request(self, request: InferRequest, sender: pb_utils.InferenceResponseSender) -> pb_utils.InferenceRequest:
        requested = [output.name for output in request.outputs] or list(self._output_names)
        return pb_utils.InferenceRequest._received(
            inputs=[self._model_input(t) for t in request.inputs],
            requested_output_names=requested,
            model_name=self.context.name,
            model_version=self.context.version,
            request_id=request.id,
            correlation_id=request.sequence.id,
            flags=request.sequence.flags,
            timeout=request.timeout_us,
            parameters_json=json.dumps(request.parameters, default=str),
            cancelled=request.cancelled,
            response_sender=sender,
            route=self._route,
        )

    def _model_input(self, tensor: messages.Tensor) -> pb_utils.Tensor:
        io = self._input_reshapes.get(tensor.name)
        if io is None:
            return pb_tensor(tensor)
        return pb_utils.Tensor(tensor.name, to_model_shape(tensor.data, io, self._batching))

    def _client_output(self, tensor: messages.Tensor) -> messages.Tensor:
        io = self._output_reshapes.get(tensor.name)
        if io is None:
            return tensor
        return messages.Tensor(tensor.name, tensor.datatype, to_client_shape(tensor.data, io, self._batching))

    def _sender(
        self,
        index: int,
        request: InferRequest,
        senders: Optional[Sequence[ResponseSink]],
        captured: list[Optional[InferResponse]],
    ) -> pb_utils.InferenceResponseSender:
        """A decoupled request's sender forwards to its sink; a non-decoupled one keeps its single
        response for `execute` to return."""
        if self._decoupled:
            sink = senders[index]

            def deliver(response: Optional[pb_utils.InferenceResponse], final: bool) -> None:
                sink(None if response is None else self._server_response(request, response, final), final)

        else:

            def deliver(response: Optional[pb_utils.InferenceResponse], final: bool) -> None:
                if response is not None:
                    captured.append(self._server_response(request, response, True))

        return pb_utils.InferenceResponseSender(deliver, self._decoupled, request.cancelled)

    def _server_response(
        self, request: InferRequest, response: pb_utils.InferenceResponse, final: bool
    ) -> Union[InferResponse, ServerError]:
        if response.has_error():
            return server_error(response.error())
        try:
            outputs = [self._client_output(server_tensor(t)) for t in response.output_tensors()]
        except (ValueError, TypeError) as exc:
            return internal(f"model '{self.context.name}' produced an invalid output: {exc}")
        return InferResponse(
            model_name=self.context.name,
            model_version=str(self.context.version),
            id=request.id,
            outputs=outputs,
            parameters=dict(response._parameters),
            final=final,
        )

    def _results(
        self,
        requests: Sequence[InferRequest],
        returned: Any,
        captured: list[list[Optional[InferResponse]]],
    ) -> ExecuteResult:
        count = len(requests)
        if returned is None:
            returned = [None] * count
        if not isinstance(returned, (list, tuple)):
            return [internal(f"Expected a list in the execute return, found type '{type(returned).__name__}'.")] * count
        if len(returned) != count:
            return [
                internal(
                    f"Number of InferenceResponse objects do not match the number of InferenceRequest "
                    f"objects. InferenceRequest(s) size is:{count}, and InferenceResponse(s) size is:{len(returned)}"
                )
            ] * count
        results: ExecuteResult = []
        for request, response, sent in zip(requests, returned, captured):
            if response is None:
                results.append(sent[0] if sent else internal(f"model '{self.context.name}' returned no response"))
            elif not isinstance(response, pb_utils.InferenceResponse):
                results.append(
                    internal(
                        "Expected an 'InferenceResponse' object in the execute function return list, "
                        f"found type '{type(response).__name__}'."
                    )
                )
            else:
                results.append(self._server_response(request, response, True))
        return results

    def _decoupled_results(self, returned: Any, senders: list[pb_utils.InferenceResponseSender]) -> ExecuteResult:
        returned_something = returned is not None and not (
            isinstance(returned, (list, tuple)) and all(item is None for item in returned)
        )
        if not returned_something:
            return [None] * len(senders)
        error = internal(
            f"Python model '{self.context.name}' is using the decoupled mode and the execute function must return None."
        )
        return [error if sender._close_if_open() else None for sender in senders]

    def _run_coroutine(self, coroutine: Coroutine, senders: list[pb_utils.InferenceResponseSender]) -> Any:
        """`async def execute`: wait for it, or for a decoupled model let it run on (as Triton does)."""
        route = self._route

        async def in_route() -> Any:
            with pb_utils._use_route(route):
                return await coroutine

        future = self._loop.submit(in_route())
        if not self._decoupled:
            return future.result()
        future.add_done_callback(lambda done: self._background_done(done, senders))
        return None

    def _background_done(
        self, done: concurrent.futures.Future, senders: list[pb_utils.InferenceResponseSender]
    ) -> None:
        """A decoupled coroutine that failed closes the requests it left open, with its error."""
        if done.cancelled():
            exc: BaseException = RuntimeError("the model's execute coroutine was cancelled")
        else:
            exc = done.exception()
            if exc is None:
                return
            log.error("async execute() of python model instance '%s' failed", self._instance_label, exc_info=exc)
        error = self._execute_error(exc)
        for sender in senders:
            try:
                sender.send(pb_error_response(error), pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            except pb_utils.TritonModelException:
                pass  # already closed by the model
