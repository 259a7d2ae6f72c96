"""`asr-server --workers N` (asr_server/workers.py): worker processes on shared ports, model control reaching
every worker, metrics labelled by worker, a dead worker restarted with its streams cut loudly, a clean SIGTERM.

Each test runs the real command line in a subprocess on free 127.0.0.1 ports, with two workers."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

from asr_server.workers import read_entries
from asr_server.child_process import stop_process
from bench.soak import free_ports
from tests.conftest import BUNDLED_REPO, ROOT, copy_model
from tests.faults.conftest import ADD_SUB_SUM, add_sub
from tests.helpers.fault_models import gated_load, loads
from tests.helpers.sequence_models import accumulator
from tests.helpers.waiting import wait_until

WORKERS = 2
# how a taken port ends a start: our check's words (Triton's), or gRPC core's bind failure
PORT_TAKEN = re.compile(r"already in use|failed to bind", re.IGNORECASE)


class Workers:
    def __init__(self, repo: Path, tmp_path: Path, *load: str, mode: tuple = ("--model-control-mode", "explicit")
                 ) -> None:
        self.log_path = tmp_path / "server.log"
        loads = [a for name in load for a in ("--load-model", name)]
        for attempt in range(3):
            # Free ports are picked here and bound by the server later: another bind ("any free port", a
            # worker's private ones among them) can take one in between. Then the server says so and exits,
            # and new ports are picked.
            self.grpc, self.http, self.metrics = free_ports(3)
            self._log = open(self.log_path, "a")  # an earlier try's lines stay, after its marker
            self._log.write(f"---- start {attempt + 1} (ports {self.grpc}, {self.http}, {self.metrics})\n")
            self._log.flush()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "asr_server", "--model-repository", str(repo), "--workers", str(WORKERS),
                 "--grpc-address", "127.0.0.1", "--http-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
                 "--grpc-port", str(self.grpc), "--http-port", str(self.http), "--metrics-port", str(self.metrics),
                 *mode, *loads, "--exit-timeout-secs", "2"],
                cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT)
            self.url = f"127.0.0.1:{self.grpc}"
            try:
                self.registry = self._wait_for(r"workers serving .* \(registry (\S+)\)", 120)
                return
            except AssertionError:
                retry = attempt < 2 and self.process.poll() is not None and PORT_TAKEN.search(self.attempt_log())
                self.stop()  # nothing left running or open, whether it is tried again or not
                if not retry:
                    raise

    def log(self) -> str:
        return self.log_path.read_text()

    def attempt_log(self) -> str:
        """The log since the last start."""
        return self.log().rsplit("---- start ", 1)[-1]

    def _wait_for(self, pattern: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = re.search(pattern, self.log())
            if found:
                return found.group(1)
            assert self.process.poll() is None, self.log()
            time.sleep(0.2)  # another process: nothing to wait on but its log
        raise AssertionError(f"no {pattern!r} in the log after {timeout_s} s:\n{self.log()}")

    def entries(self) -> list[dict]:
        # the server's own reader: a restarted worker's file vanishes and comes back meanwhile
        return read_entries(Path(self.registry))

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/metrics", timeout=10) as response:
            return response.read().decode()

    def stop(self) -> float:
        started = time.monotonic()
        stop_process(self.process, 30)
        self._log.close()
        return time.monotonic() - started


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    copy_model(folder, BUNDLED_REPO / "add_sub")
    copy_model(folder, BUNDLED_REPO / "identity_fp32")
    accumulator(folder)
    return folder


async def on_each_worker(workers: Workers, call):
    """`call(client)` on every worker through its private port."""
    results = []
    for entry in workers.entries():
        async with aioclient.InferenceServerClient(f"127.0.0.1:{entry['grpc']}") as client:
            results.append(await call(client))
    return results


def connection_was_cut(error: Exception) -> bool:
    """Whether a stream ended because its connection died, as gRPC reports it.

    A killed peer surfaces as UNAVAILABLE when the reset is seen while reading, as gRPC core's own INTERNAL
    ("Internal error from Core": sending the next message failed) when it is seen while writing, or as its
    UNKNOWN "Stream removed"; a server never sends those two messages. An answer from the dead worker's sibling
    would come inside the stream instead (an InferenceServerException, not an AioRpcError).
    """
    if not isinstance(error, grpc.aio.AioRpcError):
        return False
    details = (error.details() or "").lower()
    return error.code() is grpc.StatusCode.UNAVAILABLE or (
        error.code() is grpc.StatusCode.INTERNAL and "error from core" in details) or (
        error.code() is grpc.StatusCode.UNKNOWN and "stream removed" in details)


async def test_every_worker_serves_and_model_control_reaches_them_all(repo, tmp_path):
    workers = Workers(repo, tmp_path, "add_sub")
    try:
        assert len(workers.entries()) == WORKERS and len({e["pid"] for e in workers.entries()}) == WORKERS
        sent = 0
        for _ in range(12):  # new connections: the kernel spreads them over the workers
            async with aioclient.InferenceServerClient(workers.url) as client:
                assert await add_sub(client) == ADD_SUB_SUM
                sent += 1
        async with aioclient.InferenceServerClient(workers.url) as client:
            await client.load_model("identity_fp32")
        assert await on_each_worker(workers, lambda c: c.is_model_ready("identity_fp32")) == [True] * WORKERS
        async with aioclient.InferenceServerClient(workers.url) as client:
            await client.unload_model("identity_fp32")
        assert await on_each_worker(workers, lambda c: c.is_model_ready("identity_fp32")) == [False] * WORKERS
        # one Prometheus view: each worker's samples labelled with it, the counts adding up to what was sent
        counts = re.findall(r'nv_inference_request_success\{worker="(\d)",model="add_sub",version="1"\} (\d+)',
                            workers.metrics_text())
        assert {w for w, _ in counts} <= {str(i) for i in range(WORKERS)} and counts
        assert sum(int(n) for _, n in counts) == sent
    finally:
        took = workers.stop()
    assert workers.process.returncode == 0 and took < 15
    for entry in workers.entries() or []:
        assert not Path(f"/proc/{entry['pid']}").exists()
    assert not Path(workers.registry).exists()  # removed with the workers


async def test_a_stream_stays_on_its_worker_for_hundreds_of_chunks(repo, tmp_path):
    workers = Workers(repo, tmp_path, "accumulator")
    try:
        async with aioclient.InferenceServerClient(workers.url) as client:
            async def requests():
                for i in range(300):
                    value = aioclient.InferInput("INPUT", [1, 1], "FP32")
                    value.set_data_from_numpy(np.ones((1, 1), np.float32))
                    yield dict(model_name="accumulator", inputs=[value], sequence_id=77, sequence_start=i == 0,
                               sequence_end=i == 299)

            totals = []
            async for result, error in client.stream_infer(requests()):
                assert error is None, error
                totals.append(float(result.as_numpy("OUTPUT").reshape(-1)[0]))
                if len(totals) == 300:
                    break
        assert totals == [float(i + 1) for i in range(300)]  # one worker held the state all along
    finally:
        workers.stop()


async def test_a_killed_worker_is_restarted_and_its_stream_ends_with_an_error(repo, tmp_path):
    import tritonclient.utils.shared_memory as shm

    accumulator(repo, "accumulator_spare")
    key = f"/workers_restart_{os.getpid()}"
    handle = shm.create_shared_memory_region("region", key, 64)
    workers = Workers(repo, tmp_path, "accumulator", "add_sub", "accumulator_spare")
    try:
        async with aioclient.InferenceServerClient(workers.url) as client:
            # after start: a model loaded with a config of the client's, a startup model unloaded, a region
            # registered; the restarted worker must serve what its sibling serves
            config = (await client.get_model_config("add_sub", as_json=True))["config"]
            config["parameters"] = {"overridden": {"string_value": "yes"}}
            await client.load_model("add_sub", config=json.dumps(config))
            await client.load_model("identity_fp32")
            await client.unload_model("accumulator_spare")
            await client.register_system_shared_memory("region", key, 64)
            queue: asyncio.Queue = asyncio.Queue()

            async def requests():
                for i in range(1000):
                    value = aioclient.InferInput("INPUT", [1, 1], "FP32")
                    value.set_data_from_numpy(np.ones((1, 1), np.float32))
                    yield dict(model_name="accumulator", inputs=[value], sequence_id=88, sequence_start=i == 0)
                    await queue.get()

            responses = client.stream_infer(requests())
            result, error = await responses.__anext__()
            assert error is None
            # the worker holding this connection: the one whose accumulator counted a sequence
            holders = await on_each_worker(workers, lambda c: c.get_inference_statistics("accumulator"))
            counted = [int(s.model_stats[0].inference_stats.success.count) for s in holders]
            victim = workers.entries()[counted.index(1)]
            os.kill(victim["pid"], signal.SIGKILL)
            queue.put_nowait(None)
            # the stream is cut loudly by the transport, not restarted silently on the sibling (which would
            # answer with an error of its own: a sequence it never saw)
            with pytest.raises((InferenceServerException, grpc.aio.AioRpcError)) as cut:
                while True:
                    result, error = await asyncio.wait_for(responses.__anext__(), 30)
                    if error is not None:
                        raise error
                    queue.put_nowait(None)
            assert connection_was_cut(cut.value), cut.value
        workers._wait_for(rf"(worker {victim['index']}) \(pid {victim['pid']}\) exited", 30)
        # the new worker loads its models, then registers
        assert await wait_until(lambda: any(e["index"] == victim["index"] and e["pid"] != victim["pid"]
                                            for e in workers.entries()), 60, 0.2)
        assert {e["index"] for e in workers.entries()} == set(range(WORKERS))
        assert await on_each_worker(workers, add_sub) == [ADD_SUB_SUM] * WORKERS
        assert await on_each_worker(workers, lambda c: c.is_model_ready("identity_fp32")) == [True] * WORKERS
        assert await on_each_worker(workers, lambda c: c.is_model_ready("accumulator_spare")) == [False] * WORKERS

        async def override(c):
            return (await c.get_model_config("add_sub", as_json=True))["config"].get("parameters", {})

        assert await on_each_worker(workers, override) == [{"overridden": {"string_value": "yes"}}] * WORKERS

        async def regions(c):
            return sorted((await c.get_system_shared_memory_status(as_json=True)).get("regions", {}))

        assert await on_each_worker(workers, regions) == [["region"]] * WORKERS
    finally:
        workers.stop()
        shm.destroy_shared_memory_region(handle)


async def test_model_control_during_a_restarted_workers_load_reaches_it(repo, tmp_path):
    """A restarted worker copies a sibling's state, then loads for as long as its models take; a load, an unload
    and a region made meanwhile reach only the sibling (the new worker is not yet in the registry). Once the
    new worker registers, it catches up with them."""
    import tritonclient.utils.shared_memory as shm

    accumulator(repo, "accumulator_spare")
    gate = tmp_path / "gate"
    gate.touch()
    slow = gated_load(repo, gate)
    key = f"/workers_catch_up_{os.getpid()}"
    handle = shm.create_shared_memory_region("late_region", key, 64)
    workers = Workers(repo, tmp_path, "gated_load", "add_sub", "accumulator_spare")
    try:
        assert loads(slow) == WORKERS
        gate.unlink()
        victim = workers.entries()[0]
        os.kill(victim["pid"], signal.SIGKILL)
        # the new worker has read its sibling's state and is loading: it waits at the gate
        assert await wait_until(lambda: loads(slow) == WORKERS + 1, 60, 0.1), workers.log()
        async with aioclient.InferenceServerClient(workers.url) as client:  # reaches the surviving worker
            await client.unload_model("accumulator_spare")
            await client.load_model("identity_fp32")
            await client.register_system_shared_memory("late_region", key, 64)
        gate.touch()
        assert await wait_until(lambda: any(e["index"] == victim["index"] and e["pid"] != victim["pid"]
                                            for e in workers.entries()), 60, 0.2)

        async def serves(c):
            regions = sorted((await c.get_system_shared_memory_status(as_json=True)).get("regions", {}))
            return (await c.is_model_ready("identity_fp32"), await c.is_model_ready("accumulator_spare"), regions)

        # the catch-up runs right after the new worker registers
        async def caught_up():
            return await on_each_worker(workers, serves) == [(True, False, ["late_region"])] * WORKERS

        assert await wait_until(caught_up, 30, 0.2), workers.log()
    finally:
        workers.stop()
        shm.destroy_shared_memory_region(handle)


async def test_polling_reaches_every_worker(repo, tmp_path):
    """--model-control-mode poll: each worker polls the repository itself, so a model added to it is served
    by every worker."""
    (repo / "identity_fp32").rename(tmp_path / "identity_fp32")  # not there at start
    workers = Workers(repo, tmp_path, mode=("--model-control-mode", "poll", "--repository-poll-secs", "1"))
    try:
        assert await on_each_worker(workers, lambda c: c.is_model_ready("identity_fp32")) == [False] * WORKERS
        (tmp_path / "identity_fp32").rename(repo / "identity_fp32")

        async def everywhere() -> bool:
            return all(await on_each_worker(workers, lambda c: c.is_model_ready("identity_fp32")))

        assert await wait_until(everywhere, 30, 0.5)  # each worker's next poll
    finally:
        workers.stop()


async def test_a_shared_memory_region_is_registered_on_every_worker(repo, tmp_path):
    """A client registers a region on one connection and may send requests naming it on another, which can
    reach another worker: registration (and unregistration) goes to every worker."""
    import tritonclient.utils.shared_memory as shm

    key = f"/workers_test_{os.getpid()}"
    handle = shm.create_shared_memory_region("region", key, 64)
    workers = Workers(repo, tmp_path, "add_sub")
    try:
        async with aioclient.InferenceServerClient(workers.url) as client:
            await client.register_system_shared_memory("region", key, 64)

        async def regions(c):
            return sorted((await c.get_system_shared_memory_status(as_json=True)).get("regions", {}))

        assert await on_each_worker(workers, regions) == [["region"]] * WORKERS
        async with aioclient.InferenceServerClient(workers.url) as client:
            await client.unregister_system_shared_memory("region")
        assert await on_each_worker(workers, regions) == [[]] * WORKERS
    finally:
        workers.stop()
        shm.destroy_shared_memory_region(handle)


async def test_the_catch_up_leaves_alone_what_a_client_changed_after_the_worker_registered(tmp_path):
    """The siblings' state a restarted worker applies once registered is older than any change a client made
    here since: a model or region in core.changed_names keeps its state; the rest follows the siblings (a
    model they dropped is unloaded, a region they registered anew is registered with their key)."""
    import tritonclient.utils.shared_memory as shm

    from asr_server.server import Server
    from asr_server.settings import ServerSettings
    from asr_server.workers import SiblingState

    repo = tmp_path / "repo"
    for name in ("add_sub", "identity_fp32"):
        copy_model(repo, BUNDLED_REPO / name)
    server = Server(ServerSettings(model_repositories=(repo,), model_control_mode="explicit"))
    keys = [f"/catch_up_{os.getpid()}_{i}" for i in range(2)]
    handles = [shm.create_shared_memory_region(f"r{i}", key, 64) for i, key in enumerate(keys)]
    try:
        await server.manager.load_many(["add_sub", "identity_fp32"])
        server.core.shared_memory.register("kept_here", keys[0], 0, 64)
        server.core.shared_memory.register("moved", keys[0], 0, 64)
        server.core.changed_names = {"identity_fp32", "kept_here"}  # a client's, after registration
        # the siblings (read earlier): neither model, and "moved" now on the other key
        await server._match_siblings(SiblingState({}, [("moved", keys[1], 0, 64)]), all_changes=True)
        assert server.core.model_ready("identity_fp32") and not server.core.model_ready("add_sub")
        regions = {r.name: r.key for r in server.core.shared_memory.status()}
        assert regions == {"kept_here": keys[0], "moved": keys[1]}
    finally:
        server.core.shared_memory.unregister("")
        await server.manager.shutdown()
        for handle in handles:
            shm.destroy_shared_memory_region(handle)


def test_ports_left_to_the_supervisor_are_picked_distinct(tmp_path, monkeypatch):
    """gRPC and HTTP bind with SO_REUSEPORT under workers: two equal picks would share a port silently, so
    each probe stays bound until all three are picked (the kernel then cannot hand out one port twice)."""
    import socket

    from asr_server import workers
    from asr_server.settings import ServerSettings

    bound, most = set(), [0]

    class Probe(socket.socket):
        def bind(self, address):
            super().bind(address)
            bound.add(self)
            most[0] = max(most[0], len(bound))

        def close(self):
            bound.discard(self)
            super().close()

    monkeypatch.setattr(workers.socket, "socket", Probe)
    settings = workers.resolve_ports(ServerSettings(model_repositories=(tmp_path,), grpc_address="127.0.0.1",
                                                    http_address="127.0.0.1", metrics_address="127.0.0.1",
                                                    grpc_port=0, http_port=0, metrics_port=0))
    ports = (settings.grpc_port, settings.http_port, settings.metrics_port)
    assert 0 not in ports and len(set(ports)) == 3
    assert most[0] == 3 and not bound  # all three held at once, all released


def test_shared_ports_are_held_while_the_workers_start(tmp_path):
    """While held, the ports refuse any other bind, yet a worker's SO_REUSEPORT listener joins and accepts."""
    import errno
    import socket

    from asr_server.settings import ServerSettings
    from asr_server.workers import reserved_ports

    grpc_port, http_port = free_ports(2)
    settings = ServerSettings(model_repositories=(tmp_path,), grpc_address="127.0.0.1", http_address="127.0.0.1",
                              grpc_port=grpc_port, http_port=http_port)
    with reserved_ports(settings):
        for port in (grpc_port, http_port):
            with socket.socket() as other, pytest.raises(OSError) as refused:
                other.bind(("127.0.0.1", port))
            assert refused.value.errno == errno.EADDRINUSE
            with socket.socket() as listener:  # as gRPC and aiohttp bind a worker's listener
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                listener.bind(("127.0.0.1", port))
                listener.listen()
                with socket.create_connection(("127.0.0.1", port), timeout=5):
                    accepted, _ = listener.accept()
                    accepted.close()
    with socket.socket() as after:
        after.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: past the test's TIME_WAIT
        after.bind(("127.0.0.1", grpc_port))  # released


