"""The server process: models, gRPC, HTTP and metrics endpoints, and an ordered shutdown.

Start: load models (per model-control mode), then open the endpoints. Stop (uvicorn's order): stop
accepting, let in-flight requests finish within the exit timeout, cancel the rest with a message, then
unload every model.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import logging
import signal
import socket
from typing import Optional

import grpc
from aiohttp import web

from asr_server import gc_freeze, metrics, tls
from asr_server.gpu import devices as gpu_devices
from asr_server.core import CorePort, InferenceCore
from asr_server.errors import ServerError
from asr_server.listen_address import bind_target
from asr_server.protocol import grpc_service, restrictions
from asr_server.protocol.runtime_settings import RuntimeSettings
from asr_server.repository.manager import ModelManager
from asr_server.settings import ServerSettings, validate

log = logging.getLogger(__name__)
# After answering a request whose body was not read (413 over --http-max-input-size), read and drop what the
# client still sends for this long so that it sees the answer, then close (aiohttp's default: 10 s).
LINGER_S = 1.0


class Server:
    def __init__(self, settings: ServerSettings) -> None:
        self.settings = validate(settings)
        # BLS and ensemble steps call back into the core through this port; connected to the core at start.
        self.port = CorePort()
        self.manager = ModelManager(list(settings.model_repositories), port=self.port)
        self.core = InferenceCore(self.manager, settings.strict_readiness, settings.model_control_mode)
        self.runtime = RuntimeSettings(settings.log_verbose)
        self.grpc_port: Optional[int] = None  # the bound ports (differ from the settings when those are 0)
        self.http_port: Optional[int] = None
        self.metrics_port: Optional[int] = None
        self.private_grpc_port: Optional[int] = None  # a worker's own port, for its siblings
        self._grpc: Optional[grpc.aio.Server] = None
        self._grpc_service: Optional[grpc_service.InferenceService] = None
        self._web_runners: list[web.AppRunner] = []
        self._poll_task: Optional[asyncio.Task] = None
        self._stopped = asyncio.Event()
        self._copied_siblings = False  # a (re)started worker that began from another worker's state

    # ---- start ---------------------------------------------------------------------------------
    async def start(self) -> None:
        self.port.connect(self.core, asyncio.get_running_loop())
        try:
            await self._start()
        except BaseException:
            await self.stop()  # release whatever had started: ports, models
            raise

    async def _start(self) -> None:
        worker = self.settings.worker
        if worker is None:  # the workers' supervisor checked the ports once, before starting them
            self.check_ports_free(self.settings)
        else:
            from asr_server.workers import SiblingControl

            self.core.peers = SiblingControl(worker)
        for line in gpu_devices.describe_gpus():  # Triton logs the GPUs it found the same way
            log.info("%s", line)
        await self._load_startup_models()
        s = self.settings
        if s.allow_grpc:
            options = [
                ("grpc.max_receive_message_length", s.max_message_bytes),
                ("grpc.max_send_message_length", s.max_message_bytes),
                # workers share the port; a single server refuses a port in use (say it, as tritonserver)
                ("grpc.so_reuseport", 1 if worker is not None else 0),
            ]
            restricted = restrictions.parse(s.grpc_restricted_protocols, grpc_side=True)
            # a sibling worker forwards what a client was let do (and reads its state when it restarts)
            token = getattr(self.core.peers, "token", None)
            trusted = functools.partial(grpc_service.forwarded_by_sibling, token=token) if token else None
            interceptors = [restrictions.RestrictedProtocolInterceptor(restricted, trusted)] if restricted else []
            self._grpc = grpc.aio.server(options=options, interceptors=interceptors)
            self._grpc_service = grpc_service.add_to_server(self._grpc, self.core, self.runtime)
            address, credentials = f"{s.grpc_address}:{s.grpc_port}", tls.grpc_credentials(s)
            self.grpc_port = (self._grpc.add_secure_port(address, credentials) if credentials
                              else self._grpc.add_insecure_port(address))
            if self.grpc_port == 0:
                raise RuntimeError(f"could not bind gRPC to {s.grpc_address}:{s.grpc_port}")
            if worker is not None:  # its siblings forward model control here (asr_server/workers.py)
                self.private_grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
            await self._grpc.start()
            log.info("Started GRPCInferenceService at %s:%d", s.grpc_address, self.grpc_port)
        if s.allow_http:
            from asr_server.protocol.http_app import make_app

            app = make_app(self.core, self.runtime, max_body_bytes=s.http_max_input_size,
                           body_timeout_secs=s.http_body_timeout_secs)
            restricted = restrictions.parse(s.http_restricted_apis, grpc_side=False)
            if restricted:
                app.middlewares.append(restrictions.http_middleware(restricted))
            self.http_port = await self._serve(app, s.http_address, s.http_port, tls.http_ssl_context(s))
            log.info("Started HTTPService at %s:%d", s.http_address, self.http_port)
        if s.allow_metrics:
            app = web.Application()
            app.router.add_get("/metrics", self._metrics)
            self.metrics_port = await self._serve(app, s.metrics_address, s.metrics_port)
            log.info("Started Metrics Service at %s:%d", s.metrics_address, self.metrics_port)
        if s.model_control_mode == "poll":
            self._poll_task = asyncio.get_running_loop().create_task(self._poll_loop())
        if worker is not None:
            from asr_server.workers import write_entry

            if self._copied_siblings:
                self.core.changed_names = set()  # from now on, changes reach this worker: newer than any state
            write_entry(worker, self.private_grpc_port, self.metrics_port)
            if self._copied_siblings:
                try:
                    await self._catch_up()
                finally:
                    self.core.changed_names = None
        gc_freeze.settle()

    @staticmethod
    def check_ports_free(s: ServerSettings) -> None:
        """A port in use is found before any model loads (minutes for a big repository), and said in one line
        (tritonserver's words) instead of a bind error after the load."""
        for service, enabled, address, port in (("GRPC", s.allow_grpc, s.grpc_address, s.grpc_port),
                                                ("HTTP", s.allow_http, s.http_address, s.http_port),
                                                ("Metrics", s.allow_metrics, s.metrics_address, s.metrics_port)):
            if not enabled or port == 0:
                continue
            target = bind_target(address, port)
            if target is None:
                continue  # a name the probe cannot resolve: the endpoint's own bind reports it
            family, host = target
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
                try:
                    probe.bind((host, port))
                except OSError as exc:
                    if exc.errno != errno.EADDRINUSE:
                        continue  # not ours to judge (e.g. an address of another host): the bind says it
                    raise ServerError(f"failed to start {service} service: Unavailable - Socket "
                                      f"'{address}:{port}' already in use") from None

    async def _load_startup_models(self) -> None:
        s = self.settings
        if s.model_control_mode == "explicit":
            names = self.manager.repository_names() if "*" in s.load_models else list(s.load_models)
        else:
            names = self.manager.repository_names()
        siblings = None
        if s.worker is not None and s.model_control_mode == "explicit":
            # a restarted worker serves what its siblings serve now, as they were told to since they started
            siblings = await self.core.peers.state()
            if siblings is not None:
                names = list(siblings.configs)
                self._copied_siblings = True
        await self.manager.load_many(names)
        if siblings is not None:
            await self._match_siblings(siblings)
        failed = [e for e in self.manager.models.values() if not e.versions]
        for entry in failed:
            log.error("model '%s' is UNAVAILABLE: %s", entry.name, entry.reason)
        if failed and s.exit_on_error:
            await self.manager.shutdown()
            raise ServerError(f"failed to load all models: {', '.join(e.name for e in failed)}")

    async def _match_siblings(self, siblings, all_changes: bool = False) -> None:
        """Models a client loaded with its own config are loaded again with it; regions are registered.
        ``all_changes``: also load what siblings serve and this worker does not, unload what they stopped
        serving, and drop regions they dropped (the catch-up after this worker registered)."""
        from google.protobuf import json_format

        changed = self.core.changed_names if all_changes else None

        def newer(name: str) -> bool:
            """Changed here by a client since this worker registered: newer than the siblings' state."""
            return changed is not None and name in changed

        for name, config in siblings.configs.items():
            if newer(name):
                continue
            try:
                own = json_format.MessageToDict(self.core.model_config(name, ""), preserving_proto_field_name=True)
            except ServerError:
                if not all_changes:
                    continue  # it failed to load here: logged with the other failures
                own = None  # loaded by a client while this worker was loading
            if own != config:
                try:
                    await self.manager.load(name, json.dumps(config))
                except ServerError as exc:  # served from the repository's config: the worker must still start
                    log.error("model '%s' keeps the repository's config, not the other workers': %s", name, exc)
        if all_changes:
            for name in [n for n, e in self.manager.models.items() if e.versions and n not in siblings.configs]:
                if newer(name):
                    continue
                try:
                    await self.manager.unload(name)
                except ServerError as exc:
                    log.error("model '%s', unloaded by the other workers, stays loaded here: %s", name, exc)
            theirs = {region[0]: region[1:] for region in siblings.regions}
            for region in self.core.shared_memory.status():
                if not newer(region.name) and theirs.get(region.name) != (region.key, region.offset,
                                                                           region.byte_size):
                    self.core.shared_memory.unregister(region.name)  # dropped, or registered anew since
        registered = {region.name for region in self.core.shared_memory.status()}
        for name, key, offset, byte_size in siblings.regions:
            if name in registered or newer(name):
                continue
            try:
                self.core.shared_memory.register(name, key, offset, byte_size)
            except ServerError as exc:  # e.g. the client removed the region since: the others still count
                log.warning("shared memory region '%s' of the other workers not registered: %s", name, exc)

    async def _catch_up(self) -> None:
        """A restarted worker read its siblings' state before loading, which takes seconds to minutes; model
        control and region changes made meanwhile went to the siblings alone (this worker was not yet in the
        registry). Now that it is, later changes are forwarded here; the ones made during the load are read
        once more and applied, except to the models and regions a client changed here since it registered
        (core.changed_names: those changes are newer than the state read)."""
        siblings = await self.core.peers.state()
        if siblings is not None:
            await self._match_siblings(siblings, all_changes=True)

    async def _serve(self, app: web.Application, host: str, port: int, ssl_context=None) -> int:
        # shutdown_timeout: how long stop() waits for HTTP requests in flight (a client holding a partial
        # body included) before closing them; aiohttp's default of 60 s would override --exit-timeout-secs.
        # keepalive_timeout: a connection whose next request's headers have not all arrived in this time is
        # closed (aiohttp's own default is an hour, which lets slowloris clients hold connections for good)
        runner = web.AppRunner(app, access_log=None, lingering_time=LINGER_S,
                               shutdown_timeout=self.settings.exit_timeout_secs,
                               keepalive_timeout=self.settings.http_idle_timeout_secs)
        await runner.setup()
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context, reuse_port=self.settings.worker is not None)
        await site.start()
        self._web_runners.append(runner)
        return site._server.sockets[0].getsockname()[1]  # the bound port when port is 0

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=metrics.render(self.manager), content_type="text/plain")

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.repository_poll_secs)
            try:
                if await self.manager.poll():
                    gc_freeze.settle()
            except Exception:  # noqa: BLE001 - polling goes on after a failed pass
                log.exception("repository poll failed")

    # ---- stop ----------------------------------------------------------------------------------
    async def stop(self) -> None:
        self.core.live = False
        if self._poll_task is not None:
            self._poll_task.cancel()
        if self._grpc is not None:
            # Stops accepting at once; in-flight RPCs get the grace period, then are cancelled. Idle streams
            # are ended now instead: only their requests in flight are waited for.
            if self._grpc_service is not None:
                self._grpc_service.close_streams()
            await self._grpc.stop(self.settings.exit_timeout_secs)
        for runner in self._web_runners:
            await runner.cleanup()
        await self.manager.shutdown()
        self.core.shared_memory.close()
        self._stopped.set()

    async def serve_forever(self) -> None:
        """Run until SIGINT/SIGTERM, then stop in order."""
        await self.start()
        loop = asyncio.get_running_loop()
        stop_requested = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop_requested.set)
        await stop_requested.wait()
        log.info("shutting down")
        await self.stop()

    async def __aenter__(self) -> "Server":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()
