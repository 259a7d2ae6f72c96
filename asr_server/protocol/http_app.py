"""Triton's HTTP/REST endpoint (KServe v2 plus Triton's extensions) as an aiohttp application.

Each handler parses the request (`http_converters`), calls the core and writes Triton's JSON back, so that
`tritonclient.http` and `curl` scripts written for Triton work unchanged. Errors answer
`{"error": "<message>"}` with the status from the one table in `status.py`.
Large JSON bodies are parsed and written in a worker thread so that the event loop keeps serving.
Bodies are capped (Triton's --http-max-input-size): a declared Content-Length above the cap is answered 413
before any of the body is read, a chunked or compressed body is cut off as soon as it passes the cap, and
either way the connection is closed rather than left to drain the rest.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Optional

from aiohttp import web

from asr_server.core import InferenceCore
from asr_server.errors import ErrorCode, ServerError, as_server_error, invalid_argument
from asr_server.protocol import openai_api, websocket_asr
from asr_server.protocol.http_deadlines import BODY_TIMEOUT_KEY, BodyStalled, stalled_bodies_end
from asr_server.protocol import http_converters as hc
from asr_server.protocol import parameters as rules
from asr_server.protocol.runtime_settings import RuntimeSettings
from asr_server.protocol.status import HTTP_STATUS
from asr_server.proto_json import message_to_dict
from asr_server.messages import InferRequest

log = logging.getLogger(__name__)

HEADER_LENGTH = "Inference-Header-Content-Length"
MAX_BODY_BYTES = 64 << 20  # bytes; Triton's default --http-max-input-size
BODY_TIMEOUT_SECS = 60.0  # --http-body-timeout-secs (nginx's client_body_timeout)
# JSON work above these sizes runs in a worker thread (json and numpy list conversion hold the GIL
# but not the loop); below them the hop would cost more than the work.
OFFLOAD_JSON_BYTES = 64 * 1024  # bytes of request JSON
OFFLOAD_JSON_ELEMENTS = 16 * 1024  # tensor elements written as JSON lists
DECOUPLED_MESSAGE = "HTTP end point doesn't support models with decoupled transaction policy"
NO_CUDA_MESSAGE = "failed to register CUDA shared memory region: this server has no CUDA device"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_BODY_KEY = web.AppKey("max_body_bytes", int)


def json_response(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=hc.dumps(value), status=status, content_type="application/json")


def error_response(message: str, status: int) -> web.Response:
    return json_response({"error": message}, status)


def too_large(limit: int, size: Optional[int] = None) -> web.Response:
    """413, and the connection closes: the unread rest of the body is never drained."""
    body = "request body" if size is None else f"request body of {size} bytes"
    response = error_response(
        f"{body} exceeds the maximum allowed value of {limit} bytes; use --http-max-input-size to increase "
        f"the limit", 413,
    )
    response.force_close()
    return response


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes Triton's `{"error": ...}`; client mistakes are logged in one line."""
    limit = request.app[MAX_BODY_KEY]
    if request.content_length is not None and request.content_length > limit:
        log.warning("%s %s: Content-Length %d is over the cap", request.method, request.path, request.content_length)
        return too_large(limit, request.content_length)
    try:
        return await handler(request)
    except web.HTTPRequestEntityTooLarge:  # raised by request.read() once a body passes client_max_size
        log.warning("%s %s: body over the cap", request.method, request.path)
        return too_large(limit)
    except BodyStalled:
        raise  # answered by stalled_bodies_end, the middleware around this one
    except web.HTTPException as exc:  # routing errors raised by aiohttp itself
        if exc.status < 400:
            raise
        log.warning("%s %s: %s", request.method, request.path, exc.text or exc.reason)
        return error_response(exc.text or exc.reason, exc.status)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a response, never a crash
        error = as_server_error(exc)
        if not isinstance(exc, ServerError):
            log.exception("%s %s failed", request.method, request.path)
        elif error.is_client_error:
            log.warning("%s %s: %s", request.method, request.path, error.message)
        else:
            log.error("%s %s: %s", request.method, request.path, error.message)
        return error_response(error.message, HTTP_STATUS[error.code])