async def in_process_workers(repo: Path, registry: Path, count: int = 2, restricted: tuple = ()) -> list:
    """`count` servers with worker roles on one registry, each on its own gRPC port (no shared port: what is
    tested is how they pass model control to each other)."""
    from asr_server.server import Server
    from asr_server.settings import ServerSettings
    from asr_server.workers import WorkerRole

    servers = []
    for index in range(count):
        server = Server(ServerSettings(model_repositories=(repo,), grpc_address="127.0.0.1", grpc_port=0,
                                       allow_http=False, allow_metrics=False, model_control_mode="explicit",
                                       worker=WorkerRole(index, registry), grpc_restricted_protocols=restricted))
        await server.start()
        servers.append(server)
    return servers


async def test_a_client_cannot_pass_for_a_sibling_and_restricted_control_reaches_every_worker(repo, tmp_path):
    """Forwarded control carries the registry's secret token: a client setting the header with any other
    value is a client, and its load reaches every worker. With --grpc-restricted-protocol on the model
    repository, a client's authorised load reaches every worker, and a restarted worker can read its siblings'
    state, though the siblings do not know the client's key."""
    from asr_server.workers import FORWARDED_HEADER, TOKEN_FILE

    for restricted, headers in (((), {FORWARDED_HEADER: "1"}),
                                (("model-repository:key=secret",), {"triton-grpc-protocol-key": "secret"})):
        registry = tmp_path / f"registry{len(restricted)}"
        registry.mkdir()
        servers = await in_process_workers(repo, registry, restricted=restricted)
        try:
            assert (registry / TOKEN_FILE).read_text() not in ("", "1")
            async with aioclient.InferenceServerClient(f"127.0.0.1:{servers[0].grpc_port}") as client:
                await client.load_model("identity_fp32", headers=headers)
            assert [s.core.model_ready("identity_fp32") for s in servers] == [True, True]
            state = await servers[1].core.peers.state()
            assert state is not None and "identity_fp32" in state.configs
            if restricted:  # a client without the key is still refused
                async with aioclient.InferenceServerClient(f"127.0.0.1:{servers[1].grpc_port}") as client:
                    with pytest.raises(InferenceServerException, match="restricted"):
                        await client.unload_model("identity_fp32", headers={FORWARDED_HEADER: "guess"})
        finally:
            for server in servers:
                await server.stop()


