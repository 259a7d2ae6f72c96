"""The protocol-independent data plane: health, metadata, inference and streaming.

gRPC and HTTP handlers convert the wire format into `asr_server.messages` and call this class; it validates a
request against its model's config, hands it to the model's scheduler and returns the responses.
No wire protocol here (no service_pb2, no grpc, no JSON). A model's config is Triton's `ModelConfig` message,
the config type of every layer (see `asr_server/repository/__init__.py`). `CorePort` is the port the layers
below call back in through (BLS, ensemble steps; `asr_server/server_port.py`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import AsyncIterator, Callable, Optional, Union

from tritonclient.grpc import model_config_pb2 as mc

from asr_server import __version__, gc_freeze
from asr_server.bounded import remember
from asr_server.dtypes import config_to_wire
from asr_server.errors import ErrorCode, ServerError, as_server_error, invalid_argument
from asr_server.repository import validation
from asr_server.repository.manager import LoadedVersion, ModelManager, ModelState
from asr_server.scheduling.pending import Delivery, Pending, ResponseChannel
from asr_server.shared_memory import SharedMemoryRegistry
from asr_server.messages import InferRequest, InferResponse

log = logging.getLogger(__name__)

# Triton 2.51 says this in both 'none' and 'poll' model-control modes.
LOAD_NOT_ALLOWED = "explicit model load / unload is not allowed if polling is enabled"
SERVER_NAME = "triton"  # clients (perf_analyzer among them) look for Triton's name
EXTENSIONS = (
    "classification", "sequence", "model_repository", "model_repository(unload_dependents)", "schedule_policy",
    "model_configuration", "system_shared_memory", "cuda_shared_memory", "binary_tensor_data", "parameters",
    "statistics", "trace", "logging",
)


@dataclasses.dataclass(frozen=True)
class TensorMetadata:
    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class ModelMetadata:
    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorMetadata, ...]
    outputs: tuple[TensorMetadata, ...]


class InferenceCore:
    def __init__(self, manager: ModelManager, strict_readiness: bool = True, model_control: str = "none") -> None:
        self.manager = manager
        self.strict_readiness = strict_readiness
        self.model_control_explicit = model_control == "explicit"
        self.poll_enabled = model_control == "poll"
        self.shared_memory = SharedMemoryRegistry()
        self.live = True
        # With --workers: passes model loads and unloads on to the other workers (workers.SiblingControl)
        self.peers = None
        # While a restarted worker catches up with its siblings: the models and regions a client changed since it
        # registered (those changes are newer than the siblings' state it is applying, which must skip them)
        self.changed_names: Optional[set[str]] = None

    # ---- health and metadata --------------------------------------------------------------------
    def server_ready(self) -> bool:
        if not self.live:
            return False
        if not self.strict_readiness:
            return True
        # Strict readiness: every model the server was asked to load is ready (unloaded ones don't count).
        return all((e.state == ModelState.READY and all(_healthy(v) for v in e.versions.values()))
                   or e.reason == "unloaded" for e in self.manager.models.values())

    def model_ready(self, name: str, version: str = "") -> bool:
        try:
            loaded = self.manager.get(name, version)
        except ServerError:
            return False
        return _healthy(loaded)

    def server_metadata(self) -> dict:
        return {"name": SERVER_NAME, "version": __version__, "extensions": list(EXTENSIONS)}

    def model_config(self, name: str, version: str = "") -> mc.ModelConfig:
        return self.manager.get(name, version).config

    def model_metadata(self, name: str, version: str = "") -> ModelMetadata:
        loaded = self.manager.get(name, version)
        entry = self.manager.entry(name)
        config = loaded.config
        batch = (-1,) if config.max_batch_size > 0 else ()

        def describe(tensors) -> tuple[TensorMetadata, ...]:
            return tuple(TensorMetadata(t.name, config_to_wire(t.data_type), batch + tuple(t.dims)) for t in tensors)

        return ModelMetadata(
            name=name,
            versions=tuple(str(v) for v in sorted(entry.versions)),
            platform=config.platform or config.backend,
            inputs=describe(config.input),
            outputs=describe(config.output),
        )

    def statistics(self, name: str = "", version: str = "") -> list[tuple[str, int, object]]:
        """(name, version, ModelStatistics snapshot) for one model, or every loaded model when name is ""."""
        if name:
            try:
                loaded = [self.manager.get(name, version)] if version else list(self.manager.entry(name).versions.values())
            except ServerError:
                loaded = []
            if not loaded:
                raise invalid_argument(f"requested model '{name}' is not available")
        else:
            loaded = [v for e in self.manager.models.values() for v in e.versions.values()]
        return [(v.name, v.version, v.stats.snapshot()) for v in sorted(loaded, key=lambda v: (v.name, v.version))]

    # ---- repository -----------------------------------------------------------------------------
    def repository_index(self, ready_only: bool = False) -> list[dict]:
        rows = []
        for name in sorted(set(self.manager.repository_names()) | set(self.manager.models)):
            entry = self.manager.models.get(name)
            if entry is None:
                if not ready_only:
                    rows.append({"name": name, "version": "", "state": "", "reason": ""})
                continue
            if entry.versions:
                for number in sorted(entry.versions):
                    rows.append({"name": name, "version": str(number), "state": "READY", "reason": ""})
            elif not ready_only:
                rows.append({"name": name, "version": "", "state": entry.state.value, "reason": entry.reason})
        return rows

    async def load_model(self, name: str, config_override: Optional[str] = None,
                         files: Optional[dict[str, bytes]] = None, forward: bool = True) -> None:
        """`forward`: also load it on the other workers (False for a request a worker forwarded)."""
        if not self.model_control_explicit:
            raise ServerError(LOAD_NOT_ALLOWED, ErrorCode.UNAVAILABLE)
        if files and not config_override:
            raise invalid_argument(f"failed to load '{name}': 'file:' parameters require a 'config' parameter")
        self._changed(name)
        try:
            await self.manager.load(name, config_override, files or None)
        finally:
            gc_freeze.settle()
        if forward and self.peers is not None:
            await self.peers.load(name, config_override, files)

    async def unload_model(self, name: str, unload_dependents: bool = False, forward: bool = True) -> None:
        """`unload_dependents`: also unload an ensemble's steps that were loaded only along with it;
        `forward`: on the other workers too."""
        if not self.model_control_explicit:
            raise ServerError(LOAD_NOT_ALLOWED, ErrorCode.UNAVAILABLE)
        self._changed(name)
        await self.manager.unload(name, unload_dependents)
        gc_freeze.settle()
        if forward and self.peers is not None:
            await self.peers.unload(name, unload_dependents)

    def _changed(self, name: str) -> None:
        if self.changed_names is not None:
            self.changed_names.add(name)

    # ---- system shared memory -------------------------------------------------------------------
    async def register_shared_memory(self, name: str, key: str, offset: int, byte_size: int,
                                     forward: bool = True) -> None:
        """Register a region here, and with --workers on the other workers too (a client's requests may reach
        any of them)."""
        self._changed(name)
        self.shared_memory.register(name, key, offset, byte_size)
        if forward and self.peers is not None:
            await self.peers.register_shared_memory(name, key, offset, byte_size)

    async def unregister_shared_memory(self, name: str, forward: bool = True) -> None:
        """Unregister one region ('' for all) here, and on the other workers."""
        if name:
            self._changed(name)
        else:  # all of them: every region this worker has now counts as changed
            for region in self.shared_memory.status():
                self._changed(region.name)
        self.shared_memory.unregister(name)
        if forward and self.peers is not None:
            await self.peers.unregister_shared_memory(name)

    # ---- inference ------------------------------------------------------------------------------
    async def infer(self, request: InferRequest) -> InferResponse:
        """One request, one response (ModelInfer)."""
        loaded = self.manager.get(request.model_name, request.model_version)
        if loaded.decoupled:
            raise ServerError(
                "ModelInfer RPC doesn't support models with decoupled transaction policy", ErrorCode.UNIMPLEMENTED
            )
        channel = self._submit(loaded, request)
        response = await channel.first()
        return self._finish(loaded, request, response)

    async def stream(self, request: InferRequest) -> AsyncIterator[Delivery]:
        """Every response of one request (ModelStreamInfer): one for a normal model, zero or more for a
        decoupled one; the last yielded item is final. Errors are yielded, not raised."""
        try:
            loaded = self.manager.get(request.model_name, request.model_version)
            channel = self._submit(loaded, request)
        except ServerError as error:
            yield error
            return
        async for item, final in channel.stream():
            if isinstance(item, InferResponse):
                try:
                    item = self._finish(loaded, request, item)
                except ServerError as error:
                    item = error
                item.final = final if isinstance(item, InferResponse) else True
            yield item

    def submit(self, request: InferRequest, on_answer: Callable[[Union[InferResponse, ServerError]], None],
               loaded: Optional[LoadedVersion] = None) -> None:
        """One request of a model with one response per request, answered through ``on_answer`` (its response
        or its error) on the loop thread: what `stream` does for such a model without a task, a queue and two
        async generators per request (the gRPC stream's per-chunk path). Raises ServerError when the request
        is refused before it is queued; the caller checks that the model is not decoupled (`loaded`: the
        version it found for the request, which is then not looked up again)."""
        if loaded is None:
            loaded = self.manager.get(request.model_name, request.model_version)

        def delivered(item: Delivery, final: bool) -> None:
            # runs inside the scheduler's delivery loop: nothing may escape from here into it
            try:
                if isinstance(item, InferResponse):
                    item = self._finish(loaded, request, item)
                    item.final = True
                elif item is None:
                    item = ServerError("model sent no response", ErrorCode.INTERNAL)
            except Exception as exc:  # noqa: BLE001 - the answer is this request's error
                item = as_server_error(exc)
            try:
                on_answer(item)
            except Exception:  # noqa: BLE001 - the caller's own failure; the scheduler must go on
                log.exception("answering request '%s' of model '%s' failed", request.id, loaded.name)

        self._submit(loaded, request, ResponseChannel(asyncio.get_running_loop(), delivered))

    async def infer_all(self, request: InferRequest) -> list[InferResponse]:
        """Every response of a request, for in-process callers (BLS, ensembles); raises the first error."""
        responses = []
        async for item in self.stream(request):
            if isinstance(item, ServerError):
                raise item
            if item is not None:
                responses.append(item)
        return responses

    def _submit(self, loaded: LoadedVersion, request: InferRequest,
                channel: Optional[ResponseChannel] = None) -> ResponseChannel:
        try:
            validate_request(loaded.config, request, loaded.request_rules)
        except ServerError:
            # Refused before any scheduler: counted as Triton's nv_inference_request_failure{reason="OTHER"}.
            loaded.stats.record_request(False, total_ns=0, reason="OTHER")
            raise
        channel = channel or ResponseChannel(asyncio.get_running_loop())
        batch_size = request.batch_size if loaded.request_rules.max_batch_size > 0 else 1
        loaded.scheduler.submit(Pending(request, channel, batch_size))
        return channel

    def _finish(self, loaded: LoadedVersion, request: InferRequest, response: InferResponse) -> InferResponse:
        """Keep the requested outputs, in the order first asked for and each once (as Triton: an output named
        200 times must not cost 200 copies of it), and stamp model name and version."""
        response.model_name = loaded.name
        response.model_version = str(loaded.version)
        response.id = request.id
        declared = loaded.request_rules.outputs  # read from the config once per loaded version
        if request.outputs:
            by_name = {t.name: t for t in response.outputs}
            missing = [o.name for o in request.outputs if o.name not in by_name]
            if missing:
                raise ServerError(f"model '{loaded.name}' did not produce output(s) {missing}", ErrorCode.INTERNAL)
            response.outputs = [by_name[name] for name in dict.fromkeys(o.name for o in request.outputs)]
        elif declared:
            response.outputs = [t for t in response.outputs if t.name in declared]
        return response


class CorePort:
    """The `ServerPort` of an InferenceCore: in-process requests from any thread or event loop run on the
    loop the core serves on.

    The model manager takes the port before the core exists (the core takes the manager), and the loop is
    only known once the server runs: `connect` binds both at start. Until then calls fail UNAVAILABLE.
    """

    def __init__(self) -> None:
        self._core: Optional[InferenceCore] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    def connect(self, core: InferenceCore, loop: asyncio.AbstractEventLoop) -> None:
        self._core, self._loop = core, loop

    def _target(self) -> tuple[InferenceCore, asyncio.AbstractEventLoop]:
        if self._core is None or self._loop is None:
            raise ServerError("the server is not running", ErrorCode.UNAVAILABLE)
        return self._core, self._loop

    def infer(self, request: InferRequest) -> list[InferResponse]:
        core, loop = self._target()
        return asyncio.run_coroutine_threadsafe(core.infer_all(request), loop).result()

    async def infer_async(self, request: InferRequest) -> list[InferResponse]:
        core, loop = self._target()
        if asyncio.get_running_loop() is loop:
            return await core.infer_all(request)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(core.infer_all(request), loop))


def _healthy(loaded: LoadedVersion) -> bool:
    """False once a scheduler could not go on (e.g. a sequence batcher whose loop gave up)."""
    return loaded.scheduler.healthy


MEMO_MAX_OUTPUTS = 8  # requests naming more outputs are validated in full every time


def validate_request(config: mc.ModelConfig, request: InferRequest, rules: Optional[validation.RequestRules] = None) -> None:
    """Check a request against its model's config (or the rules read from it), with Triton's words."""
    rules = rules or validation.RequestRules.of(config)
    model = rules.model

    def refuse(message: str) -> ServerError:
        return invalid_argument(f"[request id: {request.id or '<id_unknown>'}] {message}")

    problem = request.sequence.id_problem(model)
    if problem:
        raise refuse(problem)
    # Accepted signatures hold only declared names, each input once: their size is bounded by the config.
    # Requested outputs may repeat a name any number of times, and any name when the config declares none:
    # such requests are checked in full every time.
    signature = None
    if len(request.outputs) <= MEMO_MAX_OUTPUTS and (rules.outputs or not request.outputs):
        signature = (tuple([(t.name, t.datatype, t.data.shape) for t in request.inputs]),
                     tuple([o.name for o in request.outputs]))
        if signature in rules.accepted:
            return
    declared = rules.inputs
    given = [t.name for t in request.inputs]
    if len(set(given)) != len(given):
        raise refuse(f"input(s) given more than once for model '{model}'")
    for name in given:
        if name not in declared:
            raise refuse(f"unexpected inference input '{name}' for model '{model}'")
    missing = [n for n in rules.required if n not in given]
    if missing:
        raise refuse(
            f"expected {len(rules.required)} inputs but got {len(given)} inputs for model '{model}'. "
            f"Got input(s) {given}, but missing required input(s) {missing}. Please provide all required input(s)."
        )
    batch_size: Optional[int] = None
    max_batch = rules.max_batch_size
    cap = rules.max_input_dim
    for tensor in request.inputs:
        expected, dims = declared[tensor.name]
        if tensor.datatype != expected:
            raise refuse(
                f"inference input '{tensor.name}' data-type is '{tensor.datatype}', but model '{model}' "
                f"expects '{expected}'"
            )
        shape = tensor.shape
        if max_batch > 0:
            if not shape:
                raise refuse(f"input '{tensor.name}' for model '{model}' has no batch dimension")
            if batch_size is None:
                batch_size = shape[0]
            elif shape[0] != batch_size:
                raise refuse(f"input '{tensor.name}' batch size does not match other inputs for '{model}'")
            if shape[0] > max_batch or shape[0] < 1:
                raise refuse(f"inference request batch-size must be <= {max_batch} for '{model}'")
            shape = shape[1:]
        if not _shape_matches(shape, dims):
            full = ([-1] if max_batch > 0 else []) + list(dims)
            raise refuse(
                f"unexpected shape for input '{tensor.name}' for model '{model}'. "
                f"Expected {_fmt(full)}, got {_fmt(tensor.shape)}. "
            )
        if cap and any(d == -1 and s > cap for s, d in zip(shape, dims)):
            raise refuse(
                f"input '{tensor.name}' for model '{model}' has shape {_fmt(tensor.shape)}: its variable "
                f"dimensions take at most {cap} (config parameter {validation.MAX_INPUT_DIM_PARAMETER})"
            )
    outputs = rules.outputs
    for requested in request.outputs:
        if outputs and requested.name not in outputs:
            raise refuse(f"unexpected inference output '{requested.name}' for model '{model}'")
    if signature is not None:
        remember(rules.accepted, signature, True, rules.ACCEPTED_LIMIT)


def _shape_matches(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    if len(shape) != len(dims):
        return False
    return all(d == -1 or d == s for s, d in zip(shape, dims))


def _fmt(shape) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"