class HttpService:
    def __init__(self, core: InferenceCore, settings: RuntimeSettings) -> None:
        self.core = core
        self.settings = settings

    # ---- health and metadata --------------------------------------------------------------------
    async def live(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.core.live else 400)

    async def ready(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.core.server_ready() else 400)

    async def model_ready(self, request: web.Request) -> web.Response:
        name, version = _model(request)
        if self.core.model_ready(name, version):
            return web.Response(status=200)
        return json_response({"error": "Model version not ready"}, status=400)  # Triton's body

    async def server_metadata(self, request: web.Request) -> web.Response:
        return json_response(self.core.server_metadata())

    async def model_metadata(self, request: web.Request) -> web.Response:
        return json_response(hc.metadata_to_json(self.core.model_metadata(*_model(request))))

    async def model_config(self, request: web.Request) -> web.Response:
        return json_response(message_to_dict(self.core.model_config(*_model(request))))

    async def statistics(self, request: web.Request) -> web.Response:
        name, version = request.match_info.get("model", ""), request.match_info.get("version", "")
        return json_response(hc.statistics_to_json(self.core.statistics(name, version)))

    # ---- inference ------------------------------------------------------------------------------
    async def infer(self, request: web.Request) -> web.Response:
        name, version = _model(request)
        # Unknown models and decoupled ones are refused before the body is parsed.
        if self.core.model_config(name, version).model_transaction_policy.decoupled:
            raise ServerError(DECOUPLED_MESSAGE, ErrorCode.UNIMPLEMENTED)
        body = await request.read()
        header_length = request.headers.get(HEADER_LENGTH)
        json_size = len(body) if header_length is None else _int_or_zero(header_length)
        if json_size > OFFLOAD_JSON_BYTES:
            infer_request, form = await asyncio.to_thread(self._parse, name, version, body, header_length)
        else:
            infer_request, form = self._parse(name, version, body, header_length)
        transport = request.transport
        infer_request.cancelled = lambda: transport is None or transport.is_closing()
        response = await self.core.infer(infer_request)
        json_elements = sum(t.data.size for t in response.outputs if not form.is_binary(t.name))
        encode = (hc.response_to_json, response, infer_request.outputs, form, self.core.shared_memory)
        if json_elements > OFFLOAD_JSON_ELEMENTS:
            header, chunks = await asyncio.to_thread(*encode)
        else:
            header, chunks = encode[0](*encode[1:])
        if chunks:
            reply = web.Response(body=b"".join([header, *chunks]), content_type="application/octet-stream",
                                 headers={HEADER_LENGTH: str(len(header))})
        else:
            reply = web.Response(body=header, content_type="application/json")
        if _accepts_compression(request):
            reply.enable_compression()
        return reply

    def _parse(self, name: str, version: str, body: bytes, header_length) -> tuple[InferRequest, hc.OutputForm]:
        header, binary = hc.split_body(body, header_length)
        return hc.request_from_json(name, version, header, binary, self.core.shared_memory)

    # ---- repository -----------------------------------------------------------------------------
    async def repository_index(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        ready = body.get("ready", False)
        if not isinstance(ready, bool):
            raise invalid_argument("repository index 'ready' must be a boolean")
        return json_response(hc.repository_index_to_json(self.core.repository_index(ready_only=ready)))

    async def load(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        config, files = hc.load_request_from_json(name, await _json_body(request))
        await self.core.load_model(name, config, files)
        return web.Response(status=200)

    async def unload(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        await self.core.unload_model(name, hc.unload_dependents_from_json(name, await _json_body(request)))
        return web.Response(status=200)

    # ---- system shared memory -------------------------------------------------------------------
    async def shm_status(self, request: web.Request) -> web.Response:
        regions = self.core.shared_memory.status(request.match_info.get("region", ""))
        return json_response(hc.shared_memory_status_to_json(regions))

    async def shm_register(self, request: web.Request) -> web.Response:
        key, offset, byte_size = hc.shared_memory_register_from_json(await _json_body(request))
        await self.core.register_shared_memory(request.match_info["region"], key, offset, byte_size)
        return web.Response(status=200)

    async def shm_unregister(self, request: web.Request) -> web.Response:
        await self.core.unregister_shared_memory(request.match_info.get("region", ""))
        return web.Response(status=200)

    # ---- CUDA shared memory: there is no CUDA device to share -----------------------------------
    async def cuda_status(self, request: web.Request) -> web.Response:
        _no_cuda_region(request)
        return json_response([])

    async def cuda_register(self, request: web.Request) -> web.Response:
        raise ServerError(NO_CUDA_MESSAGE, ErrorCode.UNAVAILABLE)

    async def cuda_unregister(self, request: web.Request) -> web.Response:
        _no_cuda_region(request)
        return web.Response(status=200)

    # ---- logging and tracing --------------------------------------------------------------------
    async def get_logging(self, request: web.Request) -> web.Response:
        return json_response(self.settings.update_log({}))

    async def post_logging(self, request: web.Request) -> web.Response:
        changes = rules.log_changes(await _json_body(request), self.settings.update_log({}))
        return json_response(self.settings.update_log(changes))

    async def get_trace(self, request: web.Request) -> web.Response:
        return json_response(hc.trace_to_json(self.settings.trace(self._trace_model(request))))

    async def post_trace(self, request: web.Request) -> web.Response:
        model = self._trace_model(request)
        changes = hc.trace_changes_from_json(await _json_body(request))
        try:
            current = self.settings.update_trace(model, changes)
        except KeyError as exc:
            raise invalid_argument(f"unknown trace setting {exc.args[0]!r}") from None
        return json_response(hc.trace_to_json(current))

    def _trace_model(self, request: web.Request) -> str:
        model = request.match_info.get("model", "")
        if model and not self.core.model_ready(model):
            # Triton answers this route's unknown model with 400 (not 404) and its own wording.
            raise invalid_argument(f"Request for unknown model : {model}")
        return model


def _model(request: web.Request) -> tuple[str, str]:
    return request.match_info["model"], request.match_info.get("version", "")


def _int_or_zero(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0  # split_body reports the malformed header


def _accepts_compression(request: web.Request) -> bool:
    accepted = request.headers.get("Accept-Encoding", "").lower()
    return "gzip" in accepted or "deflate" in accepted


async def _json_body(request: web.Request) -> dict:
    """The body of a control request: an object, or nothing at all."""
    return hc.loads_object(await request.read())


def _no_cuda_region(request: web.Request) -> None:
    region = request.match_info.get("region", "")
    if region:
        raise ServerError(f"Unable to find cuda shared memory region: '{region}'", ErrorCode.NOT_FOUND)


def make_app(core: InferenceCore, settings: RuntimeSettings, max_body_bytes: int = MAX_BODY_BYTES,
             body_timeout_secs: float = BODY_TIMEOUT_SECS) -> web.Application:
    service = HttpService(core, settings)
    app = web.Application(middlewares=[stalled_bodies_end, errors_as_json], client_max_size=max_body_bytes)
    app[MAX_BODY_KEY] = max_body_bytes
    app[BODY_TIMEOUT_KEY] = body_timeout_secs
    r = app.router
    r.add_get("/v2/health/live", service.live)
    r.add_get("/v2/health/ready", service.ready)
    r.add_get("/v2", service.server_metadata)
    # Registered before /v2/models/{model} so that "stats" is not taken for a model name (as in Triton).
    r.add_get("/v2/models/stats", service.statistics)
    for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        r.add_get(prefix, service.model_metadata)
        r.add_get(prefix + "/ready", service.model_ready)
        r.add_get(prefix + "/config", service.model_config)
        r.add_get(prefix + "/stats", service.statistics)
        r.add_post(prefix + "/infer", service.infer)
    r.add_post("/v2/repository/index", service.repository_index)
    r.add_post("/v2/repository/models/{model}/load", service.load)
    r.add_post("/v2/repository/models/{model}/unload", service.unload)
    r.add_get("/v2/systemsharedmemory/status", service.shm_status)
    r.add_get("/v2/systemsharedmemory/region/{region}/status", service.shm_status)
    r.add_post("/v2/systemsharedmemory/region/{region}/register", service.shm_register)
    r.add_post("/v2/systemsharedmemory/unregister", service.shm_unregister)
    r.add_post("/v2/systemsharedmemory/region/{region}/unregister", service.shm_unregister)
    r.add_get("/v2/cudasharedmemory/status", service.cuda_status)
    r.add_get("/v2/cudasharedmemory/region/{region}/status", service.cuda_status)
    r.add_post("/v2/cudasharedmemory/region/{region}/register", service.cuda_register)
    r.add_post("/v2/cudasharedmemory/unregister", service.cuda_unregister)
    r.add_post("/v2/cudasharedmemory/region/{region}/unregister", service.cuda_unregister)
    r.add_get("/v2/logging", service.get_logging)
    r.add_post("/v2/logging", service.post_logging)
    r.add_get("/v2/trace/setting", service.get_trace)
    r.add_post("/v2/trace/setting", service.post_trace)
    r.add_get("/v2/models/{model}/trace/setting", service.get_trace)
    r.add_post("/v2/models/{model}/trace/setting", service.post_trace)
    openai_api.add_routes(app, core, max_body_bytes)
    websocket_asr.add_routes(app, core)
    return app