async def test_sigterm_while_the_workers_load_stops_the_supervisor_and_every_worker(tmp_path):
    """SIGTERM before the workers are ready (their models still loading) stops at once, workers included."""
    repo = tmp_path / "repo"
    copy_model(repo, BUNDLED_REPO / "identity_fp32")
    slow = gated_load(repo, tmp_path / "gate")  # the gate never opens: each load waits
    grpc_port, http_port, metrics_port = free_ports(3)
    with open(tmp_path / "server.log", "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "asr_server", "--model-repository", str(repo), "--workers", str(WORKERS),
             "--grpc-address", "127.0.0.1", "--http-address", "127.0.0.1", "--metrics-address", "127.0.0.1",
             "--grpc-port", str(grpc_port), "--http-port", str(http_port), "--metrics-port", str(metrics_port),
             "--exit-timeout-secs", "2"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            assert await wait_until(lambda: loads(slow) >= WORKERS, timeout_s=120)
            children = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True,
                                      text=True).stdout.split()
            process.send_signal(signal.SIGTERM)
            await asyncio.to_thread(process.wait, 20)  # before: the supervisor waited out the load (600 s)
        finally:
            stop_process(process, 5)
    assert len(children) >= WORKERS
    assert await wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in children), timeout_s=10)


def test_a_worker_that_keeps_dying_young_waits_longer_each_time(tmp_path, monkeypatch):
    from asr_server import workers
    from asr_server.settings import ServerSettings

    supervisor = workers.Supervisor(ServerSettings(model_repositories=(tmp_path,), grpc_address="127.0.0.1",
                                                   http_address="127.0.0.1", metrics_address="127.0.0.1"))
    try:
        now = [1000.0]
        monkeypatch.setattr(workers.time, "monotonic", lambda: now[0])
        delays = []
        for _ in range(8):
            supervisor.started_at[0] = now[0] - 2  # died two seconds after it started
            delays.append(supervisor._next_delay(0))
        assert delays == [1, 2, 4, 8, 16, 30, 30, 30]
        supervisor.started_at[0] = now[0] - workers.RESTART_STABLE_S  # lived long enough: start over
        assert supervisor._next_delay(0) == workers.RESTART_DELAY_S
    finally:
        for path in supervisor.registry.glob("*"):
            path.unlink()
        supervisor.registry.rmdir()


def test_the_metrics_view_keeps_each_family_together():
    """Prometheus' text format wants a family's lines together: the workers' samples of one metric follow its
    HELP and TYPE once, and a parser sees each family once with every worker's samples."""
    from prometheus_client.parser import text_string_to_metric_families

    from asr_server.workers import merge_families, relabel

    text = ("# HELP requests_total Requests.\n# TYPE requests_total counter\nrequests_total{model=\"a\"} 3\n"
            "# HELP latency Latency.\n# TYPE latency histogram\nlatency_bucket{le=\"+Inf\"} 2\nlatency_sum 0.5\n"
            "latency_count 2\n")
    merged = "\n".join(merge_families([relabel(text, 0), relabel(text, 1)])) + "\n"
    families = list(text_string_to_metric_families(merged))
    assert [f.name for f in families] == ["requests", "latency"]
    assert [(s.labels["worker"], s.value) for s in families[0].samples] == [("0", 3.0), ("1", 3.0)]
    assert len(families[1].samples) == 6 and merged.count("# TYPE latency histogram") == 1
