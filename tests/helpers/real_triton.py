"""Start a real NVIDIA tritonserver 2.51 (fetched by `bash scripts/get_triton.sh`) or our `asr-server` command
as a subprocess on free 127.0.0.1 ports, wait until ServerReady answers true, and always stop it.

Both servers run the same way (own process group, log in a temporary file, same readiness probe), so tests and
benchmarks compare them like for like:

    with real_triton(repo) as triton, asr_server_process(repo) as ours:
        grpcclient.InferenceServerClient(triton.grpc_url) ...
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

ROOT = Path(__file__).resolve().parents[2]
TRITON_DIR = ROOT / ".tools" / "triton"
TRITONSERVER = TRITON_DIR / "tritonserver"
BACKENDS = TRITON_DIR / "backends"
SKIP_REASON = "real Triton not fetched (run: bash scripts/get_triton.sh)"

READY_TIMEOUT_S = 60.0  # start-up of tritonserver with a python model takes about 2 s here
STOP_TIMEOUT_S = 10.0  # after SIGTERM; then the whole process group gets SIGKILL
POLL_INTERVAL_S = 0.1
START_ATTEMPTS = 3  # a free port picked here can be taken by someone else before the server binds it


def available() -> bool:
    """True when scripts/get_triton.sh has prepared tritonserver and its python backend."""
    return (TRITON_DIR / ".ready").exists() and TRITONSERVER.exists()


@dataclass(frozen=True)
class Endpoints:
    name: str  # "triton" or "asr_server", for messages and tables
    grpc_port: int
    http_port: int
    metrics_port: int
    log: Path  # the server's stdout and stderr

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def free_ports(count: int) -> list[int]:
    """Distinct ports free on 127.0.0.1 right now (held open together so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _server_ready(url: str) -> bool:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(url)
    try:
        return bool(client.is_server_ready(client_timeout=1.0))
    except InferenceServerException:
        return False
    finally:
        client.close()


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group (the server and, for Triton, its python stubs), SIGKILL it after a deadline."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
    # Stubs may outlive the server for a moment: clear the group whatever happened.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(STOP_TIMEOUT_S)


@contextlib.contextmanager
def _serve(name: str, command, env: dict, ready_timeout_s: float) -> Iterator[Endpoints]:
    """Start `command(grpc, http, metrics)` until ServerReady is true; retry on a port race; always stop."""
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as tmp:
        failure = ""
        for attempt in range(START_ATTEMPTS):
            grpc_port, http_port, metrics_port = free_ports(3)
            endpoints = Endpoints(name, grpc_port, http_port, metrics_port, Path(tmp) / f"server{attempt}.log")
            with open(endpoints.log, "wb") as log:
                proc = subprocess.Popen(command(grpc_port, http_port, metrics_port), stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                        start_new_session=True)
            try:
                deadline = time.monotonic() + ready_timeout_s
                while proc.poll() is None and time.monotonic() < deadline:
                    if _server_ready(endpoints.grpc_url):
                        break
                    time.sleep(POLL_INTERVAL_S)
                else:
                    if proc.poll() is None:
                        raise TimeoutError(f"{name} not ready after {ready_timeout_s:.0f} s:\n{endpoints.log_tail()}")
                    failure = f"{name} exited with {proc.returncode} before it was ready:\n{endpoints.log_tail()}"
                    if "address already in use" in failure.lower() or "failed to start" in failure.lower():
                        continue  # port race: try new ports
                    raise RuntimeError(failure)
                yield endpoints
                return
            finally:
                _stop(proc)
        raise RuntimeError(failure)


@contextlib.contextmanager
def real_triton(repo: Path, *, extra_args: Sequence[str] = (), ready_timeout_s: float = READY_TIMEOUT_S,
                exit_timeout_s: int = 5) -> Iterator[Endpoints]:
    """tritonserver 2.51 serving `repo`, its three endpoints on 127.0.0.1, no GPU metrics."""
    if not available():
        raise RuntimeError(SKIP_REASON)
    env = dict(os.environ, LD_LIBRARY_PATH=str((TRITON_DIR / "lib").resolve()))

    def command(grpc_port: int, http_port: int, metrics_port: int) -> list[str]:
        return [
            str(TRITONSERVER), f"--model-repository={repo}", f"--backend-directory={BACKENDS}",
            "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc_port),
            "--http-address", "127.0.0.1", "--http-port", str(http_port),
            "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port),
            "--allow-gpu-metrics", "false", f"--exit-timeout-secs={exit_timeout_s}", *extra_args,
        ]

    with _serve("triton", command, env, ready_timeout_s) as endpoints:
        yield endpoints


@contextlib.contextmanager
def asr_server_process(repo: Path, *, extra_args: Sequence[str] = (), ready_timeout_s: float = READY_TIMEOUT_S,
                       exit_timeout_s: int = 5) -> Iterator[Endpoints]:
    """Our `asr-server` command (this interpreter) serving `repo` on 127.0.0.1, started like real_triton."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))

    def command(grpc_port: int, http_port: int, metrics_port: int) -> list[str]:
        return [
            sys.executable, "-m", "asr_server.cli", "--model-repository", str(repo),
            "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc_port),
            "--http-address", "127.0.0.1", "--http-port", str(http_port),
            "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port),
            f"--exit-timeout-secs={exit_timeout_s}", *extra_args,
        ]

    with _serve("asr_server", command, env, ready_timeout_s) as endpoints:
        yield endpoints
