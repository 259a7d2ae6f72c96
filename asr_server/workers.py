"""`asr-server --workers N`: N server processes on the same gRPC and HTTP ports, so that one machine's cores
are used beyond one interpreter lock (as gunicorn and uvicorn run workers).

- The ports are shared with SO_REUSEPORT: the kernel hands each new connection to one worker, so a stream (one
  gRPC call on one connection) stays on the worker that holds its state. Each worker loads its own model
  instances.
- The supervisor (this process) starts the workers, restarts one that dies (its streams end with the
  connection's error: clients see UNAVAILABLE, never a silent restart), serves the metrics port with every
  worker's metrics labelled `worker="i"`, and on SIGTERM/SIGINT stops them all (each drains as one server does).
- Each worker also listens on a private 127.0.0.1 gRPC port and writes it, with its private metrics port, to a
  registry folder. A model load or unload, or a shared-memory registration, a client sends reaches one worker;
  that worker forwards it to its siblings' private ports (marked as forwarded with the registry's secret token,
  so that it goes no further and no client can pass for a sibling), so every worker serves the same models and
  regions. A restarted worker serves what a sibling serves: the same
  models with the same configs (one a client overrode at load included; a load that brought its own files
  cannot be replayed and comes from the repository) and the same shared-memory regions.

When it helps: the Python around each request (conversion, scheduling, the python models' code) runs under
one interpreter lock per process; workers multiply it. `instance_count` adds model instances inside one
process (threads: good for work that releases the lock, such as ONNX Runtime), and the python backend's
`instance_process` puts one model's instances in processes of their own (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import multiprocessing as mp
import os
import re
import secrets
import signal
import socket
import tempfile
import time
from pathlib import Path
from typing import Optional

from asr_server.child_process import die_with_parent
from asr_server.errors import ErrorCode, ServerError
from asr_server.listen_address import bind_target

log = logging.getLogger(__name__)

FORWARDED_HEADER = "asr-worker-forwarded"  # a control request one worker passes to its siblings: the token
TOKEN_FILE = "token"  # in the registry folder (mkdtemp: only this user can read it)
RESTART_DELAY_S = 1.0  # a worker that dies again at once is not restarted in a tight loop...
RESTART_DELAY_MAX_S = 30.0  # ... the delay doubles while it keeps dying young, up to this
RESTART_STABLE_S = 60.0  # a worker that lived this long starts the delay over
READY_TIMEOUT_S = 600.0  # a worker loads its models before it reports ready
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?( .*)$")


@dataclasses.dataclass(frozen=True)
class WorkerRole:
    """What makes a server one worker of several (ServerSettings.worker)."""

    index: int
    registry: Path  # the folder where every worker writes worker-<index>.json


def write_entry(role: WorkerRole, grpc_port: int, metrics_port: Optional[int]) -> None:
    entry = {"index": role.index, "pid": os.getpid(), "grpc": grpc_port, "metrics": metrics_port}
    tmp = role.registry / f".worker-{role.index}.json.tmp"
    tmp.write_text(json.dumps(entry))
    tmp.replace(role.registry / f"worker-{role.index}.json")  # atomic: readers never see half a file


def worker_token(registry: Path) -> str:
    """The secret that marks a control request as forwarded by a sibling, shared by every worker of one
    supervisor through the registry folder: the first caller writes it, the others read it (a link is created
    whole or not at all, so no one reads a half-written token)."""
    path = registry / TOKEN_FILE
    if not path.exists():
        draft = registry / f".token-{os.getpid()}"
        draft.write_text(secrets.token_hex(16))
        try:
            os.link(draft, path)
        except FileExistsError:
            pass  # another worker was first: its token is the one
        finally:
            draft.unlink()
    return path.read_text()


def read_entries(registry: Path) -> list[dict]:
    entries = []
    for path in sorted(registry.glob("worker-*.json")):
        try:
            entries.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # being replaced by a restarted worker
    return entries


class SiblingControl:
    """Passes a model load or unload to every other worker (InferenceCore.peers)."""

    def __init__(self, role: WorkerRole) -> None:
        self.role = role
        self.token = worker_token(role.registry)  # what grpc_service checks on a forwarded request

    def _siblings(self) -> list[dict]:
        return [e for e in read_entries(self.role.registry) if e["index"] != self.role.index]

    async def _each(self, call) -> None:
        import tritonclient.grpc.aio as aioclient

        failed = []
        for entry in self._siblings():
            async with aioclient.InferenceServerClient(f"127.0.0.1:{entry['grpc']}") as client:
                try:
                    await call(client, {FORWARDED_HEADER: self.token})
                except Exception as exc:  # noqa: BLE001 - reported with the worker it failed on
                    failed.append(f"worker {entry['index']}: {exc}")
        if failed:
            raise ServerError("the model control request did not reach every worker: " + "; ".join(failed),
                              ErrorCode.INTERNAL)

    async def load(self, name: str, config: Optional[str], files: Optional[dict[str, bytes]]) -> None:
        await self._each(lambda c, h: c.load_model(name, headers=h, config=config,
                                                   files={f"file:{k}": v for k, v in (files or {}).items()} or None))

    async def unload(self, name: str, unload_dependents: bool) -> None:
        await self._each(lambda c, h: c.unload_model(name, headers=h, unload_dependents=unload_dependents))

    async def register_shared_memory(self, name: str, key: str, offset: int, byte_size: int) -> None:
        await self._each(lambda c, h: c.register_system_shared_memory(name, key, byte_size, offset, headers=h))

    async def unregister_shared_memory(self, name: str) -> None:
        await self._each(lambda c, h: c.unregister_system_shared_memory(name, headers=h))

    async def state(self) -> Optional["SiblingState"]:
        """What a sibling serves, for a restarted worker to catch up: its READY models with their configs (a
        config a client overrode at load included) and its shared-memory regions; None when none answers."""
        import tritonclient.grpc.aio as aioclient
        from tritonclient.utils import InferenceServerException

        headers = {FORWARDED_HEADER: self.token}  # passes a --grpc-restricted-protocol on the model repository
        for entry in self._siblings():
            try:
                async with aioclient.InferenceServerClient(f"127.0.0.1:{entry['grpc']}") as client:
                    index = await client.get_model_repository_index(headers=headers, as_json=True)
                    names = [m["name"] for m in index.get("models", []) if m.get("state") == "READY"]
                    configs = {}
                    for name in dict.fromkeys(names):
                        try:
                            configs[name] = (await client.get_model_config(name, headers=headers,
                                                                            as_json=True))["config"]
                        except InferenceServerException:
                            continue  # unloaded since the index was read
                    status = await client.get_system_shared_memory_status(headers=headers, as_json=True)
                regions = [(r["name"], r["key"], int(r.get("offset", 0)), int(r["byte_size"]))
                           for r in status.get("regions", {}).values()]
                return SiblingState(configs, regions)
            except Exception:  # noqa: BLE001 - try the next sibling
                continue
        return None


@dataclasses.dataclass(frozen=True)
class SiblingState:
    configs: dict  # model name -> its config as Triton's JSON (the ModelConfig endpoint's)
    regions: list  # (name, key, offset, byte_size) of each registered system shared-memory region


# ---- the supervisor ---------------------------------------------------------------------------------------
def resolve_ports(settings):
    """Port 0 means "any free port": pick one now, so that every worker binds the same one. The probes stay
    bound until all are picked, so the ports differ (gRPC and HTTP bind with SO_REUSEPORT: two equal ports
    would be shared silently)."""
    changes = {}
    with contextlib.ExitStack() as probes:
        for field, address in (("grpc_port", settings.grpc_address), ("http_port", settings.http_address),
                               ("metrics_port", settings.metrics_address)):
            if getattr(settings, field) != 0:
                continue
            target = bind_target(address, 0)
            if target is not None:  # a name that does not resolve: the workers' bind reports it
                family, host = target
                probe = probes.enter_context(socket.socket(family, socket.SOCK_STREAM))
                probe.bind((host, 0))
                changes[field] = probe.getsockname()[1]
    return dataclasses.replace(settings, **changes)


def reserved_ports(settings) -> contextlib.ExitStack:
    """Placeholders on the shared gRPC and HTTP ports while the workers start: bound with SO_REUSEPORT and not
    listening, so each worker's listener joins them, but no other bind is handed these ports meanwhile (each
    worker binds private ports of its own on "any free port", with SO_REUSEPORT too: one of them landing on a
    shared port would silently take a share of its connections). Close it once the workers listen."""
    held = contextlib.ExitStack()
    try:
        for enabled, address, port in ((settings.allow_grpc, settings.grpc_address, settings.grpc_port),
                                       (settings.allow_http, settings.http_address, settings.http_port)):
            if not enabled:
                continue
            target = bind_target(address, port)
            if target is None:
                continue  # the workers' own bind reports it
            family, host = target
            placeholder = held.enter_context(socket.socket(family, socket.SOCK_STREAM))
            placeholder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            placeholder.bind((host, port))
    except OSError as exc:
        held.close()
        raise ServerError(f"failed to start: Unavailable - Socket '{address}:{port}' already in use ({exc})"
                          ) from None
    return held


def _worker_main(settings, index: int, registry: str) -> None:
    """A worker process: one server, its metrics on a private port (the supervisor serves the public one)."""
    from asr_server.cli import configure_logging
    from asr_server.server import Server

    die_with_parent()
    configure_logging(settings.log_verbose, prefix=f"worker {index} ")
    role = WorkerRole(index, Path(registry))
    worker_settings = dataclasses.replace(settings, workers=1, worker=role, metrics_address="127.0.0.1",
                                          metrics_port=0)
    try:
        asyncio.run(Server(worker_settings).serve_forever())
    except KeyboardInterrupt:
        pass


def relabel(text: str, index: int) -> list[str]:
    """Prometheus text lines with worker="<index>" added to every sample."""
    out = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if line.startswith("#") or not match:
            out.append(line)
            continue
        name, labels, rest = match.groups()
        inner = labels[1:-1] if labels else ""
        out.append(f'{name}{{worker="{index}"{"," + inner if inner else ""}}}{rest}')
    return out


def merge_families(texts: list[list[str]]) -> list[str]:
    """Several Prometheus texts as one: each metric family once, its HELP and TYPE lines then every text's
    samples of it (the format wants a family's lines together; a parser reads a family met twice as two)."""
    families: dict[str, list[str]] = {}  # family -> its lines, in the order families are first met
    for lines in texts:
        family = ""
        for line in lines:
            if line.startswith(("# HELP ", "# TYPE ")):
                family = line.split(maxsplit=3)[2]
                block = families.setdefault(family, [])
                if line not in block:
                    block.append(line)
            elif line.strip():
                families.setdefault(family, []).append(line)
    return [line for block in families.values() for line in block]


class Supervisor:
    def __init__(self, settings) -> None:
        self.settings = resolve_ports(settings)
        self.count = settings.workers
        self.registry = Path(tempfile.mkdtemp(prefix="asr-workers-"))
        worker_token(self.registry)  # made before any worker starts
        self.context = mp.get_context("spawn")
        self.processes: dict[int, mp.Process] = {}
        self.started_at: dict[int, float] = {}  # monotonic start of each worker's current process
        self.restart_delay: dict[int, float] = {}  # the wait before its next restart
        self.stopping = False

    def _spawn(self, index: int) -> None:
        (self.registry / f"worker-{index}.json").unlink(missing_ok=True)
        process = self.context.Process(target=_worker_main, args=(self.settings, index, str(self.registry)),
                                       name=f"asr-worker-{index}")
        process.start()
        self.processes[index] = process
        self.started_at[index] = time.monotonic()
        log.info("worker %d started (pid %d)", index, process.pid)

    def _next_delay(self, index: int) -> float:
        """The wait before restarting worker `index`: RESTART_DELAY_S, doubled each time it died young (a
        worker that fails at start, say on a repository edited since, is not restarted every second forever),
        back to RESTART_DELAY_S once a process of it lived RESTART_STABLE_S."""
        lived = time.monotonic() - self.started_at.get(index, 0.0)
        delay = RESTART_DELAY_S if lived >= RESTART_STABLE_S else min(
            RESTART_DELAY_MAX_S, 2 * self.restart_delay.get(index, RESTART_DELAY_S / 2))
        self.restart_delay[index] = delay
        return delay

    async def _wait_ready(self, stop: asyncio.Event) -> bool:
        """True once every worker is ready; False when asked to stop first (SIGTERM while models load)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(read_entries(self.registry)) < self.count:
            if stop.is_set():
                return False
            dead = [i for i, p in self.processes.items() if not p.is_alive()]
            if dead:
                raise ServerError(f"worker {dead[0]} exited with code {self.processes[dead[0]].exitcode} before "
                                  "it was ready (its log lines above say why)")
            if time.monotonic() > deadline:
                raise ServerError(f"the workers were not ready after {READY_TIMEOUT_S:g} s")
            await asyncio.sleep(0.2)  # other processes: nothing to wait on but their registry files
        return True

    async def _metrics(self, request):
        import aiohttp
        from aiohttp import web

        texts = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            for entry in read_entries(self.registry):
                try:
                    async with session.get(f"http://127.0.0.1:{entry['metrics']}/metrics") as response:
                        texts.append(relabel(await response.text(), entry["index"]))
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    continue  # a worker being restarted: its metrics come back with it
        return web.Response(text="\n".join(merge_families(texts)) + "\n", content_type="text/plain")

    async def _serve_metrics(self):
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.settings.metrics_address, self.settings.metrics_port).start()
        log.info("Started Metrics Service at %s:%d (every worker's, labelled worker=\"i\")",
                 self.settings.metrics_address, self.settings.metrics_port)
        return runner

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        runner = None
        try:
            # The public ports are held before the workers start: each worker binds private ports of its own
            # ("any free port"), and none of them may take a public one (reserved_ports).
            if self.settings.allow_metrics:
                runner = await self._serve_metrics()
            with reserved_ports(self.settings):
                for index in range(self.count):
                    self._spawn(index)
                if not await self._wait_ready(stop):
                    return  # stopped while the workers started: the finally below stops them
            log.info("%d workers serving gRPC at %s:%d and HTTP at %s:%d (registry %s)", self.count,
                     self.settings.grpc_address, self.settings.grpc_port, self.settings.http_address,
                     self.settings.http_port, self.registry)
            restart_at: dict[int, float] = {}  # dead workers, by when they are restarted
            while not stop.is_set():
                for index, process in list(self.processes.items()):
                    if index not in restart_at and not process.is_alive():
                        delay = self._next_delay(index)
                        log.error("worker %d (pid %d) exited with code %s: its streams are cut; restarting it in "
                                  "%g s", index, process.pid, process.exitcode, delay)
                        restart_at[index] = time.monotonic() + delay
                for index, due in list(restart_at.items()):
                    if time.monotonic() >= due:
                        del restart_at[index]
                        self._spawn(index)
                try:
                    await asyncio.wait_for(stop.wait(), 0.5)
                except asyncio.TimeoutError:
                    pass
        finally:
            log.info("shutting down %d workers", len(self.processes))
            if runner is not None:
                await runner.cleanup()
            await asyncio.to_thread(self._stop_all)

    def _stop_all(self) -> None:
        for process in self.processes.values():
            if process.is_alive():
                process.terminate()  # SIGTERM: each worker drains as a single server does
        deadline = time.monotonic() + self.settings.exit_timeout_secs + 10
        for process in self.processes.values():
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.error("worker pid %d did not stop in time: killed", process.pid)
                process.kill()
                process.join()
        for path in self.registry.glob("*"):
            path.unlink(missing_ok=True)
        self.registry.rmdir()
