"""PythonBackend: one instance of a Triton python model (`TritonPythonModel` in model.py), behind the
`Backend` interface (`asr_server/backends/base.py`). It loads the model file with its own API
(`importer.py`), calls `initialize`/`execute`/`finalize` with the instance's route set (`bls.py`), and turns
the batch of server requests into the API's requests and the model's answers back into one result per
request (`convert.py`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
import types
from pathlib import Path
from typing import Any, Callable, Coroutine, Optional, Sequence, Union

from tritonclient.grpc import model_config_pb2 as mc

from asr_server import messages
from asr_server.backends.base import Backend, ExecuteResult, ModelContext
from asr_server.backends.python import model_config
from asr_server.backends.python import triton_python_backend_utils as pb_utils
from asr_server.backends.python.api.routes import use_route
from asr_server.backends.python.bls import InstanceRoute
from asr_server.backends.python.convert import pb_error_response, pb_input, server_tensor
from asr_server.backends.python.error_codes import server_error
from asr_server.backends.python.event_loop import ModelEventLoop
from asr_server.backends.python.importer import (
    DEFAULT_MODEL_FILENAME,
    forget_model_module,
    import_model_module,
    instance_api,
    model_class,
    model_path,
)
from asr_server.backends.python.process_model import PARAMETER as PROCESS_PARAMETER
from asr_server.backends.python.process_model import ProcessModel, wants_process
from asr_server.backends.reshape import Reshape
from asr_server.errors import ServerError, internal, invalid_argument
from asr_server.messages import InferRequest, InferResponse, ResponseSink

log = logging.getLogger(__name__)


class PythonBackend(Backend):
    """One instance of a Triton python model. See `asr_server/backends/base.py` for the contract."""

    default_model_filename = DEFAULT_MODEL_FILENAME
    # A python model gets a list of requests, never a concatenated tensor, so shapes may differ.
    ragged_batching = True

    def __init__(self, context: ModelContext) -> None:
        super().__init__(context)
        self._decoupled = bool(context.config.model_transaction_policy.decoupled)
        # The instance's route, handed to the model through its own API (importer.instance_api).
        self._route = InstanceRoute(context)
        self._api = instance_api(self._route)
        self._loop = ModelEventLoop(context.instance_name or context.name)
        self._module: Optional[types.ModuleType] = None
        self._model: Any = None
        self._output_names = [output.name for output in context.config.output]
        self._version_name = str(context.version)
        # Triton hands python models their inputs in the config's `reshape` shape, and reports outputs in
        # the config's dims: the inputs and outputs that carry a reshape, by name.
        self._batching = context.config.max_batch_size > 0
        self._input_reshapes = {io.name: Reshape.to_model(io) for io in context.config.input if io.HasField("reshape")}
        self._output_reshapes = {io.name: Reshape.to_client(io) for io in context.config.output
                                 if io.HasField("reshape")}

    # ---- configuration

    @classmethod
    def auto_complete_config(cls, config: mc.ModelConfig, version_dir: Path) -> mc.ModelConfig:
        """What the model's own `auto_complete_config` adds (see model_config.py)."""
        return model_config.auto_complete_config(config, version_dir)

    def initialize_args(self) -> dict[str, str]:
        return model_config.initialize_args(self.context)

    # ---- lifecycle

    def load(self) -> None:
        ctx = self.context
        path = model_path(ctx.config, ctx.version_dir)
        if wants_process(ctx.config.parameters):
            self._model = self._load_in_process(path)
            return
        module = import_model_module(path, ctx.name, self._api)
        try:
            found = model_class(module, path)
            with use_route(self._route):
                model = found()
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

    def _load_in_process(self, path: Path) -> ProcessModel:
        """The instance in a process of its own (config parameter `instance_process`; process_model.py)."""
        name = self.context.name
        if self._decoupled:
            raise invalid_argument(f"model '{name}': a decoupled python model cannot run in its own process "
                                   f"(parameter {PROCESS_PARAMETER})")
        try:
            return ProcessModel(path, name, self.context.version, self.initialize_args())
        except RuntimeError as exc:
            raise internal(f"failed to load model '{name}': {exc}") from exc

    def unload(self) -> None:
        try:
            if self._model is not None and hasattr(self._model, "finalize"):
                with use_route(self._route):
                    self._model.finalize()
        except Exception:  # noqa: BLE001 - unloading must finish whatever the model does
            log.exception("finalize() of python model instance '%s' failed", self._instance_label)
        finally:
            self._loop.close()
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
        if self._decoupled:
            pb_senders = [self._sender(i, r, senders, captured[i]) for i, r in enumerate(requests)]
        else:  # made when the model asks for one: most return their response instead
            pb_senders = [functools.partial(self._sender, i, r, senders, captured[i]) for i, r in enumerate(requests)]
        pb_requests = [self._pb_request(r, s) for r, s in zip(requests, pb_senders)]
        with use_route(self._route):
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
            problem = request.sequence.id_problem(self.context.name)
            if problem:
                refused[i] = invalid_argument(problem)
        return refused

    def _execute_error(self, exc: BaseException) -> ServerError:
        """Triton's wording for a model whose execute raised (without the traceback, which we log)."""
        return internal(
            f"Failed to process the request(s) for model instance '{self._instance_label}', "
            f"message: {type(exc).__name__}: {exc}"
        )

    def _pb_request(self, request: InferRequest,
                    sender: Union[pb_utils.InferenceResponseSender, Callable[[], pb_utils.InferenceResponseSender]]
                    ) -> pb_utils.InferenceRequest:
        requested = [output.name for output in request.outputs] or list(self._output_names)
        return self._api.InferenceRequest._received(
            inputs=[self._model_input(t) for t in request.inputs],
            requested_output_names=requested,
            model_name=self.context.name,
            model_version=self.context.version,
            request_id=request.id,
            correlation_id=request.sequence.id,
            flags=request.sequence.flags,
            timeout=request.timeout_us,
            parameters_json=json.dumps(request.parameters, default=str) if request.parameters else "{}",
            cancelled=request.cancelled,
            response_sender=sender,
            route=self._route,
        )

    def _model_input(self, tensor: messages.Tensor) -> pb_utils.Tensor:
        reshape = self._input_reshapes.get(tensor.name)
        if reshape is None:
            return pb_input(tensor)
        return pb_utils.Tensor(tensor.name, reshape(tensor.data, self._batching))

    def _client_output(self, tensor: messages.Tensor) -> messages.Tensor:
        reshape = self._output_reshapes.get(tensor.name)
        if reshape is None:
            return tensor
        return messages.Tensor(tensor.name, tensor.datatype, reshape(tensor.data, self._batching))

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
            model_version=self._version_name,
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
            with use_route(route):
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
