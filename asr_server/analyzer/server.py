"""The server a search measures: ours started on a copy of the repository, or one already running.

Either way it must run with explicit model control: candidate configs are loaded with Triton's repository
API (RepositoryModelLoad with a `config` override), so the repository on disk is never edited and the same
code drives a running server. The local server binds 127.0.0.1, dies with this process (PR_SET_PDEATHSIG)
and is stopped at the end.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from asr_server.child_process import die_with_parent, stop_process

START_TIMEOUT_S = 120.0  # python models import numpy/onnxruntime: start-up takes seconds on 2 busy cores
GRPC_STARTED = re.compile(r"Started GRPCInferenceService at 127\.0\.0\.1:(\d+)")  # the server's own line
LOAD_TIMEOUT_S = 300.0  # gRPC deadline of one RepositoryModelLoad


class ModelControl:
    """Load, unload and inspect models over gRPC on a server with explicit model control."""

    def __init__(self, url: str, pid: Optional[int] = None):
        import tritonclient.grpc as grpcclient

        self.url = url
        self.pid = pid  # the server's process id when known (memory is read from /proc)
        self.client = grpcclient.InferenceServerClient(url)

    def check_explicit(self) -> None:
        """A server in 'none' mode refuses loads with a message that does not say why; say it first."""
        try:
            self.client.unload_model("__asr_model_analyzer_probe__")
        except Exception as exc:  # tritonclient raises InferenceServerException
            text = str(exc)
            if "explicit model load / unload is not allowed" in text:
                raise RuntimeError(f"{self.url}: the server must run with --model-control-mode=explicit") from None

    def config(self, name: str) -> mc.ModelConfig:
        return self.client.get_model_config(name).config

    def load(self, name: str, config: Optional[mc.ModelConfig] = None) -> None:
        """Load (or reload) `name`, with `config` replacing its config.pbtxt when given."""
        override = json_format.MessageToJson(config, preserving_proto_field_name=True) if config else None
        self.client.load_model(name, config=override, client_timeout=LOAD_TIMEOUT_S)

    def unload(self, name: str) -> None:
        self.client.unload_model(name, client_timeout=LOAD_TIMEOUT_S)

    def memory_mb(self) -> Optional[float]:
        """Resident memory of the server process (MB), or None when it is not ours to read."""
        if self.pid is None:
            return None
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
        except OSError:
            return None
        return None

    def close(self) -> None:
        self.client.close()


class LocalServer:
    """`asr-server` on a private copy of `repository`, explicit model control, gRPC on a free local port."""

    def __init__(self, repository: Path, models: list[str], log_path: Optional[Path] = None):
        self.source = Path(repository)
        self.models = models  # the model folders to copy (the model, its steps, its BLS models)
        self.log_path = log_path
        self.proc: Optional[subprocess.Popen] = None
        self.workdir: Optional[Path] = None

    def __enter__(self) -> ModelControl:
        try:
            return self._start()
        except BaseException:
            self._cleanup()  # __exit__ does not run when __enter__ raises: no server or copy left behind
            raise

    def _start(self) -> ModelControl:
        self.workdir = Path(tempfile.mkdtemp(prefix="asr-model-analyzer-"))
        repo = self.workdir / "repository"
        repo.mkdir()
        for name in self.models:
            src = self.source / name
            # hard links where the file system allows: the models' graphs are large and never written
            try:
                shutil.copytree(src, repo / name, copy_function=os.link,
                                ignore=shutil.ignore_patterns("__pycache__"))
            except OSError:
                shutil.rmtree(repo / name, ignore_errors=True)
                shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
        # The server binds "any free port" itself and says which in its log: a port picked here and handed
        # over could be taken by another bind in between.
        log_file = self.log_path or self.workdir / "server.log"
        log_file.touch()
        start = log_file.stat().st_size  # an appended log may hold earlier servers' lines
        with open(log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "asr_server", "--model-repository", str(repo),
                 "--model-control-mode", "explicit", "--grpc-address", "127.0.0.1", "--grpc-port", "0",
                 "--allow-http", "false", "--allow-metrics", "false", "--exit-timeout-secs", "5"],
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT_S
        control = None
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"asr-server exited with {self.proc.returncode} at start"
                                       + (f" (log: {self.log_path})" if self.log_path else ""))
                if control is None:
                    with open(log_file, "rb") as log:
                        log.seek(start)
                        started = GRPC_STARTED.search(log.read().decode(errors="replace"))
                    if started:
                        control = ModelControl(f"127.0.0.1:{started.group(1)}", pid=self.proc.pid)
                if control is not None:
                    with contextlib.suppress(Exception):
                        if control.client.is_server_live():
                            return control
                if time.monotonic() > deadline:
                    raise RuntimeError(f"asr-server did not come up within {START_TIMEOUT_S:.0f} s")
                time.sleep(0.2)
        except BaseException:
            if control is not None:
                control.close()
            raise

    def __exit__(self, *exc) -> None:
        self._cleanup()

    def _cleanup(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 15)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


class RemoteServer:
    """A server someone else runs (it must use --model-control-mode=explicit); memory is not measured."""

    def __init__(self, url: str):
        self.url = url

    def __enter__(self) -> ModelControl:
        control = ModelControl(self.url)
        control.check_explicit()
        return control

    def __exit__(self, *exc) -> None:
        return None

